"""Tool-call grading in the manner of BFCL's AST checker, plus the tool cases read from fixtures.

A call is checked in this order, and the first problem names its kind in the reason:
``wrong_function`` → ``invalid_json`` → ``missing_required`` / ``unexpected_param`` →
``schema_violation`` (the tool's JSON Schema, via jsonschema) → ``wrong_value``. A set of calls
first checks ``wrong_count``; parallel calls match in any order.

``function.arguments`` is, by the API, a string holding the JSON text of an object. Arguments
that are not (a JSON object sent as an object, ``null``, text that does not parse, JSON that is no
object) are the call's slot malformed: an ``invalid_json`` *format* failure whose reason says what
came, never an exception (:func:`read_arguments`).

Expected values are compared the way a careful reviewer would: strings ignore case, whitespace and
punctuation between words ("New York" = "new-york") but not between digits ("50.2" is not "502"),
numbers compare by value (68 = 68.0, "3" = "3.0" where the schema allows a string). What a case
accepts is data in the fixture, as BFCL's possible answers are: an expected value may be
``{"$one_of": [...]}`` (the accepted forms, e.g. "Lisbon" or "Lisbon, Portugal"; ``null`` there:
may be left out), ``{"$unordered": [...]}`` (a list whose order does not matter) or
``{"$subset_of": [...]}`` (a list, possibly empty, of some of these values) or
``{"$place": [names], "regions": [...]}`` (a place by one of its names, optionally followed by
region or country qualifiers: "Denver", "Denver, CO", "Denver, Colorado, USA").

Optional parameters follow BFCL's rule: an argument the case does not list may be omitted, sent as
``null`` or sent with the schema's ``default``; any other value nobody asked for is an
``unexpected_param``. An explicit ``null`` for an optional argument means "left out" to the schema
check too. Streamed and plain calls are compared as parsed values.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from pytest_qualify.graders import FORMAT, Verdict
from pytest_qualify.graders.contract import Accept, Contract, Question
from pytest_qualify.graders.text import json_objects, parse_number, tokens

ONE_OF = "$one_of"
UNORDERED = "$unordered"
SUBSET_OF = "$subset_of"
PLACE = "$place"
# Separators that carry no meaning in a free-text argument value (BFCL's standardisation) — except
# a "." or "," between two digits, which is part of a number ("50.2" is not "502").
STRING_NOISE = re.compile(r"(?!(?<=\d)[.,](?=\d))[\s,./\-_*^'\"!?;:()]+")


class CallLike(Protocol):
    """A tool call as the client returns it: the function name and the raw JSON arguments."""

    @property
    def name(self) -> str: ...

    @property
    def arguments(self) -> Any: ...  # a JSON string by the API; anything else is kept to be refused


@dataclass(frozen=True)
class RawCall:
    """A tool call built from plain values (tests, or calls found written as text)."""

    name: str
    arguments: Any


@dataclass(frozen=True)
class ExpectedCall:
    name: str
    arguments: Mapping[str, Any]


# -- fixture records ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ToolCase:
    id: str
    prompt: str
    calls: tuple[ExpectedCall, ...]


@dataclass(frozen=True)
class RoundTripCase:
    """The round trip: the call, the tool result sent back (``result_field`` drawn fresh from
    ``result_range`` each time), and the final answer's contract — one JSON object whose amount
    must be that drawn value (compared under ``amount``'s rules) and whose other fields are graded
    as ``contract`` says. ``prompt`` is the question with the contract's wording after it."""

    id: str
    text: str
    calls: tuple[ExpectedCall, ...]
    result: Mapping[str, Any]
    result_field: str
    result_range: tuple[float, float]
    contract: Contract
    amount: Mapping[str, Any]  # the amount field's rules (kind, tolerance, units), its value drawn per run

    @property
    def prompt(self) -> str:
        return f"{self.text.rstrip()} {self.contract.instruction()}"

    def final_contract(self, value: float) -> Contract:
        """The final answer's contract once the tool returned ``value``."""
        amount = Accept.of({**self.amount, "accept": [value]})
        return replace(self.contract, fields={**self.contract.fields, "amount": amount})


@dataclass(frozen=True)
class ToolFixtures:
    tools: tuple[Mapping[str, Any], ...]
    system: str
    cases: tuple[ToolCase, ...]
    irrelevance: tuple[Question, ...]  # no tool fits: a text answer under its contract
    parallel: tuple[ToolCase, ...]
    round_trip: tuple[RoundTripCase, ...]
    streaming: tuple[str, ...]

    def tool_case(self, case_id: str) -> ToolCase:
        for case in self.cases + self.parallel:
            if case.id == case_id:
                return case
        raise KeyError(case_id)

    @property
    def schemas(self) -> dict[str, Mapping[str, Any]]:
        return tool_schemas(self.tools)


def tool_schemas(tools: Sequence[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """Function name → its parameters' JSON Schema, from an OpenAI ``tools`` list."""
    return {t["function"]["name"]: t["function"].get("parameters") or {"type": "object"} for t in tools}


def canonical_arguments(expected: Mapping[str, Any]) -> dict[str, Any]:
    """The plainest concrete arguments an expected call allows (first alternative, given order)."""

    def concrete(value: Any) -> Any:
        if isinstance(value, Mapping) and ONE_OF in value:
            return concrete(value[ONE_OF][0])
        if isinstance(value, Mapping) and UNORDERED in value:
            return [concrete(v) for v in value[UNORDERED]]
        if isinstance(value, Mapping) and SUBSET_OF in value:
            return [concrete(v) for v in value[SUBSET_OF][:1]]
        if isinstance(value, Mapping) and PLACE in value:
            return _names(value)[0]
        if isinstance(value, Mapping):
            return {k: concrete(v) for k, v in value.items() if _first_is_value(v)}
        if isinstance(value, list):
            return [concrete(v) for v in value]
        return value

    return concrete(dict(expected))


def _first_is_value(value: Any) -> bool:
    return not (isinstance(value, Mapping) and ONE_OF in value and value[ONE_OF][0] is None)


def _omittable(value: Any) -> bool:
    return isinstance(value, Mapping) and ONE_OF in value and None in value[ONE_OF]


# -- value comparison ----------------------------------------------------------------------------


def normalize_string(text: str) -> str:
    """Case-folded, NFKC, without whitespace or punctuation that does not change meaning."""
    folded = STRING_NOISE.sub("", unicodedata.normalize("NFKC", text).casefold())
    return unicodedata.normalize("NFKC", folded)  # removing a space can leave a composable pair


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        parsed = parse_number(value)
        return float(parsed) if parsed is not None else None
    return None


def _show(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else repr(value)


@dataclass(frozen=True)
class Problem:
    kind: str
    message: str


def _wrong(path: str, wanted: str, given: Any) -> list[Problem]:
    return [Problem("wrong_value", f"argument {path}: expected {wanted}, got {_show(given)}")]


def compare_value(expected: Any, given: Any, path: str, schema: Mapping[str, Any] | None = None) -> list[Problem]:
    """Every way ``given`` differs from ``expected`` (empty when they match); ``schema`` is the
    value's JSON Schema, for the defaults of optional arguments inside it."""
    if isinstance(expected, Mapping) and ONE_OF in expected:
        options = [o for o in expected[ONE_OF] if o is not None]
        if any(not compare_value(o, given, path, schema) for o in options):
            return []
        return _wrong(path, " or ".join(_show(o) for o in options), given)
    if isinstance(expected, Mapping) and UNORDERED in expected:
        wanted = list(expected[UNORDERED])
        if isinstance(given, list) and len(given) == len(wanted):
            for order in itertools.permutations(given):
                if all(not compare_value(w, g, path) for w, g in zip(wanted, order)):
                    return []
        return _wrong(path, f"{_show(wanted)} in any order", given)
    if isinstance(expected, Mapping) and PLACE in expected:
        if isinstance(given, str) and _is_place(given, expected):
            return []
        return _wrong(path, " or ".join(map(repr, _names(expected))) + " (a region or country after it is fine)", given)
    if isinstance(expected, Mapping) and SUBSET_OF in expected:
        allowed = list(expected[SUBSET_OF])
        if isinstance(given, list):
            left = list(allowed)
            for item in given:
                hit = next((i for i, a in enumerate(left) if not compare_value(a, item, path)), None)
                if hit is None:
                    break
                left.pop(hit)
            else:
                return []
        return _wrong(path, f"a list of some of {_show(allowed)}", given)
    if isinstance(expected, Mapping):
        if not isinstance(given, Mapping):
            return _wrong(path, "an object", given)
        return compare_arguments(expected, given, path + ".", schema)
    if isinstance(expected, list):
        if not isinstance(given, list) or len(given) != len(expected):
            return _wrong(path, _show(expected), given)
        items = (schema or {}).get("items")
        return [p for i, (e, g) in enumerate(zip(expected, given)) for p in compare_value(e, g, f"{path}[{i}]", items)]
    want_n, got_n = _number(expected), _number(given)
    if want_n is not None and got_n is not None:
        # Numbers compare by value: 68 for 68.0, "3" for "3.0" (the schema judges the type).
        same = math.isclose(want_n, got_n, rel_tol=1e-9, abs_tol=1e-9)
    elif isinstance(expected, str) and isinstance(given, str):
        same = normalize_string(expected) == normalize_string(given)
    else:
        same = expected == given and type(expected) is type(given)
    return [] if same else _wrong(path, _show(expected), given)


def _names(place: Mapping[str, Any]) -> list[str]:
    names = place[PLACE]
    return [names] if isinstance(names, str) else list(names)


def _is_place(given: str, place: Mapping[str, Any]) -> bool:
    """The place's name, then only words of its region qualifiers ("Denver, CO, USA")."""
    words = tokens(given)
    regions = {w for region in place.get("regions", ()) for w in tokens(region)}
    for name in _names(place):
        head = tokens(name)
        if words[: len(head)] == head and all(w in regions for w in words[len(head):]):
            return True
    return False


def compare_arguments(expected: Mapping[str, Any], given: Mapping[str, Any], prefix: str = "",
                      schema: Mapping[str, Any] | None = None) -> list[Problem]:
    """Missing, unexpected and wrong arguments of one object, recursively (``schema``: the object's
    JSON Schema, whose defaults an unasked optional argument may carry)."""
    properties = (schema or {}).get("properties", {})
    problems = []
    for key, want in expected.items():
        if key not in given:
            if not _omittable(want):
                problems.append(Problem("missing_required", f"argument {prefix}{key} is missing"))
            continue
        if given[key] is None and _omittable(want):
            continue  # an explicit null for an argument that may be left out
        problems.extend(compare_value(want, given[key], prefix + key, properties.get(key)))
    for key, value in given.items():
        if key in expected or value is None:
            continue  # null: left out, the same as not sending it
        prop = properties.get(key, {})
        if "default" in prop and not compare_value(prop["default"], value, prefix + key, prop):
            continue  # the schema's default, written out: what leaving it out would mean
        problems.append(Problem("unexpected_param", f"argument {prefix}{key}={_show(value)} was not asked for"))
    return problems


def without_optional_nulls(value: Any, schema: Mapping[str, Any] | None) -> Any:
    """The arguments with each optional ``null`` argument left out (as the schema check should
    read them: null for an optional argument means "not given")."""
    if not isinstance(value, dict) or not isinstance(schema, Mapping):
        return value
    required = set(schema.get("required", ()))
    properties = schema.get("properties", {})
    return {k: without_optional_nulls(v, properties.get(k)) for k, v in value.items()
            if not (v is None and k not in required)}


def schema_problems(arguments: Any, schema: Mapping[str, Any]) -> list[str]:
    """Where the arguments break the tool's JSON Schema, as "path: message" lines."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(schema)
    out = []
    for err in sorted(validator.iter_errors(arguments), key=lambda e: list(e.absolute_path)):
        where = ".".join(str(p) for p in err.absolute_path) or "arguments"
        out.append(f"{where}: {err.message}")
    return out


# -- one call, several calls, no call -------------------------------------------------------------


class ArgumentsError(ValueError):
    """A call's ``arguments`` are not the JSON text of an object; the message says what came."""


def read_arguments(raw: Any) -> dict[str, Any]:
    """A call's ``arguments`` as the object they encode. The API sends a string holding JSON; an
    empty string is a call with no arguments. :class:`ArgumentsError` for anything else: a JSON
    value sent in place of the string (an object, a list, a number), ``null``, text that does not
    parse, JSON that is not an object."""
    if raw is None:
        raise ArgumentsError("arguments are null, expected a string holding a JSON object")
    if not isinstance(raw, str):
        raise ArgumentsError(f"arguments came as a JSON {_json_kind(raw)} ({_short_json(raw)}), not as a string holding JSON")
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ArgumentsError(f"arguments {raw[:120]!r} are not JSON ({exc.msg})") from None
    if not isinstance(value, dict):
        raise ArgumentsError(f"arguments are a JSON {_json_kind(value)}, not an object: {raw[:120]!r}")
    return value


def _json_kind(value: Any) -> str:
    kinds = {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}
    return kinds.get(type(value), "number" if isinstance(value, (int, float)) else type(value).__name__)


def _short_json(value: Any, limit: int = 120) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def _arguments_text(raw: Any) -> str:
    """The arguments as a reason shows them: the string as sent, anything else as JSON."""
    return raw if isinstance(raw, str) else _short_json(raw)


def _reject(kind: str, message: str, call_name: str) -> Verdict:
    return Verdict.reject(f"{kind}: {message} ({call_name})")


def _problems(problems: Sequence[Problem], call_name: str) -> Verdict:
    shown = "; ".join(f"{p.kind}: {p.message}" for p in problems[:3])
    more = f"; and {len(problems) - 3} more" if len(problems) > 3 else ""
    return Verdict.reject(f"{shown}{more} ({call_name})")


def grade_call(call: CallLike, expected: ExpectedCall, schemas: Mapping[str, Mapping[str, Any]]) -> Verdict:
    """One call against one expected call and the tool's schema."""
    if call.name != expected.name:
        return Verdict.reject(f"wrong_function: called {call.name or '(no name)'!r}, expected {expected.name!r}")
    try:
        arguments = read_arguments(call.arguments)
    except ArgumentsError as exc:
        return Verdict.reject(f"{FORMAT}: invalid_json: {exc} ({call.name})", FORMAT)
    schema = schemas.get(call.name)
    if schema is None:
        return Verdict.reject(f"wrong_function: {call.name!r} is not one of the offered tools")
    problems = compare_arguments(expected.arguments, arguments, schema=schema)
    structural = [p for p in problems if p.kind in ("missing_required", "unexpected_param")]
    if structural:
        return _problems(structural, call.name)
    violations = schema_problems(without_optional_nulls(arguments, schema), schema)
    if violations:
        return _reject("schema_violation", "; ".join(violations[:3]), call.name)
    if problems:
        return _problems(problems, call.name)
    return Verdict.accept(f"{call.name} matches")


def _describe(calls: Sequence[CallLike]) -> str:
    return ", ".join(f"{c.name}({_arguments_text(c.arguments)})" for c in calls) if calls else "none"


def grade_calls(
    calls: Sequence[CallLike],
    expected: Sequence[ExpectedCall],
    schemas: Mapping[str, Mapping[str, Any]],
    content: str | None = None,
) -> Verdict:
    """All calls of one answer: the exact count, then each expected call matched in any order."""
    if len(calls) != len(expected):
        reason = (f"wrong_count: expected {len(expected)} tool call(s) "
                  f"({', '.join(e.name for e in expected)}), got {len(calls)}: {_describe(calls)}")
        if not calls:
            in_text = call_in_text(content)
            if in_text is not None:
                # The call is there, in the wrong channel: the tool-call contract was not followed
                # (a format failure), whatever its arguments say.
                return Verdict.reject(f"{FORMAT}: {reason}; the content holds a call written as text instead: "
                                      f"{in_text.name}({in_text.arguments})", FORMAT)
            elif content:
                reason += f"; content {content.strip()[:100]!r}"
        return Verdict.reject(reason)
    best: tuple[tuple[int, float], list[Verdict]] | None = None
    for order in itertools.permutations(calls):
        verdicts = [grade_call(call, want, schemas) for call, want in zip(order, expected)]
        if all(verdicts):
            return Verdict.accept(f"{len(calls)} call(s) match")
        # Report the pairing closest to right, so the reason compares each call with its own target.
        score = (sum(map(bool, verdicts)), sum(_likeness(c, w) for c, w in zip(order, expected)))
        if best is None or score > best[0]:
            best = (score, verdicts)
    assert best is not None
    return Verdict.all_failed(best[1])


def _likeness(call: CallLike, expected: ExpectedCall) -> float:
    import difflib

    want = json.dumps(canonical_arguments(expected.arguments), sort_keys=True)
    return float(call.name == expected.name) + difflib.SequenceMatcher(None, want, _arguments_text(call.arguments)).ratio()


def grade_no_call(calls: Sequence[CallLike], content: str | None) -> Verdict:
    """No tool fits: the answer must be text, with no call in tool_calls or written in the content."""
    if calls:
        return Verdict.reject(f"wrong_count: expected no tool call, got {len(calls)}: {_describe(calls)}")
    in_text = call_in_text(content)
    if in_text is not None:
        return Verdict.reject(f"wrong_count: expected no tool call, the content holds one: {in_text.name}({in_text.arguments})")
    if content is None or not content.strip():
        return Verdict.reject("expected a text answer, got empty content")
    return Verdict.accept("answered in text")


def call_in_text(content: str | None) -> RawCall | None:
    """A tool call written into the content as JSON (what small models do instead of calling)."""
    for obj in json_objects(content or ""):
        obj = obj.get("function") if isinstance(obj.get("function"), dict) else obj
        args = obj.get("arguments", obj.get("parameters"))
        if isinstance(obj.get("name"), str) and isinstance(args, (dict, str)):
            return RawCall(obj["name"], args if isinstance(args, str) else json.dumps(args))
    return None


# -- streaming -----------------------------------------------------------------------------------


def _parsed(call: CallLike) -> tuple[str, Any]:
    try:
        return call.name, read_arguments(call.arguments)
    except ArgumentsError as exc:
        return call.name, f"invalid: {exc}"


def same_calls(streamed: Sequence[CallLike], plain: Sequence[CallLike]) -> Verdict:
    """Streamed deltas reassembled into the same calls as the non-streamed answer, compared as
    parsed values (68 = 68.0, key order and spacing free), in any order."""
    a = [_parsed(c) for c in streamed]
    b = [_parsed(c) for c in plain]
    left = list(b)
    for call in a:
        hit = next((i for i, other in enumerate(left) if other == call), None)
        if hit is None:
            break
        left.pop(hit)
    if len(a) == len(b) and not left:
        return Verdict.accept("streamed calls equal the non-streamed calls")
    return Verdict.reject(
        f"streamed calls {_describe(streamed)} differ from the non-streamed calls {_describe(plain)}"
    )


def grade_stream_shape(name_deltas: Sequence[int], finish_reason: str | None) -> Verdict:
    """Each streamed call names its function in exactly one delta; the stream ends ``tool_calls``.

    A stream with no calls at all has no shape to judge: :func:`grade_calls` reports it.
    """
    if not name_deltas:
        return Verdict.accept("no tool calls streamed")
    repeated = [(i, n) for i, n in enumerate(name_deltas) if n != 1]
    if repeated:
        shown = ", ".join(f"call {i + 1} in {n} deltas" for i, n in repeated)
        return Verdict.reject(f"function name not streamed exactly once ({shown})")
    if finish_reason != "tool_calls":
        return Verdict.reject(f"finish_reason {finish_reason!r} after streamed tool calls, expected 'tool_calls'")
    return Verdict.accept("stream shape ok")
