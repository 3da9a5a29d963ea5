"""The load module's judgements: every answer under load graded by its own module's grader, each
held to its answer at concurrency 1, and the per-level latency figures. Pure functions: no sockets,
no files.

Figures follow ``vllm bench serve``'s definitions (client/timing.py): TTFT at the first chunk with
``choices``; TPOT ``(e2e - ttft) / (output_tokens - 1)`` per request; ITL the gaps between a
stream's chunks, pooled over the level's probes (``itl_s``: per chunk), and each gap over the
tokens its chunk brought (``itl_token_s``: per token, from the stream's running usage), with the
tokens per chunk beside them: on an engine that streams one token a chunk the two ITLs agree, on one
that packs many a chunk only the per-token one compares with TPOT; percentiles interpolated linearly (numpy's
default); request throughput and output tok/s over the level's wall time; goodput the share of
probes inside both of the profile's limits (``--goodput ttft:… tpot:…``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_qualify.client.timing import percentile
from pytest_qualify.graders import Verdict
from pytest_qualify.graders.finish import check_finish
from pytest_qualify.graders.integrity import RecordedAnswer, check_same_answers, parsed_calls

PERCENTILES = (50, 95, 99)


def grade_item(item: Any, answer: Any) -> Verdict:
    """Grade an answer to a mix item (tasks/load.LoadItem) exactly as its own module does: the
    finish state every module checks, then that module's grader on that module's case."""
    finish = check_finish(answer, expect_tool=item.tool_turn)
    if not finish:
        return Verdict.reject(f"finish state: {finish.reason}")
    shape = stream_contract(answer)
    if not shape:
        return shape
    case = item.case
    if item.module == "smoke":
        return case.grade(answer.content)
    if item.module == "tools":
        from pytest_qualify.graders.tools import grade_calls, grade_stream_shape

        if answer.streamed:
            named = grade_stream_shape(answer.tool_name_deltas, answer.finish_reason)
            if not named:
                return named
        return grade_calls(answer.tool_calls, case.calls, item.schemas, answer.content)
    if item.module == "recall":
        from pytest_qualify.graders.recall import grade_recall

        return grade_recall(answer.content, case.contract, case.near_misses)
    if item.module == "json":
        from pytest_qualify.graders.json_output import check_json_answer

        return check_json_answer(answer.content, case["schema"], case["expected"],
                                 unordered=case.get("unordered", ()), accepted=case.get("accepted", {}))
    raise ValueError(f"no grader for load item module {item.module!r}")


def stream_contract(answer: Any) -> Verdict:
    """A streamed answer's chunk structure, as every streamed answer of the protocol is held to it
    (graders/integrity.py: one finish chunk, usage exactly when asked, no more deltas than tokens,
    tool-call deltas that start with id, type and name). A plain answer has none to judge."""
    from pytest_qualify.graders.integrity import check_stream_shape

    if getattr(answer, "stream", None) is None:
        return Verdict.accept("not streamed")
    verdict = check_stream_shape(answer.stream, answer.completion_tokens if answer.usage else None,
                                 answer.finish_reason)
    return verdict if verdict.ok else Verdict.reject(f"stream contract: {verdict.reason}")


def recorded(answer: Any, who: str) -> RecordedAnswer:
    return RecordedAnswer(who, bool(answer.streamed), answer.content, parsed_calls(answer.tool_calls),
                          answer.finish_reason)


def held_to_first(now: RecordedAnswer, first: RecordedAnswer) -> Verdict:
    """The answer under load equals the item's answer at concurrency 1 (same request, temperature 0):
    content, tool calls (parsed values) and finish reason."""
    return check_same_answers(now, [first])


@dataclass(frozen=True)
class ProbeTiming:
    """One decode probe's client-observed timing: offsets in seconds from its send."""

    ttft_s: float
    e2e_s: float
    output_tokens: int
    gaps_s: tuple[float, ...]
    # Output tokens of each chunk with choices (gaps_s[i] ends at chunk i + 1); empty when the
    # stream did not say (no running usage).
    chunk_tokens: tuple[int, ...] = ()

    @property
    def token_gaps_s(self) -> tuple[float, ...]:
        """Each gap over the tokens of the chunk that ended it: the per-token inter-token latency
        (a chunk that brought no token, a finish-only chunk, has none)."""
        if len(self.chunk_tokens) != len(self.gaps_s) + 1:
            return ()
        return tuple(gap / n for gap, n in zip(self.gaps_s, self.chunk_tokens[1:]) if n > 0)

    @property
    def tokens_per_chunk(self) -> tuple[int, ...]:
        """The tokens of each chunk that brought any."""
        return tuple(n for n in self.chunk_tokens if n > 0)

    @property
    def tpot_s(self) -> float | None:
        if self.output_tokens < 2 or self.e2e_s <= self.ttft_s:
            return None
        return (self.e2e_s - self.ttft_s) / (self.output_tokens - 1)


