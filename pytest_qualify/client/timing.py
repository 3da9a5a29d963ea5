"""Client-observed request timing, with vLLM bench's definitions (its statistics: ``stats.py``).

TTFT is taken at the first chunk that carries ``choices`` — a role-only first chunk counts, as in
``vllm bench serve``; a usage-only chunk (``choices: []``) is not a token. Time to first *visible*
token (TTFVT) is the first content or tool-call delta. Token counts come from the server's
``usage`` and are never re-tokenised here. Decode throughput is ``(completion_tokens - 1) /
(e2e - ttft)`` and prefill throughput ``prompt_tokens / ttft``; both are client-observed (they
include network and HTTP time), never kernel measurements, and the evidence labels them so.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pytest_qualify.stats import percentile


@dataclass
class Timeline:
    """Offsets in seconds from the moment the request was sent."""

    t0: float = 0.0
    clock: Callable[[], float] = time.perf_counter
    first_chunk_s: float | None = None
    first_visible_s: float | None = None
    chunk_s: list[float] = field(default_factory=list)
    e2e_s: float | None = None
    streamed: bool = True

    @classmethod
    def start(cls, clock: Callable[[], float] = time.perf_counter) -> "Timeline":
        return cls(t0=clock(), clock=clock)

    @classmethod
    def single(cls, e2e_s: float) -> "Timeline":
        """A non-streamed request: only the end-to-end time is known (no TTFT, no decode rate)."""
        return cls(e2e_s=e2e_s, streamed=False)

    def chunk(self, has_choices: bool, visible: bool, at_s: float | None = None) -> None:
        """One SSE chunk arrived. ``has_choices``: it carries a ``choices`` entry (role-only
        included); ``visible``: it carries content or a tool-call delta."""
        t = self.clock() - self.t0 if at_s is None else at_s
        if has_choices:
            self.chunk_s.append(t)
            if self.first_chunk_s is None:
                self.first_chunk_s = t
        if visible and self.first_visible_s is None:
            self.first_visible_s = t

    def finish(self, at_s: float | None = None) -> None:
        self.e2e_s = self.clock() - self.t0 if at_s is None else at_s

    @property
    def ttft_s(self) -> float | None:
        return self.first_chunk_s

    @property
    def inter_chunk_s(self) -> list[float]:
        """Gaps between consecutive chunks with choices (vLLM bench's inter-token latencies,
        per chunk: one chunk may carry several tokens)."""
        return [b - a for a, b in zip(self.chunk_s, self.chunk_s[1:])]


@dataclass(frozen=True)
class RequestMetrics:
    ttft_s: float | None
    ttfvt_s: float | None
    e2e_s: float | None
    prompt_tokens: int | None
    completion_tokens: int | None
    decode_tok_s: float | None
    prefill_tok_s: float | None
    chunks: int | None = None
    inter_chunk_p50_s: float | None = None
    inter_chunk_max_s: float | None = None
    # How the answer's output tokens came in chunks: the chunks that carried output, the mean tokens
    # per such chunk (usage's completion tokens over them), and whether it all came in one chunk
    # with its finish (then ``ttft_s``, taken at the first chunk, is the end to end, not a TTFT).
    output_chunks: int | None = None
    tokens_per_chunk: float | None = None
    whole_at_finish: bool | None = None

    def as_properties(self) -> dict[str, float | int]:
        """The non-missing values, under the names the JUnit properties use."""
        return {k: v for k, v in self.__dict__.items() if v is not None}


TIMING_PROPERTIES: tuple[str, ...] = tuple(RequestMetrics.__dataclass_fields__)
# The properties that say which request is an item's timing, and the counts over all its requests.
PRIMARY_KEYS = frozenset(TIMING_PROPERTIES) | {"timing_source", "timing_request", "cached_tokens"}
COUNT_KEYS = frozenset({"requests", "requests_e2e_s"})


def merge_answer_properties(props: list[tuple[str, Any]], metrics: RequestMetrics, streamed: bool,
                            cached_tokens: int | None = None) -> None:
    """Fold one request's metrics into an item's user properties, in place.

    The first streamed request is the item's timing (a context lane's main request is streamed;
    a helper request before it — a token count, a warm-up — is not); until one arrives, the first
    request stands in. Every request bumps ``requests`` and ``requests_e2e_s``.
    """
    current = dict(props)
    n = int(current.get("requests", 0)) + 1
    total = float(current.get("requests_e2e_s", 0.0)) + (metrics.e2e_s or 0.0)
    # No timing yet (the first request, or one after the item discarded its timing: ``retime``).
    take = "timing_source" not in current or (streamed and current.get("timing_source") != "streamed")
    drop = COUNT_KEYS | (PRIMARY_KEYS if take else frozenset())
    props[:] = [(k, v) for k, v in props if k not in drop]
    if take:
        props.extend((k, round(v, 6) if isinstance(v, float) else v) for k, v in metrics.as_properties().items())
        if cached_tokens is not None:
            props.append(("cached_tokens", cached_tokens))
        props.append(("timing_source", "streamed" if streamed else "non-streamed"))
        props.append(("timing_request", n))
    props.append(("requests", n))
    props.append(("requests_e2e_s", round(total, 6)))


def request_metrics(timeline: Timeline | None, prompt_tokens: int | None, completion_tokens: int | None,
                    stream: Any = None) -> RequestMetrics:
    """One request's metrics. Rates that cannot be defined honestly stay None: no decode rate
    from a single token or a non-streamed request, no prefill rate without a TTFT. ``stream``: the
    streamed answer's chunk structure (``answer.StreamShape``), for its tokens per chunk."""
    ttft = timeline.ttft_s if timeline else None
    e2e = timeline.e2e_s if timeline else None
    decode = None
    if ttft is not None and e2e is not None and completion_tokens and completion_tokens > 1 and e2e > ttft:
        decode = (completion_tokens - 1) / (e2e - ttft)
    prefill = prompt_tokens / ttft if ttft and prompt_tokens else None
    gaps = timeline.inter_chunk_s if timeline else []
    streamed = timeline is not None and timeline.streamed
    return RequestMetrics(
        ttft_s=ttft,
        ttfvt_s=timeline.first_visible_s if timeline else None,
        e2e_s=e2e,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        decode_tok_s=decode,
        prefill_tok_s=prefill,
        chunks=len(timeline.chunk_s) if streamed else None,
        inter_chunk_p50_s=percentile(gaps, 50) if gaps else None,
        inter_chunk_max_s=max(gaps) if gaps else None,
        output_chunks=stream.output_chunks if stream is not None else None,
        tokens_per_chunk=(completion_tokens / stream.output_chunks
                          if stream is not None and stream.output_chunks and completion_tokens else None),
        whole_at_finish=stream.whole_at_finish if stream is not None else None,
    )
