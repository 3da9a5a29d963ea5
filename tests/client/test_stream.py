"""client.py's stream reading: silence after the first chunk fails at once (``timeouts.stream_idle_s``),
a long wait before it (the prefill) does not, and the request budget still bounds the whole stream."""

from __future__ import annotations

import time

import pytest

from pytest_qualify.client.errors import RequestTimeout, StreamIdle
from pytest_qualify.client.stream import Deadline, chunks_with_idle_limit


def _stream(gaps_s: list[float]):
    """A fake SDK stream: one chunk after each gap."""
    for n, gap in enumerate(gaps_s):
        time.sleep(gap)
        yield {"choices": [{"index": 0, "delta": {"content": str(n)}}]}


def test_silence_after_the_first_chunk_fails_within_the_idle_limit():
    t0 = time.perf_counter()
    got = []
    with pytest.raises(StreamIdle) as err:
        for chunk in chunks_with_idle_limit(_stream([0.0, 0.0, 30.0]), 0.3, t0 + 60, t0):
            got.append(chunk)
    elapsed = time.perf_counter() - t0
    assert len(got) == 2 and 0.3 <= elapsed < 2.0
    assert "stream idle for 0.3 s after 2 chunks" in str(err.value)


def test_a_long_wait_for_the_first_chunk_is_the_prefill_not_a_stall():
    t0 = time.perf_counter()
    got = list(chunks_with_idle_limit(_stream([0.5, 0.05, 0.05]), 0.3, t0 + 60, t0))
    assert len(got) == 3


def test_the_request_budget_bounds_a_trickling_stream():
    t0 = time.perf_counter()
    # Never idle long enough for the idle limit (5 s): only the request budget (1 s) can end it,
    # well before the 5 s the whole trickle takes (a loaded machine may stretch each 0.1 s sleep).
    with pytest.raises(Deadline):
        list(chunks_with_idle_limit(_stream([0.1] * 50), 5.0, t0 + 1.0, t0))
    assert time.perf_counter() - t0 < 4.5


def test_a_reader_error_reaches_the_caller():
    def broken():
        yield {"choices": []}
        raise ConnectionResetError("peer reset")

    t0 = time.perf_counter()
    with pytest.raises(ConnectionResetError):
        list(chunks_with_idle_limit(broken(), 5.0, t0 + 60, t0))


# -- the real SDK over a scripted SSE body: what the wire carries, not what a fake iterator yields --


def _sse_client(events: list[tuple[float, bytes]], idle_s: float = 0.4):
    """A QualifyClient whose endpoint answers a stream with these (gap_s, raw bytes) pieces."""
    import httpx
    import openai

    from pytest_qualify.client.endpoint import QualifyClient

    def body():
        for gap, raw in events:
            time.sleep(gap)
            yield raw

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body())

    client = QualifyClient("http://sse.invalid", None, "m", timeout_s=20)
    client._openai = openai.OpenAI(base_url="http://sse.invalid/v1", api_key="x", max_retries=0,
                                   http_client=httpx.Client(transport=httpx.MockTransport(handler)))
    return client


def _data(choices, **extra) -> bytes:
    import json

    return f"data: {json.dumps({'id': 'c', 'object': 'chat.completion.chunk', 'created': 0, 'model': 'm', 'choices': choices, **extra})}\n\n".encode()


