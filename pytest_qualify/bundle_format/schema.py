"""The ``summary.json`` schema: its id and version, and validation against
``schemas/summary.schema.json``; the self-test's ``selftest.json`` schema id. On the ground floor,
so that a reader of an earlier summary (the baseline, the promoted run) validates it without
importing the summary builder. No pytest here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cache
from importlib import resources
from typing import Any

SCHEMA_ID = "pytest-qualify/summary"
SELFTEST_SCHEMA_ID = "pytest-qualify/selftest"  # selftest.json (selftest/engine.py writes it)
# 2: INCOMPLETE verdicts, latency SLO rows, Wilson intervals, baseline flips. A version-1 summary
# still validates (a baseline from before the change stays usable).
SCHEMA_VERSION = 2


class SummaryError(ValueError):
    """A summary that does not validate (or is not a summary at all)."""


@cache
def schema() -> dict[str, Any]:
    text = resources.files("pytest_qualify").joinpath("schemas/summary.schema.json").read_text()
    return json.loads(text)


def inline_leaf_refs(document: dict[str, Any]) -> dict[str, Any]:
    """The schema with each ``{"$ref": "#/$defs/NAME"}`` whose definition holds no reference of its
    own replaced by that definition: the same constraints, without a reference lookup for every
    value (a summary's item properties are thousands of values; jsonschema resolves a ``$ref`` at
    each, half of a run's validation time)."""
    defs = document.get("$defs", {})
    leaves = {f"#/$defs/{name}": body for name, body in defs.items() if '"$ref"' not in json.dumps(body)}

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            if set(node) == {"$ref"} and node["$ref"] in leaves:
                return leaves[node["$ref"]]
            return {key: walk(value) for key, value in node.items()}
        if isinstance(node, list):
            return [walk(value) for value in node]
        return node

    return walk(document)


@cache
def _validator() -> Any:
    import jsonschema

    return jsonschema.Draft202012Validator(inline_leaf_refs(schema()))


def validate(summary: Mapping[str, Any]) -> None:
    """Raise :class:`SummaryError` naming the first invalid field."""
    errors = sorted(_validator().iter_errors(summary), key=lambda e: list(e.absolute_path))
    if errors:
        err = errors[0]
        where = ".".join(str(p) for p in err.absolute_path) or "(top level)"
        raise SummaryError(f"summary field '{where}' is invalid: {err.message}")
