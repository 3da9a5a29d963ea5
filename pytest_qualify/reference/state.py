"""The reference server's state: its vLLM-named metrics, its block prefix cache and what one
server holds across requests (the profile, the faults, the oracle context, the request count).
No HTTP here (``handler.py``)."""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable
from typing import Any

from pytest_qualify.profiles import Profile
from pytest_qualify.reference import oracle, serving
from pytest_qualify.reference.fault_effects import FaultEffects
from pytest_qualify.reference.faults import Faults
from pytest_qualify.reference.scheduler import Scheduler

CACHE_BLOCK = 16
# vLLM 0.32's INTER_TOKEN_LATENCY_BUCKETS (v1/metrics/buckets.py): its ITL and per-request TPOT histograms'.
INTER_TOKEN_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                       40.0, 80.0)


class Metrics:
    """vLLM-named Prometheus metrics, so evidence code parses the same names on both."""

    def __init__(self, model: str) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector

        self.registry = CollectorRegistry()
        # process_cpu_seconds_total and the rest, as vLLM's API server exposes them (its default registry).
        ProcessCollector(registry=self.registry)
        labels = ["model_name"]
        buckets = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0)
        self.ttft = Histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", labels, registry=self.registry, buckets=buckets)
        self.e2e = Histogram("vllm:e2e_request_latency_seconds", "Histogram of end to end request latency in seconds.", labels, registry=self.registry, buckets=buckets)
        self.prompt = Counter("vllm:prompt_tokens", "Number of prefill tokens processed.", labels, registry=self.registry)
        self.generation = Counter("vllm:generation_tokens", "Number of generation tokens processed.", labels, registry=self.registry)
        self.cache_queries = Counter("vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.", labels, registry=self.registry)
        self.cache_hits = Counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.", labels, registry=self.registry)
        self.success = Counter("vllm:request_success", "Count of successfully processed requests.", labels, registry=self.registry)
        # vLLM 0.32's per-request decode histograms (v1/metrics/loggers.py), on its inter-token buckets.
        self.itl = Histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", labels,
                             registry=self.registry, buckets=INTER_TOKEN_BUCKETS)
        self.tpot = Histogram("vllm:request_time_per_output_token_seconds",
                              "Histogram of time_per_output_token_seconds per request.", labels,
                              registry=self.registry, buckets=INTER_TOKEN_BUCKETS)
        for family in (self.itl, self.tpot):
            family.labels(model)  # vLLM creates its series at start (create_metric_per_engine): 0 until a request
        self.running = Gauge("vllm:num_requests_running", "Number of requests in model execution batches.", labels, registry=self.registry)
        self.model = model

    def decoded(self, ttft_s: float, e2e_s: float, output_tokens: int) -> None:
        """A finished request's decode, as vLLM observes it (v1/metrics/stats.py
        ``update_from_finished_request``): its time per output token, the decode (first token to
        last) over the tokens after the first, observed once for every finished request, 0 for one
        of a single token (vLLM observes that 0 too); and one inter-token latency per token after
        the first. SIMULATED: the reference times its decode as a whole, so each step is its mean."""
        steps = max(0, int(output_tokens) - 1)
        decode_s = max(0.0, e2e_s - ttft_s)
        per_token_s = decode_s / steps if steps > 0 else 0.0
        self.tpot.labels(self.model).observe(per_token_s)
        itl = self.itl.labels(self.model)
        for _ in range(steps):
            itl.observe(per_token_s)

    def cache_config(self, labels: dict[str, str]) -> None:
        """``vllm:cache_config_info``: the KV pool as vLLM shows it (a gauge of 1 whose labels are the values)."""
        from prometheus_client import Gauge

        gauge = Gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig", list(labels),
                      registry=self.registry)
        gauge.labels(**labels).set(1)

    def scheduler_config(self, max_num_seqs: int) -> None:
        """``vllm:scheduler_config_info{max_num_seqs=...}``: the admission limit the scheduler holds.
        vLLM 0.32 exports no such gauge (an operator reads ``--max-num-seqs`` from the serve command);
        the reference server shows it, as some vLLM-compatible servers do, so ``init`` can write
        load levels that rise to it (server/facts.py ``admission_limit``)."""
        from prometheus_client import Gauge

        gauge = Gauge("vllm:scheduler_config_info", "Information of the scheduler configuration", ["max_num_seqs"],
                      registry=self.registry)
        gauge.labels(max_num_seqs=str(max_num_seqs)).set(1)

    def text(self) -> bytes:
        from prometheus_client import generate_latest

        return generate_latest(self.registry)


class PrefixCache:
    """Block-hash prefix cache; the salt is part of the first block's hash, as in vLLM."""

    def __init__(self, ignore_salt: bool, on_salt_ignored: Callable[[], Any] | None = None) -> None:
        # block hash -> the salt of the request that cached it (the ignore_cache_salt fault's proof)
        self.blocks: dict[bytes, str | None] = {}
        self.ignore_salt = ignore_salt
        self.on_salt_ignored = on_salt_ignored
        self.lock = threading.Lock()

    def lookup_and_insert(self, token_ids: list[int], salt: str | None) -> int:
        h = hashlib.sha256(b"" if self.ignore_salt or not salt else salt.encode())
        cached, still_hit, crossed = 0, True, False
        with self.lock:
            for start in range(0, len(token_ids) - CACHE_BLOCK + 1, CACHE_BLOCK):
                h.update(json.dumps(token_ids[start : start + CACHE_BLOCK]).encode())
                key = h.copy().digest()
                if still_hit and key in self.blocks:
                    cached += CACHE_BLOCK
                    crossed = crossed or self.blocks[key] != salt
                else:
                    still_hit = False
                    self.blocks[key] = salt
        if crossed and self.ignore_salt and self.on_salt_ignored is not None:
            self.on_salt_ignored()  # a hit another salt's request cached: the salt was ignored
        return cached


class ReferenceState:
    def __init__(self, profile: Profile, faults: Faults, api_key: str | None, prefill_tok_s: float, decode_tok_s: float,
                 stream_whole: bool = False) -> None:
        self.profile = profile
        self.faults = faults
        self.effects = FaultEffects(faults)
        self.api_key = api_key
        self.prefill_tok_s = prefill_tok_s
        self.decode_tok_s = serving.decode_rate(decode_tok_s, faults)
        self.serving_facts = serving.simulated_facts(profile, faults)
        # A streamed answer's content in one chunk with its finish (vLLM 0.32.0 with a tool parser on).
        self.stream_whole = stream_whole
        self.ctx = oracle.OracleContext(profile, faults)
        self.metrics = Metrics(profile.deployment.served_name)
        self.metrics.cache_config(serving.cache_config_labels(self.serving_facts, profile))
        self.cache = PrefixCache("ignore_cache_salt" in faults, lambda: faults.engage("ignore_cache_salt"))
        self.scheduler = Scheduler(profile.limits.max_num_seqs, faults, self.metrics,
                                   profile.load.levels[-1] if profile.load else 2)
        self.metrics.scheduler_config(self.scheduler.max_num_seqs)
        self.chat_requests = 0
        self.lock = threading.Lock()
        faults.log.count_chat(lambda: self.chat_requests)
        # The result_cache fault's response cache: request body without its cache_salt -> answer.
        self.results: dict[str, tuple[Any, ...]] = {}
