"""Timing maths on synthetic chunk timelines (vLLM bench's definitions) and the statistics."""

from __future__ import annotations

import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_qualify.client.timing import Timeline, request_metrics
from pytest_qualify.stats import percentile, spread


def timeline(events: list[tuple[float, bool, bool]], end_s: float) -> Timeline:
    """(at_s, has_choices, visible) per chunk, then the end of the stream."""
    tl = Timeline(t0=0.0, clock=lambda: 0.0)
    for at, has_choices, visible in events:
        tl.chunk(has_choices=has_choices, visible=visible, at_s=at)
    tl.finish(at_s=end_s)
    return tl


def test_role_only_first_chunk_counts_for_ttft_but_not_ttfvt():
    # vLLM's first chunk carries only {"role": "assistant"}: it has choices, so it is TTFT;
    # the first visible token comes later.
    tl = timeline([(0.50, True, False), (0.80, True, True), (0.90, True, True), (1.00, True, False)], 1.10)
    m = request_metrics(tl, prompt_tokens=1000, completion_tokens=11)
    assert m.ttft_s == 0.50
    assert m.ttfvt_s == 0.80
    assert m.e2e_s == 1.10
    assert m.decode_tok_s == pytest.approx(10 / 0.60)
    assert m.prefill_tok_s == pytest.approx(2000.0)
    assert m.chunks == 4
    assert m.inter_chunk_max_s == pytest.approx(0.30)
    assert m.inter_chunk_p50_s == pytest.approx(0.10)


def test_usage_only_chunk_is_not_a_token():
    # include_usage: the last chunk has "choices": [] and must not move TTFT or add a gap.
    tl = timeline([(0.20, False, False), (0.30, True, True), (0.40, True, True), (0.45, False, False)], 0.46)
    m = request_metrics(tl, 10, 3)
    assert m.ttft_s == 0.30
    assert m.chunks == 2
    assert tl.inter_chunk_s == pytest.approx([0.10])


def test_tool_call_deltas_are_visible():
    # A tool turn has no content at all: the first tool-call delta is the first visible token.
    tl = timeline([(0.1, True, False), (0.25, True, True), (0.3, True, True), (0.35, True, True)], 0.4)
    m = request_metrics(tl, 500, 21)
    assert m.ttft_s == 0.1
    assert m.ttfvt_s == 0.25
    assert m.decode_tok_s == pytest.approx(20 / 0.3)


def test_non_streamed_request_has_only_end_to_end():
    m = request_metrics(Timeline.single(0.8), 100, 50)
    assert m.e2e_s == 0.8
    assert m.ttft_s is None and m.ttfvt_s is None
    assert m.decode_tok_s is None and m.prefill_tok_s is None
    assert m.chunks is None
    assert set(m.as_properties()) == {"e2e_s", "prompt_tokens", "completion_tokens"}


@pytest.mark.parametrize("completion_tokens", [None, 0, 1])
def test_no_decode_rate_without_a_second_token(completion_tokens):
    m = request_metrics(timeline([(0.1, True, True)], 0.2), 10, completion_tokens)
    assert m.decode_tok_s is None


def test_no_decode_rate_when_the_stream_ends_at_the_first_chunk():
    m = request_metrics(timeline([(0.2, True, True)], 0.2), 10, 5)
    assert m.decode_tok_s is None


def test_no_prefill_rate_without_prompt_tokens():
    assert request_metrics(timeline([(0.2, True, True)], 0.3), None, 5).prefill_tok_s is None
    assert request_metrics(timeline([(0.2, True, True)], 0.3), 0, 5).prefill_tok_s is None


def test_empty_stream():
    m = request_metrics(timeline([], 0.5), 10, 0)
    assert m.ttft_s is None and m.e2e_s == 0.5 and m.chunks == 0 and m.inter_chunk_max_s is None


def test_clock_driven_timeline():
    ticks = iter([100.0, 100.5, 100.7, 101.0])
    tl = Timeline.start(clock=lambda: next(ticks))
    tl.chunk(has_choices=True, visible=False)
    tl.chunk(has_choices=True, visible=True)
    tl.finish()
    assert (tl.ttft_s, tl.first_visible_s, tl.e2e_s) == pytest.approx((0.5, 0.7, 1.0))


def test_percentile_matches_numpy_linear():
    np = pytest.importorskip("numpy")
    data = [3.0, 1.0, 4.0, 1.5, 9.0, 2.6, 5.0]
    for q in (0, 5, 50, 95, 99, 100):
        assert percentile(data, q) == pytest.approx(float(np.percentile(data, q)))


def test_percentile_rejects_nonsense():
    with pytest.raises(ValueError):
        percentile([], 50)
    with pytest.raises(ValueError):
        percentile([1.0], 101)


def test_spread():
    s = spread([3.0, 1.0, 2.0])
    assert (s.median, s.min, s.max, s.n) == (2.0, 1.0, 3.0, 3)
    assert spread([]) is None


finite = st.floats(min_value=0.0, max_value=1e6, allow_nan=False)


@given(st.lists(finite, min_size=1, max_size=50), st.floats(min_value=0, max_value=100))
def test_percentile_lies_within_the_data(values, q):
    p = percentile(values, q)
    assert min(values) <= p <= max(values)


@given(st.lists(finite, min_size=1, max_size=50), st.floats(0, 100), st.floats(0, 100))
def test_percentile_is_monotone_in_q(values, q1, q2):
    lo, hi = sorted((q1, q2))
    assert percentile(values, lo) <= percentile(values, hi) + 1e-9


@given(st.lists(finite, min_size=1, max_size=51))
def test_p50_is_the_median(values):
    assert percentile(values, 50) == pytest.approx(statistics.median(values), rel=1e-9, abs=1e-9)


@given(
    ttft=st.floats(min_value=0.001, max_value=100),
    decode_s=st.floats(min_value=0.001, max_value=100),
    tokens=st.integers(min_value=2, max_value=100_000),
    prompt=st.integers(min_value=1, max_value=300_000),
)
def test_rates_follow_their_definitions(ttft, decode_s, tokens, prompt):
    tl = timeline([(ttft, True, True)], ttft + decode_s)
    m = request_metrics(tl, prompt, tokens)
    assert m.decode_tok_s == pytest.approx((tokens - 1) / ((ttft + decode_s) - ttft))
    assert m.prefill_tok_s == pytest.approx(prompt / ttft)


@given(st.lists(st.tuples(st.floats(0, 10), st.booleans(), st.booleans()), max_size=30))
def test_ttft_never_after_ttfvt_and_gaps_are_chunk_differences(raw):
    # A visible delta always arrives in a chunk with choices (the client only sees deltas there).
    events = sorted((at, c or v, v) for at, c, v in raw)
    tl = timeline(events, (events[-1][0] if events else 0.0) + 1)
    if tl.first_visible_s is not None:
        assert tl.ttft_s is not None and tl.ttft_s <= tl.first_visible_s
    assert len(tl.inter_chunk_s) == max(0, sum(1 for _, c, _ in events if c) - 1)
    assert all(g >= 0 for g in tl.inter_chunk_s)
