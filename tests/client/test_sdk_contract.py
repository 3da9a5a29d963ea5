"""The one private attribute of the openai SDK the client relies on, held to the installed SDK.

The SDK's ``Stream`` ends its iteration on ``data: [DONE]`` and on a closed connection alike, so the
client (``pytest_qualify/client/stream.py``, ``watch_for_done``) wraps the stream's private
``_iter_events`` to see the ``[DONE]`` event pass. Held for openai 1.55.3 (pyproject's lowest, run by
.ci/versions-lane) through 3.57 (.ci/constraints.txt). If a release renames the attribute or stops
reading its events through it, the client reports ``done`` as unknown (None) and the integrity
module's "ends with [DONE]" rule cannot judge: these tests fail first, naming the SDK version.
"""

from __future__ import annotations

import openai

from .test_stream import DONE, FINISH, ROLE, TOKEN, USAGE, _sse_client

SDK = f"openai {openai.__version__}"


def test_the_sdk_stream_has_the_private_iter_events_the_client_wraps():
    events = getattr(openai.Stream, "_iter_events", None)
    assert callable(events), (
        f"{SDK}: openai.Stream._iter_events is gone; the client's [DONE] watch "
        "(pytest_qualify/client/stream.py, watch_for_done) no longer sees the end of a stream")


def test_the_sdk_reads_its_events_through_it_and_the_watch_sees_done():
    client = _sse_client([(0, ROLE), (0, TOKEN), (0, FINISH), (0, USAGE), (0, DONE)])
    done = client.chat([{"role": "user", "content": "q"}], stream=True).stream.done
    assert done is not None, (
        f"{SDK}: the stream no longer reads its events through _iter_events; the client cannot "
        "tell a stream that ended with [DONE] from one whose connection closed")
    assert done is True, f"{SDK}: the watch missed a [DONE] that was sent"


def test_a_stream_cut_before_done_is_seen_as_cut():
    client = _sse_client([(0, ROLE), (0, TOKEN), (0, FINISH), (0, USAGE)])
    assert client.chat([{"role": "user", "content": "q"}], stream=True).stream.done is False, (
        f"{SDK}: a stream closed without [DONE] read as ended with it")


def _capturing_client(seen: list):
    import json

    import httpx

    from pytest_qualify.client.endpoint import QualifyClient

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        seen.append((dict(request.headers), body))
        if body.get("stream"):
            return httpx.Response(200, headers={"content-type": "text/event-stream"},
                                  content=ROLE + TOKEN + FINISH + USAGE + DONE)
        return httpx.Response(200, json={"id": "c", "object": "chat.completion", "created": 0, "model": "m",
                                         "choices": [{"index": 0, "finish_reason": "stop",
                                                      "message": {"role": "assistant", "content": "Jupiter"}}]})

    client = QualifyClient("http://capture.invalid", "secret-key", "served-name", timeout_s=20)
    client._openai = openai.OpenAI(base_url="http://capture.invalid/v1", api_key="secret-key", max_retries=0,
                                   http_client=httpx.Client(transport=httpx.MockTransport(handler)))
    return client


def test_the_request_body_is_the_json_the_client_built_plain_and_streamed():
    # Everything but the model goes through the SDK's extra_body (its per-request transform walks
    # each message and tool by type hints): the server must still read exactly the request built.
    seen: list = []
    client = _capturing_client(seen)
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": [{"type": "text", "text": "q"}]}]
    tools = [{"type": "function", "function": {"name": "f", "description": "d",
                                               "parameters": {"type": "object", "properties": {"a": {"type": "string"}}}}}]
    fmt = {"type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "object"}, "strict": True}}
    plain = client.chat(messages, max_tokens=7, temperature=0, seed=1, tools=tools, tool_choice="auto",
                        response_format=fmt, cache_salt="salt", chat_template_kwargs={"enable_thinking": False})
    streamed = client.chat(messages, stream=True, max_tokens=7, temperature=0, ignore_eos=True)
    assert plain.content == "Jupiter" and streamed.content == "Jupiter"
    (headers, first), (_, second) = seen
    assert headers["authorization"] == "Bearer secret-key"
    assert first == {"model": "served-name", "messages": messages, "max_tokens": 7, "temperature": 0, "seed": 1,
                     "tools": tools, "tool_choice": "auto", "response_format": fmt, "cache_salt": "salt",
                     "chat_template_kwargs": {"enable_thinking": False}}
    assert second == {"model": "served-name", "messages": messages, "max_tokens": 7, "temperature": 0,
                      "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
