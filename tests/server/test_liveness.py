"""The one "server still serving" check (``pytest_qualify.server.liveness``): what it accepts as alive and
what it rejects, with the reason naming what the server did."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from pytest_qualify.server import liveness
from pytest_qualify.client.answer import Answer
from pytest_qualify.client.errors import EndpointError, RequestTimeout, ServerGone
from pytest_qualify.profiles import load_profile

PROFILE = load_profile("262k")


@dataclass
class StubClient:
    """Answers /health and one chat request as told; records what it was asked."""

    health_status: int | Exception = 200
    reply: Answer | Exception | None = None
    asked: list[dict[str, Any]] = field(default_factory=list)

    def health(self) -> int:
        if isinstance(self.health_status, Exception):
            raise self.health_status
        return self.health_status

    def chat(self, messages, **params) -> Answer:  # type: ignore[no-untyped-def]
        self.asked.append({"messages": messages, **params})
        if isinstance(self.reply, Exception):
            raise self.reply
        assert self.reply is not None
        return self.reply


def answer(content: str | None, finish: str | None) -> Answer:
    return Answer(content=content, reasoning=None, tool_calls=(), finish_reason=finish, usage={}, streamed=False)


def test_right_answer_is_alive_and_reported_right():
    client = StubClient(reply=answer("Paris.", "stop"))
    live = liveness.check(client, PROFILE, after="the 5 images refusal")
    assert live.ok and live.answer_correct is True, live
    assert live.reason.startswith("after the 5 images refusal: /health 200 and a short request answered")
    # The request: the smoke question, the answer budget, the profile's request timeout.
    (asked,) = client.asked
    assert asked["messages"] == [{"role": "user", "content": liveness.default_question().prompt}]
    assert asked["max_tokens"] == PROFILE.limits.answer_tokens
    assert asked["timeout_s"] == PROFILE.timeouts.request_s
    props = live.properties()
    assert props["liveness_measures"] == "liveness" and props["liveness_ok"] is True
    assert props["liveness_answer_correct"] is True and props["liveness_finish_reason"] == "stop"


@pytest.mark.parametrize("content,finish", [("qux blorp wibble", "length"), ("Rome", "stop"), ("", "stop")])
def test_wrong_or_cut_answer_is_still_alive_and_reported_wrong(content, finish):
    live = liveness.check(StubClient(reply=answer(content, finish)), PROFILE, after="x")
    assert live.ok, live
    assert live.answer_correct is False
    assert f"finish {finish}, answer wrong" in live.reason


@pytest.mark.parametrize("finish", [None, "abort", "error", "tool_calls"])
def test_an_unfinished_answer_is_not_alive(finish):
    live = liveness.check(StubClient(reply=answer("Paris", finish)), PROFILE, after="the zero-byte-image refusal")
    assert not live.ok
    assert live.reason == (f"after the zero-byte-image refusal, a short request ended with finish_reason {finish!r} "
                           "(a completed answer ends with one of stop, length)")


@pytest.mark.parametrize("client,reason", [
    (StubClient(health_status=503), "after R, GET /health answered HTTP 503, expected 200"),
    (StubClient(health_status=ServerGone("GET /health: ConnectError: refused")),
     "after R, GET /health failed: GET /health: ConnectError: refused"),
    (StubClient(reply=EndpointError(500, {"error": {"message": "engine dead"}}, "HTTP 500")),
     "after R, a short request got HTTP 500: 'engine dead'"),
    (StubClient(reply=ServerGone("chat completion: RemoteProtocolError: closed")),
     "after R, a short request lost the connection: chat completion: RemoteProtocolError: closed"),
    (StubClient(reply=RequestTimeout("chat completion", 120.4, 120.0)),
     "after R, a short request was not answered: chat completion: no answer after 120.4 s (request timeout 120.0 s)"),
], ids=["health-503", "health-gone", "chat-500", "chat-dropped", "chat-timeout"])
def test_a_server_not_serving_fails_with_what_it_did(client, reason):
    live = liveness.check(client, PROFILE, after="R")
    assert not live.ok
    assert live.reason == reason
    assert live.properties()["liveness_ok"] is False


def test_no_chat_request_when_health_fails():
    client = StubClient(health_status=500, reply=answer("Paris", "stop"))
    assert not liveness.check(client, PROFILE, after="R").ok
    assert client.asked == []
