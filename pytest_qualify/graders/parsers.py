"""The parsers module's exactness: a forced answer must come back as forced, in both modes.

The model was made to write a known text (``tasks/parsers.py``); what the client gets is the
deployment's parsers' reading of it. A case is **exact** in one mode when the tool calls are the
forced ones (same names in the same order, arguments JSON-equal: ``true`` is not ``1``, ``1`` is
``1.0``), ``finish_reason`` is ``tool_calls`` on a tool turn and ``stop`` otherwise, the reasoning
field holds the forced reasoning and nothing else, and the content holds the forced content with no
markup of the syntax left in it. Content beside tool calls is compared without its surrounding
whitespace, and so is content after reasoning (the template's line breaks around ``<tool_call>``
and after ``</think>`` are the syntax's, and vLLM keeps them); content alone is compared exactly, whitespace and all: that is what the
held-back content cases are about. **Parity**: the streamed answer reassembles to the plain one
(the same comparison between the two). **Incremental**: a call whose arguments are long enough to
span several tokens arrived in more than one argument delta (None: no call long enough to tell).

How the content came is recorded per case, never judged here: its chunks streamed, whether the
whole answer came in one chunk with the finish (a parser held it), the argument deltas per call.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

# The syntax's own markers: any of them in the content is markup the parser left behind.
MARKUP = ("<tool_call>", "</tool_call>", "<function=", "</function>", "<parameter=", "</parameter>",
          "<think>", "</think>")
# Arguments of at least this many characters span several tokens in any tokenizer: a call that
# long which came in one argument delta was not streamed as decoded (vLLM #43267, #30439).
INCREMENTAL_MIN_CHARS = 40
# Content of at least two tokens (and the end of sequence) that came in one chunk with the finish was
# held: one token comes in one chunk whoever parses it.
HELD_MIN_TOKENS = 3


@dataclass(frozen=True)
class Expected:
    """What the parsers must hand back: calls as (name, arguments), content, reasoning."""

    calls: tuple[tuple[str, Mapping[str, Any]], ...]
    content: str | None
    reasoning: str | None

    @property
    def tool_turn(self) -> bool:
        return bool(self.calls)

    @property
    def beside_markup(self) -> bool:
        """The content shares the answer with calls or reasoning: the line breaks the template puts
        around them are the syntax's, so the content is compared without surrounding whitespace."""
        return self.tool_turn or self.reasoning is not None


@dataclass(frozen=True)
class Seen:
    """One answer as the client assembled it (plain, or the stream's deltas put together)."""

    content: str | None
    reasoning: str | None
    calls: tuple[tuple[str, Any], ...]  # (name, arguments as they came: JSON text by the API)
    finish_reason: str | None
    # Streamed only: content chunks, every output in one chunk with the finish, argument deltas per call.
    content_chunks: int | None = None
    whole_at_finish: bool | None = None
    argument_deltas: tuple[int, ...] = ()

    @classmethod
    def of(cls, answer: Any) -> "Seen":
        """From a ``client.answer.Answer``."""
        calls = tuple((c.name, c.arguments) for c in answer.tool_calls)
        stream = getattr(answer, "stream", None)
        if stream is None:
            return cls(answer.content, answer.reasoning, calls, answer.finish_reason)
        per_call: dict[int, int] = {}
        for delta in stream.tool_deltas:
            if isinstance(delta.arguments, str) and delta.arguments:
                index = 0 if delta.index is None else delta.index
                per_call[index] = per_call.get(index, 0) + 1
        return cls(answer.content, answer.reasoning, calls, answer.finish_reason, stream.content_deltas,
                   stream.whole_at_finish, tuple(per_call.get(i, 0) for i in range(len(calls))))


