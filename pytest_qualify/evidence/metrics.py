"""Server-side cross-check: vLLM's Prometheus ``/metrics``, parsed tolerantly.

Names differ between vLLM versions and exporters (``vllm:prompt_tokens`` as a counter family
whose sample is ``vllm:prompt_tokens_total``; ``_created`` timestamps; one series per
``model_name`` or engine label). A :class:`Snapshot` therefore keys every sample by its name
without the ``vllm:`` prefix and without a ``_total`` suffix, skips ``_created`` and histogram
buckets, and sums over labels. No pytest here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pytest_qualify.graders.answer_checks import INCREMENTAL_MIN_TOKENS
from pytest_qualify.properties import TimingSource

PREFIXES = ("vllm:", "vllm_")

# Whichever of these the server exposes counts prefix-cache hits in tokens (vLLM V1 first).
CACHE_HIT_NAMES = ("prefix_cache_hits", "prompt_tokens_cached", "gpu_prefix_cache_hits")
TTFT = "time_to_first_token_seconds"
E2E = "e2e_request_latency_seconds"


def normalize(sample_name: str) -> str | None:
    """The tolerant key of a sample name; None for samples that are not values (timestamps)."""
    name = sample_name
    for prefix in PREFIXES:
        if name.startswith(prefix):
            name = name[len(prefix):]
            break
    if name.endswith("_created") or name.endswith("_bucket"):
        return None
    if name.endswith("_total"):
        name = name[: -len("_total")]
    return name


@dataclass(frozen=True)
class Snapshot:
    """One scrape: tolerant sample name -> value summed over labels."""

    values: Mapping[str, float] = field(default_factory=dict)
    text: str = ""

    def get(self, name: str) -> float | None:
        return self.values.get(name)

    def first(self, names: tuple[str, ...]) -> tuple[str, float] | None:
        for name in names:
            if name in self.values:
                return name, self.values[name]
        return None


class MetricsParseError(ValueError):
    pass


def parse(text: str) -> Snapshot:
    from prometheus_client.parser import text_string_to_metric_families

    values: dict[str, float] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                key = normalize(sample.name)
                if key is None:
                    continue
                value = float(sample.value)
                if value != value:  # NaN: a gauge with no observation yet
                    continue
                values[key] = values.get(key, 0.0) + value
    except ValueError as exc:
        raise MetricsParseError(f"/metrics is not Prometheus text: {exc}") from exc
    return Snapshot(values, text)


@dataclass(frozen=True)
class Delta:
    """What the server did between two scrapes."""

    requests: float | None  # TTFT observations (one per request that produced a token)
    ttft_sum_s: float | None
    e2e_count: float | None
    e2e_sum_s: float | None
    prompt_tokens: float | None
    generation_tokens: float | None
    cache_hit_tokens: float | None
    cache_metric: str | None  # which name counted the hits, for the report
    # The CPU seconds of the process that answers /metrics: vLLM's API server (prometheus_client's
    # process collector), where the chat templates are rendered and prompts tokenized.
    api_server_cpu_s: float | None = None

    @property
    def server_ttft_mean_s(self) -> float | None:
        if self.requests and self.ttft_sum_s is not None:
            return self.ttft_sum_s / self.requests
        return None

    @property
    def server_e2e_mean_s(self) -> float | None:
        if self.e2e_count and self.e2e_sum_s is not None:
            return self.e2e_sum_s / self.e2e_count
        return None

    def as_dict(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "ttft_sum_s": self.ttft_sum_s,
            "ttft_mean_s": self.server_ttft_mean_s,
            "e2e_count": self.e2e_count,
            "e2e_sum_s": self.e2e_sum_s,
            "e2e_mean_s": self.server_e2e_mean_s,
            "prompt_tokens": self.prompt_tokens,
            "generation_tokens": self.generation_tokens,
            "cache_hit_tokens": self.cache_hit_tokens,
            "cache_metric": self.cache_metric,
            "api_server_cpu_s": self.api_server_cpu_s,
        }


def _diff(before: Snapshot, after: Snapshot, name: str) -> float | None:
    a, b = after.get(name), before.get(name)
    if a is None:
        return None
    # A counter that went down means the server restarted between scrapes: the delta is unknown.
    d = a - (b or 0.0)
    return d if d >= 0 else None


def delta(before: Snapshot, after: Snapshot) -> Delta:
    hit = after.first(CACHE_HIT_NAMES)
    return Delta(
        requests=_diff(before, after, TTFT + "_count"),
        ttft_sum_s=_diff(before, after, TTFT + "_sum"),
        e2e_count=_diff(before, after, E2E + "_count"),
        e2e_sum_s=_diff(before, after, E2E + "_sum"),
        prompt_tokens=_diff(before, after, "prompt_tokens"),
        generation_tokens=_diff(before, after, "generation_tokens"),
        cache_hit_tokens=_diff(before, after, hit[0]) if hit else None,
        cache_metric=("vllm:" + hit[0]) if hit else None,
        api_server_cpu_s=_diff(before, after, "process_cpu_seconds"),
    )


def lane_properties(d: Delta, client_requests: int | None) -> dict[str, Any]:
    """JUnit properties for the server-side view of one context-lane item.

    ``metrics_attribution`` is ``exclusive`` when the server saw no more requests than the item
    made; under ``pytest -n N`` other items may run concurrently, and then the deltas are
    ``shared`` and the report says so instead of blaming the lane.
    """
    props: dict[str, Any] = {}
    if d.requests is not None:
        props["server_requests"] = int(d.requests)
    if d.server_ttft_mean_s is not None:
        props["server_ttft_s"] = round(d.server_ttft_mean_s, 6)
    if d.server_e2e_mean_s is not None:
        props["server_e2e_s"] = round(d.server_e2e_mean_s, 6)
    if d.cache_hit_tokens is not None:
        props["prefix_cache_hit_tokens"] = int(d.cache_hit_tokens)
    if d.requests is not None and client_requests is not None:
        props["metrics_attribution"] = "exclusive" if d.requests <= client_requests else "shared"
    return props


TIMING_SOURCE_NOTES = {
    TimingSource.CLIENT: "the client's first chunk",
    TimingSource.CLIENT_HELD: ("the client's first chunk, though the whole answer came in one chunk with its finish: "
                               "it read the parser that held the content, not the engine (no engine TTFT is known "
                               "for the request)"),
    TimingSource.ENGINE: ("the engine's own TTFT (vllm:time_to_first_token_seconds read around the request), since "
                          "the whole answer came in one chunk with its finish: the client's chunks read the parser "
                          "that held the content"),
}


def held_stream(props: Mapping[str, Any]) -> bool:
    """Whether a request's stream came whole: all its output, ``INCREMENTAL_MIN_TOKENS`` tokens or
    more, in one chunk with its finish (``answer_checks.check_incremental``'s rule, by which the sweep
    and load modules leave a sample out of their chunk figures)."""
    tokens = props.get("completion_tokens")
    try:
        n = None if tokens is None or isinstance(tokens, bool) else float(tokens)
    except (TypeError, ValueError):
        n = None
    whole = str(props.get("whole_at_finish")) in ("True", "true", "1")
    return whole and n is not None and math.isfinite(n) and n >= INCREMENTAL_MIN_TOKENS


def lane_timing(d: Delta, timed: Mapping[str, Any]) -> dict[str, Any]:
    """A context-lane item's TTFT as its figures read it (its properties ``timed``: the streamed
    request's timing, ``client/timing.merge_answer_properties``), to replace them: where the stream
    came as decoded, the client's first chunk (``ttft_source`` says so); where it came whole
    (:func:`held_stream`), the engine's own TTFT for that request when the server counted exactly
    the item's one request between the scrapes (``ttft_s`` and ``prefill_tok_s`` from it, the
    client's kept as ``client_ttft_s``), else the client's, said to have read the parser. {} for an
    item with no streamed timing."""
    if timed.get("timing_source") != "streamed" or not isinstance(timed.get("ttft_s"), (int, float)):
        return {}
    if not held_stream(timed):
        return {"ttft_source": str(TimingSource.CLIENT)}
    engine = d.server_ttft_mean_s
    if d.requests == 1 and timed.get("requests") == 1 and engine:
        out: dict[str, Any] = {"ttft_s": round(engine, 6), "client_ttft_s": timed["ttft_s"],
                               "ttft_source": str(TimingSource.ENGINE)}
        prompt = timed.get("prompt_tokens")
        if isinstance(prompt, (int, float)) and prompt:
            out["prefill_tok_s"] = round(prompt / engine, 6)
        return out
    return {"ttft_source": str(TimingSource.CLIENT_HELD)}


# The engine's own per-request histograms a decision may read around a measurement (vLLM's names,
# newest first): they time the engine, so no chunking of the stream (vLLM holds whitespace-only
# content to the finish when a tool parser is on) can change them.
ENGINE_TPOT_NAMES = ("request_time_per_output_token_seconds", "time_per_output_token_seconds",
                     "inter_token_latency_seconds")
ENGINE_TTFT_NAMES = (TTFT,)
# One observation per request: a delta whose count is not the requests sent saw someone else's too.
PER_REQUEST = ("request_time_per_output_token_seconds", TTFT)


@dataclass(frozen=True)
class EngineMean:
    """The mean of an engine histogram over a measurement (``sum`` delta over ``count`` delta), the
    metric it came from, and how many observations it holds; or why there is none."""

    value: float | None
    metric: str | None
    observations: int = 0
    why: str = ""


def engine_mean(before: Snapshot | None, after: Snapshot | None, names: tuple[str, ...],
                requests: int | None = None) -> EngineMean:
    """The first of ``names`` that observed anything between the two scrapes (no series before the
    server's first observation: its sum and count were 0). ``requests``: how many requests the
    measurement sent; a per-request histogram that counted more saw other requests too (another
    worker's), and gives no figure."""
    if after is None:
        return EngineMean(None, None, why="/metrics could not be read")
    for name in names:
        total, count = after.get(f"{name}_sum"), after.get(f"{name}_count")
        if total is None or count is None:
            continue
        d_sum = total - ((before.get(f"{name}_sum") if before else None) or 0.0)
        d_count = count - ((before.get(f"{name}_count") if before else None) or 0.0)
        if d_count <= 0:
            continue
        if requests is not None and name in PER_REQUEST and round(d_count) > requests:
            # (Fewer is possible: a one-token answer has no time per output token.)
            return EngineMean(None, f"vllm:{name}", int(d_count),
                              f"vllm:{name} counted {int(d_count)} requests, more than the {requests} sent: "
                              "others ran beside them")
        return EngineMean(d_sum / d_count, f"vllm:{name}", int(d_count))
    return EngineMean(None, None, why=f"the server reports none of {', '.join('vllm:' + n for n in names)}")
