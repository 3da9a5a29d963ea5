"""The tool-use request set and the reference deployment's floor file.

The set (``fixtures/tool_use/requests.json``) is generated from ``fixtures/tool_use/templates.toml``
over the tools of ``fixtures/tools/tools.json`` (:func:`generate`: seeded, so the same templates
give the same bytes) and stored; a test holds the stored file to a fresh generation. Each request is
a template's prompt with its pools' values drawn, and the calls it asks for with the same values
(none where no tool fits).

The floor file (``pytest-qualify/tool-use-floor``) holds the tool-use figures of a reference
deployment's earlier runs, read from their bundles' ``summary.json`` (:func:`floor_from_bundles`),
as an A/A campaign's ``noise-floor.json`` holds a recipe's boot-to-boot spread; the module's
thresholds come from it (graders/tool_use.py ``thresholds``), never from a constant. It names the
workload it was measured on (the requests asked, the set's digest): a floor of another workload is a
usage error. No pytest here.

    python -m pytest_qualify.tasks.tool_use generate             # rewrite requests.json
    python -m pytest_qualify.tasks.tool_use floor OUT BUNDLE...  # a floor file from earlier bundles
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import sys
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

from pytest_qualify.graders.tool_use import MEASURES, FloorError, UseRequest
from pytest_qualify.graders.tools import PLACE, ExpectedCall
from pytest_qualify.tasks.fixture_data import read_json, read_text

TEMPLATES = "tool_use/templates.toml"
REQUESTS = "tool_use/requests.json"
SET_SCHEMA_ID = "pytest-qualify/tool-use-requests"
FLOOR_SCHEMA_ID = "pytest-qualify/tool-use-floor"
MODULE = "tool_use"
# The figures the module records on its item (summary.json items[].properties), read back by the floor.
PROPERTY = {m: f"tool_use_{m}" for m in MEASURES}
REQUESTS_PROPERTY = "tool_use_requests"
SET_PROPERTY = "tool_use_set_sha256"
TEMPERATURE_PROPERTY = "tool_use_temperature"
NULL = "$null"  # TOML has no null: "$null" in a "$one_of" list means the argument may be left out
_SLOT_RE = re.compile(r"\{(\w+)(?:#(\d))?\}")


# -- generation -------------------------------------------------------------------------------------


def _draw(pools: Mapping[str, Sequence[Any]], names: set[tuple[str, int]], rng: random.Random) -> dict[tuple[str, int], Any]:
    """One value per slot ("{city}", "{city#2}"); a pool's numbered slots draw distinct values."""
    drawn: dict[tuple[str, int], Any] = {}
    for pool in sorted({n for n, _ in names}):
        wanted = sorted(i for n, i in names if n == pool)
        values = rng.sample(list(pools[pool]), len(wanted))
        drawn.update({(pool, i): v for i, v in zip(wanted, values)})
    return drawn


def _shown(value: Any) -> str:
    """A value as the prompt writes it: a place by its first name, a number as digits."""
    if isinstance(value, list):
        return str(value[0])
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _fill(spec: Any, drawn: Mapping[tuple[str, int], Any]) -> Any:
    """An expected value with its slots filled: a slot that is the whole string takes the drawn
    value itself (a number stays a number; a place becomes ``$place`` with its regions)."""
    if isinstance(spec, str):
        whole = _SLOT_RE.fullmatch(spec)
        if whole:
            value = drawn[(whole.group(1), int(whole.group(2) or 1))]
            return {PLACE: [value[0]], "regions": list(value[1:])} if isinstance(value, list) else value
        if spec == NULL:
            return None
        return _SLOT_RE.sub(lambda m: _shown(drawn[(m.group(1), int(m.group(2) or 1))]), spec)
    if isinstance(spec, Mapping):
        return {k: _fill(v, drawn) for k, v in spec.items()}
    if isinstance(spec, list):
        return [_fill(v, drawn) for v in spec]
    return spec