def json_equal(a: Any, b: Any) -> bool:
    """JSON equality: numbers by value (``1`` = ``1.0``), but a boolean is never a number and
    ``null`` is only ``null``; objects by their keys, arrays in order."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def _arguments(raw: Any) -> tuple[Any, str | None]:
    if not isinstance(raw, str):
        return raw, f"arguments {raw!r:.80} are not JSON text"
    try:
        return json.loads(raw), None
    except ValueError as exc:
        return raw, f"arguments {raw!r:.120} are not JSON ({exc})"


def _show(value: Any, limit: int = 160) -> str:
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} chars)"


def _first_difference(a: Any, b: Any, path: str = "") -> str:
    """Where two JSON values first differ, as a path and both values."""
    if isinstance(a, Mapping) and isinstance(b, Mapping) and not isinstance(a, bool):
        for key in list(a) + [k for k in b if k not in a]:
            if key not in b:
                return f"{path}.{key} missing (forced {_show(a[key], 80)})"
            if key not in a:
                return f"{path}.{key} {_show(b[key], 80)} was not forced"
            if not json_equal(a[key], b[key]):
                return _first_difference(a[key], b[key], f"{path}.{key}")
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            if not json_equal(x, y):
                return _first_difference(x, y, f"{path}[{i}]")
    return f"{path or 'arguments'} {_show(b, 80)} instead of {_show(a, 80)}"


def _content_problem(expected: Expected, seen: Seen) -> str | None:
    got = seen.content or ""
    for mark in MARKUP:
        if mark in got:
            return f"markup {mark!r} left in the content {_show(got, 120)}"
    want = expected.content or ""
    if expected.beside_markup:
        if got.strip() != want.strip():
            return f"content {_show(got)} beside the calls instead of {_show(want)}"
    elif got != want:
        return f"content {_show(got)} instead of {_show(want)}"
    return None


def exactness(expected: Expected, seen: Seen) -> str | None:
    """None when ``seen`` is exactly the forced answer, else the first difference in words."""
    names = [name for name, _ in seen.calls]
    want_names = [name for name, _ in expected.calls]
    if names != want_names:
        return f"tool calls {names} instead of {want_names}"
    for i, ((name, raw), (_, want)) in enumerate(zip(seen.calls, expected.calls)):
        got, problem = _arguments(raw)
        if problem is not None:
            return f"call {i} ({name}): {problem}"
        if not json_equal(dict(want), got):
            return f"call {i} ({name}): {_first_difference(dict(want), got)}"
    finish = "tool_calls" if expected.tool_turn else "stop"
    if seen.finish_reason != finish:
        return f"finish_reason {seen.finish_reason!r} instead of {finish!r}"
    want_reasoning = (expected.reasoning or "").strip()
    got_reasoning = (seen.reasoning or "").strip()
    if got_reasoning != want_reasoning:
        if not want_reasoning:
            return f"reasoning {_show(got_reasoning)} where none was forced"
        return f"reasoning {_show(seen.reasoning)} instead of {_show(expected.reasoning)}"
    return _content_problem(expected, seen)


def parity(plain: Seen, streamed: Seen, beside_markup: bool) -> str | None:
    """None when the stream reassembles to the plain answer, else the first difference."""
    names, plain_names = [n for n, _ in streamed.calls], [n for n, _ in plain.calls]
    if names != plain_names:
        return f"tool calls {names} streamed, {plain_names} plain"
    for i, ((name, raw), (_, plain_raw)) in enumerate(zip(streamed.calls, plain.calls)):
        got, want = _arguments(raw)[0], _arguments(plain_raw)[0]
        if not json_equal(want, got):
            return f"call {i} ({name}) streamed against plain: {_first_difference(want, got)}"
    if streamed.finish_reason != plain.finish_reason:
        return f"finish_reason {streamed.finish_reason!r} streamed, {plain.finish_reason!r} plain"
    if (streamed.reasoning or "").strip() != (plain.reasoning or "").strip():
        return f"reasoning {_show(streamed.reasoning)} streamed, {_show(plain.reasoning)} plain"
    got, want = streamed.content or "", plain.content or ""
    if (got.strip() != want.strip()) if beside_markup else (got != want):
        return f"content {_show(streamed.content)} streamed, {_show(plain.content)} plain"
    return None


def incremental(expected: Expected, streamed: Seen) -> bool | None:
    """Whether every long call's arguments came in more than one delta (None: none is long)."""
    long_calls = [i for i, (_, args) in enumerate(expected.calls)
                  if len(json.dumps(dict(args), ensure_ascii=False)) >= INCREMENTAL_MIN_CHARS]
    if not long_calls or len(streamed.argument_deltas) < len(expected.calls):
        return None if not long_calls else False
    return all(streamed.argument_deltas[i] > 1 for i in long_calls)


@dataclass(frozen=True)
class CaseOutcome:
    """One case asked plain and streamed: what differed (None: nothing) and how it came."""

    case: str
    plain: str | None
    streamed: str | None
    parity: str | None
    incremental: bool | None
    chunking: Mapping[str, Any] = field(default_factory=dict)

    @property
    def exact(self) -> bool:
        return self.plain is None and self.streamed is None

    @property
    def deviations(self) -> tuple[str, ...]:
        out = []
        if self.plain is not None:
            out.append(f"plain: {self.plain}")
        if self.streamed is not None:
            out.append(f"streamed: {self.streamed}")
        if self.parity is not None:
            out.append(f"parity: {self.parity}")
        if self.incremental is False:
            out.append("streamed: a long call's arguments came in one delta (not streamed as decoded)")
        return tuple(out)

    def as_dict(self) -> dict[str, Any]:
        return {"case": self.case, "exact": self.exact, "plain": self.plain, "streamed": self.streamed,
                "parity": self.parity, "incremental": self.incremental, "chunking": dict(self.chunking)}


def grade_case(case_id: str, expected: Expected, plain: Seen, streamed: Seen,
               completion_tokens: int | None = None) -> CaseOutcome:
    """Both modes of one case, graded and recorded (``completion_tokens``: the plain answer's, which
    tells content held back from content that was one token anyway)."""
    chunking = {
        "content_chunks_streamed": streamed.content_chunks,
        "content_chunks_plain": 1 if plain.content else 0,
        "whole_at_finish": streamed.whole_at_finish,
        "argument_deltas": list(streamed.argument_deltas),
        # Content that came whole with the finish although it was more than one chunk's worth: the
        # parser held it (what a chunk-based timing then reads is the parser, not the engine).
        "held": bool(streamed.content) and streamed.content_chunks == 1 and bool(streamed.whole_at_finish)
        and (completion_tokens is None or completion_tokens >= HELD_MIN_TOKENS),
    }
    return CaseOutcome(case_id, exactness(expected, plain), exactness(expected, streamed),
                       parity(plain, streamed, expected.beside_markup), incremental(expected, streamed), chunking)


@dataclass(frozen=True)
class Figures:
    """The module's figures over the cases asked: for the bundle and the item's properties."""

    cases: int
    exact: int
    parity: int
    incremental: int
    incremental_of: int  # the cases with a call long enough to tell
    held: int  # cases whose streamed content came whole with the finish

    def as_dict(self) -> dict[str, int]:
        return {"cases": self.cases, "exact": self.exact, "parity": self.parity, "incremental": self.incremental,
                "incremental_of": self.incremental_of, "held": self.held}


def figures(outcomes: Sequence[CaseOutcome]) -> Figures:
    told = [o for o in outcomes if o.incremental is not None]
    return Figures(len(outcomes), sum(o.exact for o in outcomes), sum(o.parity is None for o in outcomes),
                   sum(bool(o.incremental) for o in told), len(told),
                   sum(bool(o.chunking.get("held")) for o in outcomes))
