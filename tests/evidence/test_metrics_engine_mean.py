"""evidence/metrics.py ``engine_mean``: the engine's own histograms read around a measurement (the
load level's time per output token, the sweep samples' TTFT), vLLM's names newest first, none where
the server reports no such histogram, and none where a per-request histogram counted more requests
than the measurement sent (another worker's ran beside it)."""

from __future__ import annotations

from pytest_qualify.evidence.metrics import ENGINE_TPOT_NAMES, ENGINE_TTFT_NAMES, Snapshot, engine_mean, parse


def _snap(name: str, total: float, count: float) -> Snapshot:
    return Snapshot({f"{name}_sum": total, f"{name}_count": count})


def test_the_mean_is_the_delta_of_the_histogram_over_the_measurement():
    got = engine_mean(_snap("request_time_per_output_token_seconds", 1.0, 10),
                      _snap("request_time_per_output_token_seconds", 1.3, 110), ENGINE_TPOT_NAMES)
    assert abs(got.value - 0.003) < 1e-12 and got.metric == "vllm:request_time_per_output_token_seconds"
    assert got.observations == 100


def test_an_older_name_serves_where_the_newer_is_absent_and_no_series_before_means_zero():
    got = engine_mean(None, _snap("time_per_output_token_seconds", 0.5, 200), ENGINE_TPOT_NAMES)
    assert got.value == 0.0025 and got.metric == "vllm:time_per_output_token_seconds"
    got = engine_mean(Snapshot(), _snap("inter_token_latency_seconds", 0.2, 100), ENGINE_TPOT_NAMES)
    assert got.value == 0.002 and got.metric == "vllm:inter_token_latency_seconds"


def test_no_histogram_or_no_observation_gives_no_figure_and_says_why():
    assert engine_mean(None, None, ENGINE_TPOT_NAMES).why == "/metrics could not be read"
    none = engine_mean(None, _snap("request_queue_time_seconds", 1.0, 3), ENGINE_TPOT_NAMES)
    assert none.value is None and "reports none of vllm:request_time_per_output_token_seconds" in none.why
    same = _snap("request_time_per_output_token_seconds", 1.0, 10)
    assert engine_mean(same, same, ENGINE_TPOT_NAMES).value is None


def test_a_per_request_histogram_that_saw_other_requests_gives_no_figure():
    text_before = "vllm:time_to_first_token_seconds_sum 2.0\nvllm:time_to_first_token_seconds_count 4\n"
    text_after = "vllm:time_to_first_token_seconds_sum 3.5\nvllm:time_to_first_token_seconds_count 9\n"
    before, after = parse(text_before), parse(text_after)
    assert engine_mean(before, after, ENGINE_TTFT_NAMES, requests=5).value == 0.3
    other = engine_mean(before, after, ENGINE_TTFT_NAMES, requests=4)
    assert other.value is None and "counted 5 requests, more than the 4 sent" in other.why
    # Fewer is no sign of others: a one-token answer has no time per output token.
    tpot = engine_mean(_snap("request_time_per_output_token_seconds", 0, 0),
                       _snap("request_time_per_output_token_seconds", 0.02, 8), ENGINE_TPOT_NAMES, requests=10)
    assert tpot.value == 0.0025
