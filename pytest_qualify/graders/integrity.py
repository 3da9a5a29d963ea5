"""Integrity audits: the server that was judged is the one that answers, and its streams say what
they mean (MLPerf Inference's compliance tests, held against an OpenAI-compatible endpoint).

- Stream versus plain (TEST06 and vLLM's stream bugs): at temperature 0 the same request streamed
  and not gives the same visible answer, the same tool calls as parsed values, the same finish
  reason and the same ``usage.completion_tokens``.
- Stream shape: exactly one chunk carries a finish reason; usage comes exactly when
  ``stream_options.include_usage`` asks for it; never more content deltas than completion tokens;
  each tool call's first delta carries ``id``, ``type`` and ``function.name``, its ``index`` is
  the call's own, and its arguments concatenate to JSON.
- A tool call cut by ``max_tokens`` ends ``length``, never ``tool_calls``.
- The answering server is the judged one (TEST01): an answer equals the earlier answers to the
  same request in this run.
- No result caching (TEST04): a fresh cache salt sees no prefix-cache hit, and a repeated request
  is not markedly faster than a fresh one of the same size.
- Length band (TEST09): the visible answer's length stays within the profile's band for its module.

Pure functions over what the client recorded; no sockets, no pytest.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pytest_qualify.graders import Verdict
from pytest_qualify.graders.tools import CallLike, same_calls

# Below this, client-observed times are HTTP and JSON overhead, not the server's work: a ratio of
# two such times says nothing about a cache.
MEASURABLE_S = 0.02


class ToolDeltaLike(Protocol):
    index: int | None
    id: str | None
    type: str | None
    name: str | None
    arguments: str | None


class ShapeLike(Protocol):
    chunks: int
    content_deltas: int
    finish_chunks: int
    usage_chunks: int
    usage_asked: bool
    tool_deltas: Sequence[ToolDeltaLike]


class AnswerLike(Protocol):
    content: str | None
    tool_calls: Sequence[CallLike]
    finish_reason: str | None
    usage: Mapping[str, Any]


def _short(text: str | None, limit: int = 160) -> str:
    if text is None:
        return "None"
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _completion_tokens(answer: AnswerLike) -> int | None:
    value = (answer.usage or {}).get("completion_tokens")
    return int(value) if isinstance(value, (int, float)) else None


def _join(problems: list[str], ok: str) -> Verdict:
    return Verdict.reject("; ".join(problems)) if problems else Verdict.accept(ok)


@dataclass(frozen=True)
class Sample:
    """One sampled request, built from another module's fixture exactly as that module asks it."""

    module: str
    item: str
    messages: tuple[Mapping[str, Any], ...]
    params: Mapping[str, Any]  # request fields besides the messages (tools, tool_choice)
    tool_turn: bool
    forced: str = ""  # the function a named tool_choice forces ("" for "auto")

    @property
    def id(self) -> str:
        return f"{self.module}-{self.item}" + (f"-forced-{self.forced}" if self.forced else "")


# -- stream versus plain ---------------------------------------------------------------------------


def compare_stream_plain(streamed: AnswerLike, plain: AnswerLike) -> Verdict:
    """The same request at temperature 0, streamed and not: what the engine must keep equal.
    Every difference is named (a stream that drops its last piece shows both texts)."""
    problems = []
    if (streamed.content or "") != (plain.content or ""):
        problems.append(f"streamed content {_short(streamed.content)} differs from the non-streamed "
                        f"{_short(plain.content)}")
    if streamed.tool_calls or plain.tool_calls:
        calls = same_calls(streamed.tool_calls, plain.tool_calls)
        if not calls.ok:
            problems.append(calls.reason)
    if streamed.finish_reason != plain.finish_reason:
        problems.append(f"streamed finish_reason {streamed.finish_reason!r} differs from the non-streamed "
                        f"{plain.finish_reason!r}")
    s_tokens, p_tokens = _completion_tokens(streamed), _completion_tokens(plain)
    if s_tokens is not None and p_tokens is not None and s_tokens != p_tokens:
        problems.append(f"streamed usage.completion_tokens {s_tokens} differs from the non-streamed {p_tokens}")
    elif p_tokens is None:
        problems.append("the non-streamed answer reports no usage.completion_tokens")
    return _join(problems, "streamed and non-streamed answers are equal")


# -- the stream's own shape ------------------------------------------------------------------------


