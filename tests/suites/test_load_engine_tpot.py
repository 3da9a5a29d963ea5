"""The load module's engine-side decode figure: the mean time per output token from the engine's own
``/metrics`` histograms read around a level (vLLM's names, the first one the server has), which no
chunking of the stream can change; none where the server reports no such histogram."""

from __future__ import annotations

from pytest_qualify.suites.test_load import engine_tpot


def _reading(name: str, total: float, count: float) -> dict[str, float]:
    return {f"{name}_sum": total, f"{name}_count": count}


def test_the_engines_tpot_is_the_levels_delta_of_its_histogram():
    before = _reading("request_time_per_output_token_seconds", 1.0, 10)
    after = _reading("request_time_per_output_token_seconds", 1.3, 110)
    tpot, source = engine_tpot(before, after)
    assert abs(tpot - 0.003) < 1e-12 and source == "vllm:request_time_per_output_token_seconds"


def test_an_older_name_serves_where_the_newer_is_absent_and_no_series_before_means_zero():
    tpot, source = engine_tpot(None, _reading("time_per_output_token_seconds", 0.5, 200))
    assert tpot == 0.0025 and source == "vllm:time_per_output_token_seconds"
    tpot, source = engine_tpot({}, _reading("inter_token_latency_seconds", 0.2, 100))
    assert tpot == 0.002 and source == "vllm:inter_token_latency_seconds"


def test_no_histogram_or_no_observation_in_the_level_gives_no_figure():
    assert engine_tpot(None, None) == (None, None)
    assert engine_tpot(None, _reading("request_queue_time_seconds", 1.0, 3)) == (None, None)
    same = _reading("request_time_per_output_token_seconds", 1.0, 10)
    assert engine_tpot(same, dict(same)) == (None, None)
