"""client.py's stream reading: silence after the first chunk fails at once (``timeouts.stream_idle_s``),
a long wait before it (the prefill) does not, and the request budget still bounds the whole stream."""

from __future__ import annotations

import time

import pytest

from pytest_qualify.client.endpoint import StreamIdle, _chunks_with_idle_limit, _Deadline


def _stream(gaps_s: list[float]):
    """A fake SDK stream: one chunk after each gap."""
    for n, gap in enumerate(gaps_s):
        time.sleep(gap)
        yield {"choices": [{"index": 0, "delta": {"content": str(n)}}]}


def test_silence_after_the_first_chunk_fails_within_the_idle_limit():
    t0 = time.perf_counter()
    got = []
    with pytest.raises(StreamIdle) as err:
        for chunk in _chunks_with_idle_limit(_stream([0.0, 0.0, 30.0]), 0.3, t0 + 60, t0):
            got.append(chunk)
    elapsed = time.perf_counter() - t0
    assert len(got) == 2 and 0.3 <= elapsed < 2.0
    assert "stream idle for 0.3 s after 2 chunks" in str(err.value)


def test_a_long_wait_for_the_first_chunk_is_the_prefill_not_a_stall():
    t0 = time.perf_counter()
    got = list(_chunks_with_idle_limit(_stream([0.5, 0.05, 0.05]), 0.3, t0 + 60, t0))
    assert len(got) == 3


def test_the_request_budget_bounds_a_trickling_stream():
    t0 = time.perf_counter()
    # Never idle long enough for the idle limit (5 s): only the request budget (1 s) can end it,
    # well before the 5 s the whole trickle takes (a loaded machine may stretch each 0.1 s sleep).
    with pytest.raises(_Deadline):
        list(_chunks_with_idle_limit(_stream([0.1] * 50), 5.0, t0 + 1.0, t0))
    assert time.perf_counter() - t0 < 4.5


def test_a_reader_error_reaches_the_caller():
    def broken():
        yield {"choices": []}
        raise ConnectionResetError("peer reset")

    t0 = time.perf_counter()
    with pytest.raises(ConnectionResetError):
        list(_chunks_with_idle_limit(broken(), 5.0, t0 + 60, t0))
