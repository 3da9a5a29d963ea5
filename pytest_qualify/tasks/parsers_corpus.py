"""The parsers module's corpus, generated with hypothesis strategies and stored.

``python -m pytest_qualify.tasks.parsers_corpus [PATH]`` writes ``fixtures/parsers/corpus.jsonl``
(one case a line, :class:`tasks.parsers.ParserCase`); ``tests/tasks/test_parsers_corpus.py``
generates it again and holds the stored file to it, so the corpus a run asks is the one this file
makes, and every run asks the same cases.

Arguments are drawn from each tool's JSON Schema (the tools module's set and the parsers' own, which
add booleans, nullable text, free-form objects and nested arrays), so every value is one the served
parser must return as it is: strings over an alphabet heavy in what the XML syntax and JSON escape
(``<``, ``>``, ``&``, quotes, backslashes, line breaks, tabs) and in Unicode (accents, CJK,
right-to-left, emoji), empty and 10,000-character strings, numbers written as strings, integers and
floats at their extremes. The schema's own mapping is written here rather than taken from
hypothesis-jsonschema: its strings are drawn from all of Unicode, and these must favour markup and
keep out the syntax's own terminals (a value holding ``</parameter>`` is not a value the syntax can
carry, in any parser).

Generation is seeded per kind (``SEEDS``), with no example database and without the constants
hypothesis mines from the project's own source: the same hypothesis release draws the same corpus,
in any process.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest.mock import patch

from hypothesis import strategies as st

from pytest_qualify.tasks.parsers import Call, ParserCase, corpus_tools

# How many cases of each kind, and the seed each kind is drawn with.
COUNTS = {"call": 1300, "parallel": 260, "after_content": 220, "after_reasoning": 200, "long_string": 6,
          "reasoning": 320, "held": 240}
SEEDS = {kind: 4300 + i for i, kind in enumerate(COUNTS)}
LONG_STRING_CHARS = 10_000
# Anything that reads as one of the syntax's tags, spaces inside included (vLLM's qwen3 parser
# matches ``<\s*/\s*parameter\s*>``): kept out of every drawn value.
_TAG = re.compile(r"<\s*/?\s*(parameter|function|tool_call|think)\b|<\|", re.IGNORECASE)

_MARKUP = list("<>&\"'\\/{}[]:,=;#`*_")
_UNICODE = ["é", "ß", "ñ", "Ω", "中文", "日本語", "한국어", "שלום", "مرحبا", "🎉", "👩‍💻", "\u00a0", "\u200b", "€", "½"]
_NUMBERS_AS_STRINGS = ["0", "007", "-1", "3.14", "1e3", "1,234", "1.0", "NaN", "Infinity", "true", "false", "[]", "{}"]
_ESCAPES = ["\\n", "\\t", "\\\"", "\\\\", "\\u00e9", "\\/", "\n", "\t", "\r\n"]


def _clean(text: str) -> bool:
    return _TAG.search(text) is None


def _pieces() -> st.SearchStrategy[str]:
    letters = st.text(st.characters(codec="utf-8", categories=("L", "N", "P", "S", "Zs"),
                                    exclude_characters="\x00"), min_size=1, max_size=12)
    return st.one_of(letters, st.sampled_from(_MARKUP), st.sampled_from(_UNICODE), st.sampled_from(_ESCAPES),
                     st.sampled_from(["<", "<tool", "<b>", "a < b", "x > 1 && y < 2", "AT&T", "&amp;", "&lt;",
                                      "\"quoted\"", "it's", "C:\\path\\file", "<!-- -->", "<![CDATA[x]]>"]))


def strings(*, allow_null_word: bool = True) -> st.SearchStrategy[str]:
    """Text values: empty, numbers as strings, and joined pieces of markup, escapes and Unicode."""
    joined = st.lists(_pieces(), min_size=1, max_size=8).map("".join)
    base = st.one_of(st.just(""), st.sampled_from(_NUMBERS_AS_STRINGS), joined, joined, joined)
    out = base.filter(_clean)
    if not allow_null_word:
        out = out.filter(lambda s: s.lower() != "null")
    return out


def long_strings() -> st.SearchStrategy[str]:
    """A 10,000-character value: a seed phrase of ASCII text and markup repeated to the length (one
    byte a character, so the answer's token budget, its UTF-8 length, stays within a 16K window)."""
    ascii_pieces = st.one_of(st.text(st.characters(codec="ascii", categories=("L", "N", "P", "S", "Zs")),
                                     min_size=1, max_size=12), st.sampled_from(_MARKUP),
                             st.sampled_from(["\\n", "\n", "\t", "a < b", "AT&T", "\"quoted\""]))
    return st.lists(ascii_pieces, min_size=3, max_size=6).map("".join).filter(
        lambda s: bool(s.strip()) and _clean(s * 2)).map(
        lambda s: (s * (LONG_STRING_CHARS // len(s) + 1))[:LONG_STRING_CHARS]).filter(_clean)


def _json_values(depth: int = 0) -> st.SearchStrategy[Any]:
    """Any JSON value (for a free-form object's fields): every type, nested up to three levels."""
    scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**12),
                        st.floats(allow_nan=False, allow_infinity=False), strings())
    if depth >= 3:
        return scalars
    return st.one_of(scalars, st.lists(_json_values(depth + 1), max_size=4),
                     st.dictionaries(strings().filter(bool), _json_values(depth + 1), max_size=4))


_PATTERN_PART = re.compile(r"\\d\{(\d+)\}|\[A-Z\]\{(\d+)\}|([^\\\[\]{}^$])")


def _pattern(pattern: str) -> st.SearchStrategy[str]:
    """Strings matching a tool's fixed-shape pattern (``^[A-Z]{3}$``, ``^\\d{4}-\\d{2}-\\d{2}$``): digits,
    capitals and literal characters. Hypothesis's ``from_regex`` draws other strings in every process
    (it iterates sets of characters, whose order follows the interpreter's hash seed), and the stored
    corpus must be drawn the same way each time."""
    body = pattern.removeprefix("^").removesuffix("$")
    parts: list[st.SearchStrategy[str]] = []
    pos = 0
    for match in _PATTERN_PART.finditer(body):
        if match.start() != pos:
            raise ValueError(f"pattern {pattern!r} is not one this corpus draws")
        digits, capitals, literal = match.groups()
        if digits:
            parts.append(st.text("0123456789", min_size=int(digits), max_size=int(digits)))
        elif capitals:
            parts.append(st.text("ABCDEFGHIJKLMNOPQRSTUVWXYZ", min_size=int(capitals), max_size=int(capitals)))
        else:
            parts.append(st.just(literal))
        pos = match.end()
    if pos != len(body):
        raise ValueError(f"pattern {pattern!r} is not one this corpus draws")
    return st.tuples(*parts).map("".join)


def from_schema(schema: Mapping[str, Any]) -> st.SearchStrategy[Any]:
    """A value valid under ``schema`` (the subset of JSON Schema the tools use)."""
    if "enum" in schema:
        return st.sampled_from(list(schema["enum"]))
    types = schema.get("type", "object")
    if isinstance(types, list):
        nullable = "null" in types
        rest = [t for t in types if t != "null"]
        inner = from_schema({**schema, "type": rest[0]}) if rest else st.none()
        if nullable and rest == ["string"]:
            # "null" as text under ["string", "null"] is the parser's null: not a value to expect back.
            inner = strings(allow_null_word=False)
        return st.one_of(st.none(), inner) if nullable else inner
    if types == "string":
        if "pattern" in schema:
            return _pattern(schema["pattern"])
        return strings()
    if types == "integer":
        return st.integers(schema.get("minimum", -10**15), schema.get("maximum", 10**15))
    if types == "number":
        low = schema.get("exclusiveMinimum")
        floats = st.floats(allow_nan=False, allow_infinity=False, min_value=low, exclude_min=low is not None)
        return st.one_of(floats, st.integers(1 if low is not None else -10**9, 10**9))
    if types == "boolean":
        return st.booleans()
    if types == "array":
        return st.lists(from_schema(schema.get("items") or {}), max_size=4)
    if types == "object":
        props = schema.get("properties")
        if not props:
            return st.dictionaries(strings().filter(bool), _json_values(), max_size=5)
        required = list(schema.get("required") or [])
        optional = [k for k in props if k not in required]
        return st.fixed_dictionaries({k: from_schema(props[k]) for k in required},
                                     optional={k: from_schema(props[k]) for k in optional})
    raise ValueError(f"schema type {types!r} is not drawn here")


def _tools() -> dict[str, Mapping[str, Any]]:
    return {t["function"]["name"]: t["function"]["parameters"] for t in corpus_tools()}


def calls() -> st.SearchStrategy[Call]:
    tools = _tools()
    return st.sampled_from(sorted(tools)).flatmap(
        lambda name: from_schema(tools[name]).map(lambda args: Call(name, args)))


def _visible() -> st.SearchStrategy[str]:
    """Visible text beside a call or after reasoning: non-empty, no surrounding whitespace."""
    return strings().map(str.strip).filter(bool)


HELD_FORMS = (
    " ", "\n", "\n\n", "\t", " \n\t ", "\n" * 64, "  \n  ", "\r\n",
    "<", "<tool", "<tool_", "<tool_call", "<tool_cal", "<func", "<function", "<param", "<thin", "</thin",
    "```", "```json\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n```",
    "```\nprint('hi')\n```", "```xml\n<tool>\n```",
)


def held() -> st.SearchStrategy[str]:
    """Content a parser may hold back: whitespace alone or around text, text that starts like a tool
    call (``<``, ``<tool``), a fenced block; whole forms and forms with text around them."""
    forms = st.sampled_from(HELD_FORMS)
    ws = st.sampled_from([" ", "\n", "\n\n", "\t", "  "])
    text = _visible()
    return st.one_of(
        forms,
        st.text(st.sampled_from(" \n\t"), min_size=1, max_size=96),
        st.tuples(ws, text).map("".join),
        st.tuples(text, ws).map("".join),
        st.tuples(ws, text, ws).map("".join),
        st.tuples(forms, text).map("".join),
        st.tuples(forms, st.sampled_from([" ", "\n"]), text).map("".join),
    ).filter(_clean).filter(bool)


def _note(kind: str, case: Mapping[str, Any]) -> str:
    if kind == "held":
        content = case["content"]
        if not content.strip():
            return "whitespace-only content"
        if content.lstrip().startswith("```"):
            return "a fenced block"
        if content.lstrip().startswith("<"):
            return "text starting like a tool call"
        return "leading or trailing whitespace"
    return {"call": "one call", "parallel": "parallel calls", "after_content": "a call after content",
            "after_reasoning": "a call after reasoning", "long_string": "a 10,000-character string",
            "reasoning": "a reasoning split"}[kind]


def strategy(kind: str) -> st.SearchStrategy[dict[str, Any]]:
    def as_calls(items: list[Call]) -> list[dict[str, Any]]:
        return [c.as_dict() for c in items]

    if kind == "call":
        return calls().map(lambda c: {"calls": as_calls([c])})
    if kind == "parallel":
        return st.lists(calls(), min_size=2, max_size=4).map(lambda cs: {"calls": as_calls(cs)})
    if kind == "after_content":
        return st.tuples(_visible(), calls()).map(lambda t: {"content": t[0], "calls": as_calls([t[1]])})
    if kind == "after_reasoning":
        return st.tuples(_visible(), calls()).map(lambda t: {"reasoning": t[0], "calls": as_calls([t[1]])})
    if kind == "long_string":
        return st.tuples(long_strings(), strings().map(str.strip).filter(bool)).map(lambda t: {"calls": as_calls(
            [Call("send_message", {"to": t[1], "body": t[0]})])})
    if kind == "reasoning":
        return st.tuples(_visible(), _visible()).map(lambda t: {"reasoning": t[0], "content": t[1]})
    if kind == "held":
        return held().map(lambda c: {"content": c})
    raise ValueError(f"unknown kind {kind!r}")


def draw(kind: str, count: int, seed: int) -> list[ParserCase]:
    """``count`` distinct cases of ``kind``, the same ones for the same seed and hypothesis release."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as with_seed

    seen: set[str] = set()
    out: list[ParserCase] = []

    @with_seed(seed)
    @settings(max_examples=count * 6, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(strategy(kind))
    def explore(raw: dict[str, Any]) -> None:
        if len(out) >= count:
            raise _Enough
        key = json.dumps(raw, sort_keys=True, ensure_ascii=False)
        if key in seen:
            return
        seen.add(key)
        case = {"id": f"{kind}-{len(out) + 1:04d}", "kind": kind, **raw}
        out.append(ParserCase.of({**case, "note": _note(kind, case)}))

    with no_local_constants():
        try:
            explore()
        except _Enough:
            pass
    return out


@contextmanager
def no_local_constants() -> Iterator[None]:
    """Draw without the constants hypothesis mines from the source of the modules loaded from this
    project (it mixes them into what it draws): with them, an edit anywhere in the project, or
    drawing inside a pytest session, draws another corpus. Its provider's internal hook is replaced
    for the draw; a hypothesis release that renames it fails here, loudly."""
    from hypothesis.internal.conjecture import providers

    empty = providers.Constants()
    providers.CONSTANTS_CACHE.cache.clear()
    with patch.object(providers, "_get_local_constants", lambda: empty):
        try:
            yield
        finally:
            providers.CONSTANTS_CACHE.cache.clear()


class _Enough(Exception):
    """Raised inside the draw once the kind has its cases (hypothesis has no early stop)."""


def generate(counts: Mapping[str, int] = COUNTS,
             progress: Callable[[str], None] | None = None) -> list[ParserCase]:
    cases: list[ParserCase] = []
    for kind, count in counts.items():
        drawn = draw(kind, count, SEEDS[kind])
        if progress is not None:
            progress(f"{kind}: {len(drawn)} cases")
        cases.extend(drawn)
    return cases


def dumps(cases: list[ParserCase]) -> str:
    return "".join(json.dumps(c.as_dict(), ensure_ascii=False, sort_keys=True) + "\n" for c in cases)


def main(argv: list[str]) -> int:
    path = Path(argv[0]) if argv else Path(__file__).resolve().parents[2] / "fixtures" / "parsers" / "corpus.jsonl"
    cases = generate(progress=lambda line: print(line, file=sys.stderr))
    path.write_text(dumps(cases), encoding="utf-8")
    calls_n = sum(len(c.calls) for c in cases)
    print(f"{path}: {len(cases)} cases, {calls_n} tool calls", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