def _slots(spec: Any) -> set[tuple[str, int]]:
    return {(m.group(1), int(m.group(2) or 1)) for m in _SLOT_RE.finditer(json.dumps(spec))}


def generate(templates_text: str) -> dict[str, Any]:
    """The request set from the templates' text: ``requests`` requests, templates drawn by their
    ``share`` and values from their pools with ``random.Random(seed)``; the prompts are distinct."""
    import tomllib

    data = tomllib.loads(templates_text)
    rng = random.Random(int(data["seed"]))
    templates, pools = data["template"], data["pools"]
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    while len(out) < int(data["requests"]):
        template = rng.choices(templates, weights=[t["share"] for t in templates])[0]
        names = _slots([template["prompt"], template["calls"]])
        drawn = _draw(pools, names, rng)
        prompt = _SLOT_RE.sub(lambda m: _shown(drawn[(m.group(1), int(m.group(2) or 1))]), template["prompt"])
        if prompt in seen:
            continue
        seen.add(prompt)
        out.append({"id": f"{template['id']}-{len(out) + 1:04d}", "template": template["id"], "prompt": prompt,
                    "calls": [{"name": c["name"], "arguments": _fill(c["arguments"], drawn)} for c in template["calls"]]})
    return {"schema": SET_SCHEMA_ID, "seed": int(data["seed"]),
            "templates_sha256": hashlib.sha256(templates_text.encode()).hexdigest(), "requests": out}


def render(request_set: Mapping[str, Any]) -> str:
    """The stored file's exact text (one request a line, so a diff shows which changed)."""
    head = {k: v for k, v in request_set.items() if k != "requests"}
    lines = [json.dumps(r, ensure_ascii=False, sort_keys=True) for r in request_set["requests"]]
    body = ",\n".join(f"  {line}" for line in lines)
    return json.dumps(head, sort_keys=True)[:-1] + ', "requests": [\n' + body + "\n]}\n"


# -- reading ----------------------------------------------------------------------------------------


@cache
def request_set() -> tuple[UseRequest, ...]:
    data = read_json(REQUESTS)
    return tuple(UseRequest(r["id"], r["template"], r["prompt"],
                            tuple(ExpectedCall(c["name"], c["arguments"]) for c in r["calls"]))
                 for r in data["requests"])


@cache
def set_sha256() -> str:
    """The stored set's digest: a floor measured on another set is no floor for this one."""
    return hashlib.sha256(read_text(REQUESTS).encode()).hexdigest()


def sample(count: int) -> tuple[UseRequest, ...]:
    """The first ``count`` requests (the set is drawn in random order, so any prefix is a sample of it)."""
    requests = request_set()
    if not 1 <= count <= len(requests):
        raise ValueError(f"tool_use requests must be between 1 and {len(requests)}, not {count}")
    return requests[:count]


def workload(count: int, temperature: float = 0.0) -> dict[str, Any]:
    return {"requests": count, "set_sha256": set_sha256(), "temperature": float(temperature)}


def read_floor(path: str | Path, count: int, temperature: float = 0.0) -> list[dict[str, float]]:
    """The reference's runs' figures from a floor file measured on this workload; :class:`FloorError`
    (the message names the file) when it cannot be read as one or was measured on another."""
    from pytest_qualify.bundle_format.earlier import EarlierRunError, read_earlier

    label = f"tool-use floor {path}"
    try:
        data = read_earlier(Path(path), label, FLOOR_SCHEMA_ID).data
    except EarlierRunError as exc:
        raise FloorError(str(exc)) from None
    want = workload(count, temperature)
    got = data.get("workload") or {}
    if got != want:
        diff = "; ".join(f"{k}: {got.get(k)!r} there, {want[k]!r} here" for k in want if got.get(k) != want[k])
        raise FloorError(f"{label} was measured on another workload: {diff}")
    runs = data.get("runs")
    if not isinstance(runs, list) or not all(isinstance(r, Mapping) and isinstance(r.get("figures"), Mapping) for r in runs):
        raise FloorError(f"{label}: 'runs' must be a list of runs with their 'figures'")
    return [dict(r["figures"]) for r in runs]