ROLE = _data([{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}])
TOKEN = _data([{"index": 0, "delta": {"content": "Jupiter"}, "finish_reason": None}])
FINISH = _data([{"index": 0, "delta": {}, "finish_reason": "stop"}])
USAGE = _data([], usage={"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7})
DONE = b"data: [DONE]\n\n"


def test_keep_alive_comments_are_not_progress(monkeypatch):
    # A router that pings with SSE comments while the engine behind it has stopped: idle.
    monkeypatch.setattr("pytest_qualify.client.endpoint.DEFAULT_STREAM_IDLE_S", 0.4)
    client = _sse_client([(0, ROLE), (0, TOKEN)] + [(0.1, b": keep-alive\n\n")] * 30 + [(0, FINISH), (0, DONE)])
    t0 = time.perf_counter()
    with pytest.raises(StreamIdle) as err:
        client.chat([{"role": "user", "content": "q"}], stream=True)
    assert "stream idle for 0.4 s after 2 chunks" in str(err.value) and time.perf_counter() - t0 < 2.5


def test_silence_after_the_role_chunk_is_a_stall(monkeypatch):
    # vLLM sends the role with the first token (after the prefill): silence after it is a stalled
    # decode, caught by the idle limit, not by the request budget.
    monkeypatch.setattr("pytest_qualify.client.endpoint.DEFAULT_STREAM_IDLE_S", 0.3)
    client = _sse_client([(0, ROLE), (5.0, TOKEN), (0, FINISH), (0, USAGE), (0, DONE)])
    t0 = time.perf_counter()
    with pytest.raises(StreamIdle) as err:
        client.chat([{"role": "user", "content": "q"}], stream=True)
    assert "stream idle for 0.3 s after 1 chunks" in str(err.value) and time.perf_counter() - t0 < 2.5


def test_a_call_that_expects_a_held_answer_sets_its_own_idle_limit(monkeypatch):
    # A parser may hold a call's arguments to the finish (the parsers module's forced cases): that
    # call waits past the profile's idle limit, bounded by its request budget; other calls do not.
    monkeypatch.setattr("pytest_qualify.client.endpoint.DEFAULT_STREAM_IDLE_S", 0.3)
    script = [(0, ROLE), (0.8, TOKEN), (0, FINISH), (0, USAGE), (0, DONE)]
    answer = _sse_client(script).chat([{"role": "user", "content": "q"}], stream=True, stream_idle_s=float("inf"))
    assert answer.content == "Jupiter" and answer.stream.done is True
    with pytest.raises(StreamIdle):
        _sse_client(script).chat([{"role": "user", "content": "q"}], stream=True)
    # The request budget still bounds it.
    t0 = time.perf_counter()
    with pytest.raises(RequestTimeout):
        _sse_client([(0, ROLE), (5.0, TOKEN), (0, FINISH), (0, DONE)]).chat(
            [{"role": "user", "content": "q"}], stream=True, stream_idle_s=float("inf"), timeout_s=0.6)
    assert time.perf_counter() - t0 < 3.0


def test_a_prefill_longer_than_the_idle_limit_is_not_a_stall(monkeypatch):
    # Nothing before the first chunk (vLLM's prefill): the request budget governs, not the idle limit.
    monkeypatch.setattr("pytest_qualify.client.endpoint.DEFAULT_STREAM_IDLE_S", 0.3)
    client = _sse_client([(0.8, ROLE), (0, TOKEN), (0, FINISH), (0, USAGE), (0, DONE)])
    answer = client.chat([{"role": "user", "content": "q"}], stream=True)
    assert answer.content == "Jupiter" and answer.stream.done is True
    assert answer.stream.output_after_finish == 0 and answer.stream.usage_before_finish == 0


def test_the_shape_records_done_output_after_finish_and_early_usage():
    client = _sse_client([(0, ROLE), (0, TOKEN), (0, FINISH), (0, USAGE)])  # no [DONE]
    assert client.chat([{"role": "user", "content": "q"}], stream=True).stream.done is False
    late = _data([{"index": 0, "delta": {"content": "!"}, "finish_reason": None}])
    client = _sse_client([(0, ROLE), (0, TOKEN), (0, FINISH), (0, late), (0, USAGE), (0, DONE)])
    shape = client.chat([{"role": "user", "content": "q"}], stream=True).stream
    assert shape.output_after_finish == 1 and shape.done is True
    on_token = _data([{"index": 0, "delta": {"content": "Jupiter"}, "finish_reason": None}],
                     usage={"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7})
    client = _sse_client([(0, ROLE), (0, on_token), (0, FINISH), (0, DONE)])
    assert client.chat([{"role": "user", "content": "q"}], stream=True).stream.usage_before_finish == 1
    # vLLM's shape: the last token and the finish in one chunk, usage alone after it, [DONE].
    last = _data([{"index": 0, "delta": {"content": "Jupiter"}, "finish_reason": "stop"}])
    client = _sse_client([(0, ROLE), (0, last), (0, USAGE), (0, DONE)])
    shape = client.chat([{"role": "user", "content": "q"}], stream=True).stream
    assert (shape.finish_chunks, shape.output_after_finish, shape.usage_before_finish, shape.done) == (1, 0, 0, True)
