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
from pytest_qualify.graders.tools import ArgumentsError, CallLike, read_arguments, same_calls

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
    output_after_finish: int
    usage_before_finish: int
    done: bool | None


class AnswerLike(Protocol):
    content: str | None
    tool_calls: Sequence[CallLike]
    finish_reason: str | None
    usage: Mapping[str, Any]


def _short(text: str | None, limit: int = 160) -> str:
    if text is None:
        return "None"
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _tokens(answer: AnswerLike, key: str) -> int | None:
    value = (answer.usage or {}).get(key)
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _completion_tokens(answer: AnswerLike) -> int | None:
    return _tokens(answer, "completion_tokens")


def canonical(value: Any) -> str:
    """A parsed JSON value as one string that two honest encodings of it share: key order and
    spacing free, 1 and 1.0 the same number (JSON has one number type), ``true`` never ``1``
    (Python's ``True == 1`` would call them equal)."""

    def norm(v: Any) -> Any:
        if isinstance(v, bool) or v is None or isinstance(v, str):
            return v
        if isinstance(v, float) and v.is_integer():
            return int(v)
        if isinstance(v, Mapping):
            return {str(k): norm(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [norm(x) for x in v]
        return v

    return json.dumps(norm(value), sort_keys=True, ensure_ascii=False)


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
    contract: Any = None  # the answer contract its own module grades it under (a Contract; None: a tool turn)

    @property
    def id(self) -> str:
        return f"{self.module}-{self.item}" + (f"-forced-{self.forced}" if self.forced else "")


# -- stream versus plain ---------------------------------------------------------------------------


def compare_stream_plain(streamed: AnswerLike, plain: AnswerLike) -> Verdict:
    """The same request at temperature 0, streamed and not: what the engine must keep equal.
    Every difference is named (a stream that drops its last piece shows both texts).

    Beside the visible answer, calls and finish: the usage counts (a stream that reports usage
    reports ``completion_tokens``, and the same prompt is the same number of prompt tokens: more
    on one path means something was added to it), and the reasoning text, under either field name
    (a parser that runs on one path only moves reasoning out of, or into, the answer)."""
    problems = []
    if (streamed.content or "") != (plain.content or ""):
        problems.append(f"streamed content {_short(streamed.content)} differs from the non-streamed "
                        f"{_short(plain.content)}")
    if streamed.tool_calls or plain.tool_calls:
        calls = same_calls(streamed.tool_calls, plain.tool_calls)
        if not calls.ok:
            problems.append(calls.reason)
        elif [canonical(v) for v in sorted_values(streamed.tool_calls)] != \
                [canonical(v) for v in sorted_values(plain.tool_calls)]:
            problems.append(f"streamed calls {[c.arguments for c in streamed.tool_calls]} differ in a value's JSON "
                            f"type from the non-streamed {[c.arguments for c in plain.tool_calls]}")
    if streamed.finish_reason != plain.finish_reason:
        problems.append(f"streamed finish_reason {streamed.finish_reason!r} differs from the non-streamed "
                        f"{plain.finish_reason!r}")
    s_reasoning, p_reasoning = getattr(streamed, "reasoning", None) or "", getattr(plain, "reasoning", None) or ""
    if s_reasoning != p_reasoning:
        problems.append(f"streamed reasoning {_short(s_reasoning or None)} differs from the non-streamed "
                        f"{_short(p_reasoning or None)}")
    s_tokens, p_tokens = _completion_tokens(streamed), _completion_tokens(plain)
    if s_tokens is not None and p_tokens is not None and s_tokens != p_tokens:
        problems.append(f"streamed usage.completion_tokens {s_tokens} differs from the non-streamed {p_tokens}")
    elif p_tokens is None:
        problems.append("the non-streamed answer reports no usage.completion_tokens")
    elif streamed.usage and s_tokens is None:
        problems.append(f"the streamed usage carries no completion_tokens ({_short(json.dumps(dict(streamed.usage)))})")
    s_prompt, p_prompt = _tokens(streamed, "prompt_tokens"), _tokens(plain, "prompt_tokens")
    if s_prompt is not None and p_prompt is not None and s_prompt != p_prompt:
        problems.append(f"streamed usage.prompt_tokens {s_prompt} differs from the non-streamed {p_prompt}: "
                        "the two paths did not read the same prompt")
    return _join(problems, "streamed and non-streamed answers are equal")


def sorted_values(calls: Sequence[CallLike]) -> list[Any]:
    """Each call as (name, parsed arguments), in a canonical order (parallel calls in any order)."""
    return sorted(([name, args] for name, args in parsed_calls(calls)), key=canonical)


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
        if d.arguments is not None and not isinstance(d.arguments, str):
            # The API streams arguments as pieces of one JSON text; a JSON value in their place
            # cannot be concatenated, and is named instead.
            problems.append(f"tool-call delta {n} carries arguments as {type(d.arguments).__name__} "
                            f"{_short(json.dumps(d.arguments))}, not as a piece of JSON text")
            call["arguments"] = None
            continue
        if call["arguments"] is not None:
            call["arguments"] += d.arguments or ""
    for index, call in seen.items() if parse else ():
        text = (call["arguments"] or "").strip()
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
    if getattr(shape, "usage_before_finish", 0):
        problems.append("usage came before the finish chunk (it counts the whole answer, so it comes after the "
                        "last choice)")
    if getattr(shape, "output_after_finish", 0):
        problems.append(f"{shape.output_after_finish} chunk(s) carried content, reasoning or a tool call after the "
                        "finish chunk")
    if getattr(shape, "done", None) is False:
        problems.append("the stream ended without 'data: [DONE]'")
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
            out.append((c.name, read_arguments(c.arguments)))
        except ArgumentsError as exc:
            out.append((c.name, f"invalid: {exc}"))
    # Sorted by the canonical form: 1 and 1.0 must not order two lists of the same calls differently.
    return tuple(sorted(out, key=canonical))


def check_same_answers(now: RecordedAnswer, earlier: Sequence[RecordedAnswer]) -> Verdict:
    """Every earlier answer to the same request (temperature 0, fresh cache salts) equals this one:
    another model or build behind the route answers differently, and it is shown with both answers.
    No content and empty content are the same visible answer (vLLM gives ``""`` beside a named
    tool_choice's call when not streaming, and no content delta when streaming), as streamed = plain
    holds them."""
    for other in earlier:
        differs = [what for what, a, b in (("content", now.content or "", other.content or ""),
                                           ("tool calls", canonical(now.tool_calls), canonical(other.tool_calls)),
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


def too_fast(repeat_s: float | Sequence[float], fresh_s: Sequence[float], ratio_min: float) -> bool:
    """The repeat(s) markedly faster than a fresh request: the slowest repeat under ``ratio_min`` of
    the fastest fresh one, with the fresh time long enough to be the server's work. Noise only adds
    time, so the fastest fresh request is the honest cost and the slowest repeat the honest repeat;
    a response cache is fast on every repeat, so another round can only confirm it."""
    fastest = min(fresh_s)
    return fastest >= MEASURABLE_S and max(_times(repeat_s)) / fastest < ratio_min


def _times(repeat_s: float | Sequence[float]) -> list[float]:
    """One repeat's time, or one per round, as a list."""
    return [repeat_s] if isinstance(repeat_s, (int, float)) else list(repeat_s)


def check_no_result_cache(cached_tokens: Sequence[int | None], repeat_s: float | Sequence[float],
                          fresh_s: Sequence[float], ratio_min: float, salted: bool = True,
                          prompt_tokens: int | None = None, engine_prompt_tokens: float | None = None) -> Verdict:
    """A repeated request under a fresh cache salt: no prefix-cache hit where the profile forbids
    it (``salted``), and its end-to-end time at least ``ratio_min`` of the fastest fresh request of
    the same size (:func:`too_fast`; ``repeat_s`` one time or one per round). A time too short to
    be the server's work (``MEASURABLE_S``) leaves the ratio unjudged, said so.

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
    repeats = _times(repeat_s)
    fastest, slowest = min(fresh_s), max(repeats)
    ratio = slowest / fastest if fastest > 0 else float("inf")
    rounds = f" in each of {len(repeats)} rounds" if len(repeats) > 1 else ""
    if too_fast(repeats, fresh_s, ratio_min):
        problems.append(f"the repeated request took {slowest:.3f} s{rounds}, {ratio:.2f} of a fresh one's "
                        f"{fastest:.3f} s (limit: ratio >= {ratio_min:g}): answered from a cache")
    measured = (f"repeat/fresh e2e ratio {ratio:.2f} (limit >= {ratio_min:g}){rounds}" if fastest >= MEASURABLE_S
                else f"fresh request {fastest:.3f} s, too fast to judge a ratio")
    return _join(problems, measured)


# -- length band (TEST09) -------------------------------------------------------------------------


def check_length_band(content: str | None, min_chars: int, max_chars: int, module: str, *,
                      what: str = "visible answer") -> Verdict:
    """The measured text's length (characters, surrounding whitespace included: padding is what it
    catches) within the profile's band for this module. ``what`` names what was measured: the
    whole visible answer, or the answer line on (``graders/contract.py`` ``measured_span``)."""
    n = len(content or "")
    if n < min_chars:
        return Verdict.reject(f"{what} of {n} characters is shorter than the {module} band "
                              f"[{min_chars}, {max_chars}]: truncated")
    if n > max_chars:
        return Verdict.reject(f"{what} of {n} characters is longer than the {module} band "
                              f"[{min_chars}, {max_chars}]: padded")
    return Verdict.accept(f"{n} characters within [{min_chars}, {max_chars}]")