def check_tool_deltas(deltas: Sequence[ToolDeltaLike], parse: bool = True) -> list[str]:
    """vLLM's streamed tool-call bugs (#18412, #16340, #31438): a call's first delta must carry
    ``id``, ``type`` "function" and ``function.name``; indices number the calls 0, 1, ... in the
    order they start; a later delta never changes the call's id; the arguments concatenate to JSON."""
    problems: list[str] = []
    seen: dict[int, dict[str, Any]] = {}
    orphans: set[int] = set()
    for n, d in enumerate(deltas, start=1):
        if not isinstance(d.index, int):
            problems.append(f"tool-call delta {n} has no integer index ({d.index!r})")
            continue
        call = seen.get(d.index)
        if call is None and not d.name and d.arguments and seen:
            if d.index not in orphans:  # once per index: a shifted call repeats it on every delta
                orphans.add(d.index)
                problems.append(f"tool-call delta {n} adds arguments under index {d.index}, which no call "
                                f"started (calls so far: {', '.join(map(str, seen))})")
            continue
        if call is None:
            if d.index != len(seen):
                problems.append(f"tool-call delta {n} starts call index {d.index} after {len(seen)} call(s) "
                                f"(expected index {len(seen)})")
            missing = [f for f, v in (("id", d.id), ("type", d.type), ("function.name", d.name)) if not v]
            if missing:
                problems.append(f"the first delta of tool call {d.index} lacks {', '.join(missing)}")
            elif d.type != "function":
                problems.append(f"the first delta of tool call {d.index} has type {d.type!r}, expected 'function'")
            call = seen[d.index] = {"id": d.id, "arguments": ""}
        elif d.id and call["id"] and d.id != call["id"]:
            problems.append(f"tool call {d.index} changes its id from {call['id']!r} to {d.id!r} mid-stream")
        call["arguments"] += d.arguments or ""
    for index, call in seen.items() if parse else ():
        text = call["arguments"].strip()
        if not text:
            continue
        try:
            json.loads(text)
        except json.JSONDecodeError as exc:
            problems.append(f"tool call {index}: streamed arguments do not parse as JSON ({exc.msg}): {_short(text)}")
    return problems


def check_stream_shape(shape: ShapeLike, completion_tokens: int | None, finish_reason: str | None = None) -> Verdict:
    """One streamed answer's chunk structure. ``completion_tokens``: the stream's own usage (None
    when it sent none). ``finish_reason``: the stream's, for the cut-call rule."""
    problems = []
    if shape.finish_chunks != 1:
        problems.append(f"{shape.finish_chunks} chunks carried a finish_reason (expected exactly 1)")
    if shape.usage_asked and shape.usage_chunks == 0:
        problems.append("no usage chunk although stream_options.include_usage asked for it")
    elif not shape.usage_asked and shape.usage_chunks:
        problems.append(f"{shape.usage_chunks} chunk(s) carried usage although stream_options.include_usage "
                        "did not ask for it")
    elif shape.usage_chunks > 1:
        problems.append(f"{shape.usage_chunks} chunks carried usage (expected 1, after the last choice)")
    if completion_tokens is not None and shape.content_deltas > completion_tokens:
        problems.append(f"{shape.content_deltas} content deltas for {completion_tokens} completion tokens "
                        "(a delta carries at least one token)")
    # A call cut by max_tokens ends mid-arguments: its JSON cannot parse, and that is not a breach.
    problems += check_tool_deltas(shape.tool_deltas, parse=finish_reason != "length")
    return _join(problems, f"stream shape ok ({shape.chunks} chunks)")


def check_cut_call(finish_reason: str | None, max_tokens: int, uncut_tokens: int) -> Verdict:
    """A tool call cut by ``max_tokens`` (vLLM #53269): the answer needed ``uncut_tokens`` and was
    given ``max_tokens`` fewer, so it did not finish: ``length``, whatever the parser salvaged."""
    if max_tokens >= uncut_tokens:
        return Verdict.reject(f"max_tokens {max_tokens} does not cut a call of {uncut_tokens} tokens: nothing to judge")
    if finish_reason != "length":
        return Verdict.reject(f"a tool call cut at max_tokens {max_tokens} (of {uncut_tokens} tokens) ended with "
                              f"finish_reason {finish_reason!r}, expected 'length'")
    return Verdict.accept(f"cut at {max_tokens} of {uncut_tokens} tokens: finish_reason 'length'")


# -- the answering server is the judged one (TEST01) ----------------------------------------------


@dataclass(frozen=True)
class RecordedAnswer:
    """An answer kept in the run's journal: who asked, and what came back (calls as parsed values)."""

    test: str
    streamed: bool
    content: str | None
    tool_calls: tuple[tuple[str, Any], ...]
    finish_reason: str | None

    def as_dict(self) -> dict[str, Any]:
        return {"test": self.test, "streamed": self.streamed, "content": self.content,
                "tool_calls": [list(c) for c in self.tool_calls], "finish_reason": self.finish_reason}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "RecordedAnswer":
        calls = tuple((str(c[0]), c[1]) for c in data.get("tool_calls") or ())
        return cls(str(data.get("test", "")), bool(data.get("streamed")), data.get("content"), calls,
                   data.get("finish_reason"))