def check_probe(answer: Any, asked: int) -> Verdict:
    """A decode probe's answer: its stream holds the stream contract, it ends ``length`` (it asked
    for no end of sequence) and it decoded exactly the N tokens it asked for."""
    shape = stream_contract(answer)
    if not shape:
        return shape
    length = check_probe_length(answer.completion_tokens, asked)
    if length and answer.finish_reason != "length":
        return Verdict.reject(f"decode probe asked for exactly {asked} tokens with ignore_eos and its finish_reason "
                              f"is {answer.finish_reason!r}, not 'length'")
    return length


def check_probe_length(output_tokens: int | None, asked: int) -> Verdict:
    """A probe must decode exactly the N tokens it asked for, or its TPOT is not the figure it claims."""
    if output_tokens == asked:
        return Verdict.accept(f"{asked} tokens")
    return Verdict.reject(f"decode probe asked for exactly {asked} tokens (max_tokens = min_tokens = {asked}, "
                          f"ignore_eos) and got {output_tokens}: the server did not honour the length controls, so "
                          "its decode figures cannot be measured")


def _stats(name: str, values: Sequence[float]) -> dict[str, float | None]:
    return {f"{name}_p{q}": (percentile(values, q) if values else None) for q in PERCENTILES}


def level_figures(probes: Sequence[ProbeTiming], completed: int, output_tokens: int, wall_s: float,
                  goodput_ttft_s_max: float | None = None, goodput_tpot_s_max: float | None = None,
                  queue: Mapping[str, float] | None = None) -> dict[str, Any]:
    """One level's figures (None where nothing measured them): TTFT, TPOT, ITL per chunk and per
    token p50/p95/p99 and the tokens per chunk (p50, max) over its probes, request throughput and output tok/s over every completed request, the server's mean
    queue time (``queue``: the ``vllm:request_queue_time_seconds`` sum and count over the level),
    goodput."""
    ttft = [p.ttft_s for p in probes]
    tpot = [t for t in (p.tpot_s for p in probes) if t is not None]
    itl = [g for p in probes for g in p.gaps_s]
    itl_token = [g for p in probes for g in p.token_gaps_s]
    per_chunk = [n for p in probes for n in p.tokens_per_chunk]
    out: dict[str, Any] = {**_stats("ttft_s", ttft), **_stats("tpot_s", tpot), **_stats("itl_s", itl),
                           **_stats("itl_token_s", itl_token)}
    out["tokens_per_chunk_p50"] = percentile(per_chunk, 50) if per_chunk else None
    out["tokens_per_chunk_max"] = max(per_chunk) if per_chunk else None
    out["requests_per_s"] = completed / wall_s if wall_s > 0 and completed else None
    out["output_tok_s"] = output_tokens / wall_s if wall_s > 0 and output_tokens else None
    count = (queue or {}).get("count")
    out["queue_time_s_mean"] = queue["sum"] / count if queue and count else None
    out["queue_requests"] = int(count) if count else None
    limited = goodput_ttft_s_max is not None or goodput_tpot_s_max is not None
    if limited and probes:
        good = sum(1 for p in probes
                   if (goodput_ttft_s_max is None or p.ttft_s <= goodput_ttft_s_max)
                   and (goodput_tpot_s_max is None or (p.tpot_s is not None and p.tpot_s <= goodput_tpot_s_max)))
        out["goodput"] = good / len(probes)
    else:
        out["goodput"] = None
    return out