def floor_from_bundles(bundles: Sequence[str | Path], count: int | None = None) -> dict[str, Any]:
    """A floor file's content from earlier bundles of the reference deployment: one run per
    repetition of the module's item in each bundle's ``summary.json``. Every run must be of one
    workload (the requests asked and the set's digest), which the file then names."""
    from pytest_qualify.bundle_format.earlier import EarlierRunError, read_earlier
    from pytest_qualify.bundle_format.schema import SCHEMA_ID

    runs, workloads = [], set()
    for bundle in bundles:
        path = Path(bundle) / "summary.json" if Path(bundle).is_dir() else Path(bundle)
        try:
            summary = read_earlier(path, f"bundle {bundle}", SCHEMA_ID).data
        except EarlierRunError as exc:
            raise FloorError(str(exc)) from None
        # Judged against an earlier floor or measured with none (not judged): the figures are the run's either way.
        items = [i for i in summary.get("items") or [] if i.get("module") == MODULE
                 and REQUESTS_PROPERTY in (i.get("properties") or {})]
        if not items:
            raise FloorError(f"bundle {bundle}: no {MODULE} item recorded its figures in it")
        for item in items:
            props = item.get("properties") or {}
            if any(not isinstance(props.get(PROPERTY[m]), (int, float)) for m in MEASURES):
                raise FloorError(f"bundle {bundle}: {item.get('nodeid')} has no figure for every measure "
                                 f"({', '.join(f'{m} {props.get(PROPERTY[m])!r}' for m in MEASURES)})")
            workloads.add((int(props[REQUESTS_PROPERTY]), str(props[SET_PROPERTY]), float(props.get(TEMPERATURE_PROPERTY, 0.0))))
            runs.append({"bundle": Path(bundle).name if Path(bundle).is_dir() else Path(bundle).parent.name, "run_id": (summary.get("run") or {}).get("id"),
                         "simulated": bool(summary.get("simulated")), "repetition": item.get("repetition"),
                         "figures": {m: float(props[PROPERTY[m]]) for m in MEASURES}})
    if len(workloads) != 1:
        raise FloorError(f"the bundles were measured on {len(workloads)} workloads (requests, set digest, temperature): "
                         f"{sorted(workloads)}")
    (requests, digest, temperature), = workloads
    if count is not None and count != requests:
        raise FloorError(f"the bundles asked {requests} requests, not {count}")
    return {"schema": FLOOR_SCHEMA_ID, "workload": {"requests": requests, "set_sha256": digest, "temperature": temperature},
            "rule": "each measure's threshold: the lower one-sided t prediction bound for one new run from these "
                    "runs, Sidak-adjusted over the three measures (alpha 0.05 in all)", "runs": runs}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pytest_qualify.tasks.tool_use", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("generate", help=f"rewrite fixtures/{REQUESTS} from fixtures/{TEMPLATES}")
    floor = sub.add_parser("floor", help="write a tool-use floor file from earlier bundles of the reference deployment")
    floor.add_argument("out", type=Path)
    floor.add_argument("bundles", nargs="+")
    args = parser.parse_args(argv)
    if args.command == "generate":
        from importlib import resources

        target = Path(str(resources.files("pytest_qualify.fixtures").joinpath(REQUESTS)))
        target.write_text(render(generate(read_text(TEMPLATES))), encoding="utf-8")
        print(target)
        return 0
    try:
        data = floor_from_bundles(args.bundles)
    except FloorError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 4
    args.out.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    print(f"{args.out}: {len(data['runs'])} runs of {data['workload']['requests']} requests")
    return 0


if __name__ == "__main__":
    sys.exit(main())