def parsed_calls(calls: Sequence[CallLike]) -> tuple[tuple[str, Any], ...]:
    out = []
    for c in calls:
        try:
            out.append((c.name, json.loads(c.arguments) if c.arguments.strip() else {}))
        except json.JSONDecodeError:
            out.append((c.name, "invalid JSON: " + c.arguments))
    return tuple(sorted(out, key=lambda x: json.dumps(x, sort_keys=True)))


def check_same_answers(now: RecordedAnswer, earlier: Sequence[RecordedAnswer]) -> Verdict:
    """Every earlier answer to the same request (temperature 0, fresh cache salts) equals this one:
    another model or build behind the route answers differently, and it is shown with both answers.
    No content and empty content are the same visible answer (vLLM gives ``""`` beside a named
    tool_choice's call when not streaming, and no content delta when streaming), as streamed = plain
    holds them."""
    for other in earlier:
        differs = [what for what, a, b in (("content", now.content or "", other.content or ""),
                                           ("tool calls", now.tool_calls, other.tool_calls),
                                           ("finish_reason", now.finish_reason, other.finish_reason)) if a != b]
        if differs:
            how = "streamed" if other.streamed else "not streamed"
            return Verdict.reject(
                f"{' and '.join(differs)} changed: now {_short(now.content)} "
                f"(calls {list(now.tool_calls)}, finish {now.finish_reason!r}); earlier in this run, "
                f"{other.test} ({how}): {_short(other.content)} (calls {list(other.tool_calls)}, "
                f"finish {other.finish_reason!r})"
            )
    return Verdict.accept(f"equal to {len(earlier)} earlier answer(s) to the same request")


# -- no result caching (TEST04) -------------------------------------------------------------------


def check_no_result_cache(cached_tokens: Sequence[int | None], repeat_s: float, fresh_s: Sequence[float],
                          ratio_min: float, salted: bool = True, prompt_tokens: int | None = None,
                          engine_prompt_tokens: float | None = None) -> Verdict:
    """A repeated request under a fresh cache salt: no prefix-cache hit where the profile forbids
    it (``salted``), and its end-to-end time at least ``ratio_min`` of the fastest fresh request of
    the same size. Noise only adds time, so the fastest fresh one is the honest cost; a time too
    short to be the server's work (``MEASURABLE_S``) leaves the ratio unjudged, said so.

    ``engine_prompt_tokens``: the prompt tokens the server's ``/metrics`` counted while the repeat
    was answered (None: no metrics). Fewer than the repeat's ``prompt_tokens`` means the engine
    never saw it — a response cache in front of it answered, however fast the server is anyway."""
    problems = []
    if engine_prompt_tokens is not None and prompt_tokens and engine_prompt_tokens < prompt_tokens:
        problems.append(f"the server's /metrics counted {engine_prompt_tokens:g} prompt tokens while the repeated "
                        f"request of {prompt_tokens} was answered: answered from a cache, not by the engine")
    if salted:
        hits = [n for n in cached_tokens if n]
        if hits:
            problems.append(f"{hits[0]} cached prompt tokens under a fresh cache_salt (the prefix cache must not "
                            "serve across salts)")
    fastest = min(fresh_s)
    ratio = repeat_s / fastest if fastest > 0 else float("inf")
    if fastest >= MEASURABLE_S and ratio < ratio_min:
        problems.append(f"the repeated request took {repeat_s:.3f} s, {ratio:.2f} of a fresh one's {fastest:.3f} s "
                        f"(limit: ratio >= {ratio_min:g}): answered from a cache")
    measured = (f"repeat/fresh e2e ratio {ratio:.2f} (limit >= {ratio_min:g})" if fastest >= MEASURABLE_S
                else f"fresh request {fastest:.3f} s, too fast to judge a ratio")
    return _join(problems, measured)


# -- length band (TEST09) -------------------------------------------------------------------------


def check_length_band(content: str | None, min_chars: int, max_chars: int, module: str) -> Verdict:
    """The visible answer's length (characters, surrounding whitespace included: padding is what it
    catches) within the profile's band for this module."""
    n = len(content or "")
    if n < min_chars:
        return Verdict.reject(f"visible answer of {n} characters is shorter than the {module} band "
                              f"[{min_chars}, {max_chars}]: truncated")
    if n > max_chars:
        return Verdict.reject(f"visible answer of {n} characters is longer than the {module} band "
                              f"[{min_chars}, {max_chars}]: padded")
    return Verdict.accept(f"{n} characters within [{min_chars}, {max_chars}]")
