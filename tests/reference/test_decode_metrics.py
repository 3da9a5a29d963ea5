"""The reference server's per-request decode histograms, as vLLM 0.32 defines them
(v1/metrics/stats.py ``update_from_finished_request``, v1/metrics/loggers.py):
``vllm:request_time_per_output_token_seconds`` observes each finished request once, its decode (first
token to last) over its tokens after the first, 0 for a one-token answer; ``vllm:inter_token_latency_seconds``
observes each token after the first. Both follow the simulated decode, so ``slow_decode`` raises them."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest

from pytest_qualify.evidence.metrics import ENGINE_TPOT_NAMES, engine_mean, parse
from pytest_qualify.profiles import load_profile
from pytest_qualify.reference.faults import Faults
from pytest_qualify.reference.state import INTER_TOKEN_BUCKETS, Metrics, ReferenceState
from .in_thread import serving

PROFILE = load_profile("small")
RATE_TOK_S = 200.0  # one decode step of a lone request: 5 ms
STEP_S = 1.0 / RATE_TOK_S
TOKENS = 24
TPOT = "request_time_per_output_token_seconds"
ITL = "inter_token_latency_seconds"


@contextmanager
def reference(*faults: str) -> Iterator[str]:
    with serving(ReferenceState(PROFILE, Faults.parse(list(faults)), None, 0.0, RATE_TOK_S)) as url:
        yield url


def _chat(url: str, max_tokens: int, stream: bool = False, **extra) -> httpx.Response:
    body = {"model": PROFILE.deployment.served_name, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
            "min_tokens": max_tokens, "stream": stream, "messages": [{"role": "user", "content": "Count upward from 1."}],
            **extra}
    return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=60)


def _scrape(url: str):
    return parse(httpx.get(f"{url}/metrics", timeout=30).text)


def _probes(url: str, n: int, stream: bool = False) -> float:
    """The engine's mean time per output token over ``n`` decode probes, read as the load module reads it."""
    before = _scrape(url)
    for _ in range(n):
        assert _chat(url, TOKENS, stream).status_code == 200
    got = engine_mean(before, _scrape(url), ENGINE_TPOT_NAMES, n)
    assert got.metric == f"vllm:{TPOT}" and got.observations == n, got
    return got.value


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_each_finished_request_is_observed_once_and_its_mean_is_the_simulated_decode(stream):
    with reference() as url:
        before = _scrape(url)
        assert before.get(f"{TPOT}_count") == 0 and before.get(f"{ITL}_count") == 0
        for n in (1, 2, 3):
            reply = _chat(url, TOKENS, stream)
            assert reply.status_code == 200
            after = _scrape(url)
            assert after.get(f"{TPOT}_count") == n  # one more per finished request
            assert after.get(f"{ITL}_count") == n * (TOKENS - 1)  # one per token after the first
        tpot_mean = after.get(f"{TPOT}_sum") / 3
        # The decode of 24 one-step tokens spread over the 23 after the first: at least a step each
        # (a sleep never ends early), and no more than twice one on a busy machine.
        assert STEP_S <= tpot_mean < 2 * STEP_S, tpot_mean
        # vLLM's identity: the inter-token latencies add up to the decode, TPOT times the tokens after the first.
        assert after.get(f"{ITL}_sum") == pytest.approx(after.get(f"{TPOT}_sum") * (TOKENS - 1), rel=1e-9)


def test_a_one_token_answer_is_observed_as_0_and_a_refused_request_not_at_all():
    with reference() as url:
        before = _scrape(url)
        assert _chat(url, 1).json()["usage"]["completion_tokens"] == 1
        one = _scrape(url)
        # vLLM observes every finished request, 0 where there is no token after the first.
        assert one.get(f"{TPOT}_count") == 1 and one.get(f"{TPOT}_sum") == 0 and one.get(f"{ITL}_count") == 0
        refused = _chat(url, 8, model="no-such-model")
        assert refused.status_code == 404
        assert _scrape(url).get(f"{TPOT}_count") == 1  # never reached the engine
        assert engine_mean(before, one, ENGINE_TPOT_NAMES, 1).value == 0


def test_slow_decode_raises_the_engines_time_per_output_token():
    with reference() as url:
        clean = _probes(url, 3, stream=True)
    with reference("slow_decode=3") as url:
        slow = _probes(url, 3, stream=True)
    assert clean < 2 * STEP_S and slow >= 3 * STEP_S, (clean, slow)


def test_the_histograms_use_vllms_inter_token_buckets():
    """vLLM 0.32's INTER_TOKEN_LATENCY_BUCKETS: 10 ms to 80 s, for both histograms."""
    metrics = Metrics("m")
    metrics.decoded(0.5, 0.5 + 0.02 * 9, 10)
    text = metrics.text().decode()
    for name in (TPOT, ITL):
        bounds = [line.split('le="')[1].split('"')[0] for line in text.splitlines()
                  if line.startswith(f"vllm:{name}_bucket")]
        assert [float(b) for b in bounds[:-1]] == list(INTER_TOKEN_BUCKETS) and bounds[-1] == "+Inf"
    assert INTER_TOKEN_BUCKETS[0] == 0.01 and INTER_TOKEN_BUCKETS[-1] == 80.0 and len(INTER_TOKEN_BUCKETS) == 19
    snap = parse(text)
    assert snap.get(f"{TPOT}_sum") == pytest.approx(0.02) and snap.get(f"{ITL}_count") == 9
