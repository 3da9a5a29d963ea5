"""Deterministic JSON: the answer to a ``response_format`` json_schema request.

This module's answer contract is the JSON object itself (the one module where the contract is
also enforced with ``response_format``: that is what it measures). The content must be one JSON
value — bare, as guided decoding returns it, or inside a single code fence (accepted, and reported
as fenced). Prose around the JSON is rejected: a caller that asked for a schema parses the content
as it is. Content that is not one JSON value, or does not validate against the schema, is a
``format:`` failure; a field whose value is not the task's expected value or one of its accepted
forms (``fixtures/json_tasks.toml``: the forms are data) is a miss. Scalars compare as the contract
compares a slot (graders/contract.py): numbers by value, strings case-folded with whitespace
collapsed and nothing else normalised; booleans only to booleans; lists in order, or as a multiset
for the task's ``unordered`` fields.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pytest_qualify.graders import Verdict
from pytest_qualify.graders.contract import Accept, compare, format_failure

_FENCE = re.compile(r"\A\s*```[\w+-]*[ \t]*\n?(.*?)\n?```\s*\Z", re.S)


class JsonAnswerError(ValueError):
    """The content is not one JSON value; the message says why."""


@dataclass(frozen=True)
class ParsedJson:
    value: Any
    fenced: bool


def parse_json_answer(content: str | None) -> ParsedJson:
    """The JSON value in ``content`` (bare or in one code fence), or :class:`JsonAnswerError`."""
    if content is None or not content.strip():
        raise JsonAnswerError("empty answer")
    fence = _FENCE.match(content)
    text = fence.group(1) if fence else content
    try:
        return ParsedJson(json.loads(text), fenced=bool(fence))
    except json.JSONDecodeError as exc:
        shown = " ".join(content.split())
        shown = shown if len(shown) <= 80 else shown[:77] + "..."
        if exc.msg == "Extra data":
            raise JsonAnswerError(f"content is not one JSON value (extra text at char {exc.pos}): {shown!r}") from None
        where = "truncated" if exc.pos >= len(text.rstrip()) else f"at char {exc.pos}"
        raise JsonAnswerError(f"content is not valid JSON ({exc.msg}, {where}): {shown!r}") from None


def _path(parts: Iterable[Any]) -> str:
    out = "$"
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else f".{p}"
    return out


def schema_problem(value: Any, schema: Mapping[str, Any]) -> str | None:
    """The first schema violation (path and message), or None when the value validates."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(value), key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path))))
    if not errors:
        return None
    err = errors[0]
    return f"{_path(err.absolute_path)}: {err.message}"


def _same(actual: Any, expected: Any, unordered: bool, accepted: Iterable[Any] = ()) -> bool:
    if any(_same(actual, form, unordered) for form in accepted):
        return True
    if isinstance(expected, bool) or isinstance(actual, bool):
        return type(actual) is type(expected) and actual == expected
    if isinstance(expected, (int, float)):
        return isinstance(actual, (int, float)) and float(actual) == float(expected)
    if isinstance(expected, str):
        # As a contract slot compares text: case and whitespace free, every other character counts.
        return isinstance(actual, str) and compare(actual, Accept((expected,))).ok
    if isinstance(expected, Mapping):
        return isinstance(actual, Mapping) and all(
            k in actual and _same(actual[k], v, False) for k, v in expected.items()
        )
    if isinstance(expected, list):
        if not isinstance(actual, list) or len(actual) != len(expected):
            return False
        if not unordered:
            return all(_same(a, e, False) for a, e in zip(actual, expected))
        left = list(actual)
        for e in expected:
            hit = next((i for i, a in enumerate(left) if _same(a, e, False)), None)
            if hit is None:
                return False
            left.pop(hit)
        return True
    return actual == expected


def value_problems(value: Any, expected: Mapping[str, Any], unordered: Iterable[str] = (),
                   accepted: Mapping[str, Iterable[Any]] | None = None) -> list[str]:
    """Each expected top-level field the value misses or gets wrong; ``accepted`` lists other
    written forms of a field's value with the same meaning ("Room B12" for "B12")."""
    loose = set(unordered)
    problems = []
    if not isinstance(value, Mapping):
        return [f"expected a JSON object, got {type(value).__name__}"]
    for key, want in expected.items():
        if key not in value:
            problems.append(f"field {key!r} missing (expected {want!r})")
        elif not _same(value[key], want, key in loose, (accepted or {}).get(key, ())):
            problems.append(f"field {key!r} is {value[key]!r}, expected {want!r}")
    return problems


def check_json_answer(
    content: str | None,
    schema: Mapping[str, Any],
    expected: Mapping[str, Any],
    *,
    unordered: Iterable[str] = (),
    accepted: Mapping[str, Iterable[Any]] | None = None,
) -> Verdict:
    """Accept content that is one JSON value, validates against ``schema`` and holds ``expected``
    (a field may instead hold one of its ``accepted`` forms)."""
    try:
        parsed = parse_json_answer(content)
    except JsonAnswerError as exc:
        return format_failure(str(exc))
    problem = schema_problem(parsed.value, schema)
    if problem:
        return format_failure(f"does not validate against the schema: {problem}")
    wrong = value_problems(parsed.value, expected, unordered, accepted)
    if wrong:
        return Verdict.reject("; ".join(wrong))
    return Verdict.accept("valid against the schema with the expected values" + (" (inside a code fence)" if parsed.fenced else ""))


def check_same_value(first: str | None, second: str | None) -> Verdict:
    """Two fresh answers to the same task (temperature 0, same seed, different cache salts) must
    parse to the same value: key order, spacing and a fence may differ, a value may not."""
    try:
        a, b = parse_json_answer(first).value, parse_json_answer(second).value
    except JsonAnswerError as exc:
        return Verdict.reject(f"the answers cannot be compared: {exc}")
    if _equal(a, b):
        return Verdict.accept("both answers parse to the same value")
    return Verdict.reject(f"two answers to the same request parse to different values: {_difference(a, b)}")


def _difference(a: Any, b: Any) -> str:
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        for key in [*a, *(k for k in b if k not in a)]:
            if key not in b or key not in a:
                return f"field {key!r} only in the {'first' if key in a else 'second'} answer"
            if not _equal(a[key], b[key]):
                return f"field {key!r} is {a[key]!r}, then {b[key]!r}"
    shown = lambda v: repr(v) if len(repr(v)) <= 80 else repr(v)[:77] + "..."  # noqa: E731
    return f"{shown(a)}, then {shown(b)}"


def _equal(a: Any, b: Any) -> bool:
    """Equal as parsed JSON: numbers by value (1 = 1.0), booleans only to booleans, lists in order."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    return a == b
