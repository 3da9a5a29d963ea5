"""What can go wrong talking to the endpoint, as exceptions the pytest side turns into one line
each (an HTTP error, a rejected key, a server gone, a timeout, an idle stream), and the message
inside an OpenAI/vLLM error body. No pytest here."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any


class EndpointError(RuntimeError):
    """The endpoint answered with an HTTP error; ``status`` and ``body`` say what it was."""

    def __init__(self, status: int, body: Any, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.body = body


class ServerGone(RuntimeError):
    """The endpoint cannot be reached any more (connection refused or reset)."""


class AuthRejected(RuntimeError):
    """HTTP 401 or 403: the endpoint refused our API key. Reported as such, never as a traceback.

    Not an :class:`EndpointError`: a test that grades an HTTP error (a hostile request must get a
    400) catches those, and a refused key must never be graded as the deployment's answer ("expected
    400, got HTTP 401"): it reaches the pytest side, which counts the item as not judged."""

    def __init__(self, where: str, body: Any, api_key_env: str = "", status: int = 401) -> None:
        source = f" (the key is read from ${api_key_env})" if api_key_env else ""
        verb = "rejected" if status == 401 else "refused"
        super().__init__(f"the endpoint {verb} the API key{source}: HTTP {status} on {where}")
        self.status = status
        self.body = body


class RequestTimeout(RuntimeError):
    """No (complete) answer within the request's time limit: a hung or overloaded server."""

    def __init__(self, where: str, elapsed_s: float, limit_s: float, prompt_tokens: int | None = None) -> None:
        size = f" for a ~{prompt_tokens:,}-token prompt" if prompt_tokens else ""
        super().__init__(f"{where}: no answer after {elapsed_s:.1f} s (request timeout {limit_s:.1f} s{size})")
        self.elapsed_s = elapsed_s
        self.limit_s = limit_s


class StreamIdle(RequestTimeout):
    """A stream that started and then sent nothing for ``timeouts.stream_idle_s``: the item fails
    at once instead of after the whole request budget; the server is not declared dead."""

    def __init__(self, where: str, idle_s: float, chunks: int, elapsed_s: float) -> None:
        RuntimeError.__init__(self, f"{where}: stream idle for {idle_s:g} s after {chunks} chunks "
                                    f"({elapsed_s:.1f} s into the request)")
        self.elapsed_s = elapsed_s
        self.limit_s = idle_s
        self.chunks = chunks


class ErrorKind(StrEnum):
    """What sort of failure a request to the endpoint met, as a word: the server facts that carry
    it are handed to xdist workers as JSON, where no exception type survives."""

    AUTH_REJECTED = "auth_rejected"  # AuthRejected: HTTP 401 or 403 on our key
    NOT_OPENAI = "not_openai"  # an answer that is no JSON, or not the shape asked for (a ValueError)
    OTHER = "other"  # anything else: an HTTP error, a server gone, a timeout


def kind_of(exc: BaseException) -> ErrorKind:
    """The kind of an exception a request raised."""
    if isinstance(exc, AuthRejected):
        return ErrorKind.AUTH_REJECTED
    if isinstance(exc, ValueError):
        return ErrorKind.NOT_OPENAI
    return ErrorKind.OTHER


def error_body(exc: Any) -> Any:
    body = getattr(exc, "body", None)
    if body is None and getattr(exc, "response", None) is not None:
        try:
            body = exc.response.json()
        except ValueError:
            body = exc.response.text
    return body


def error_message(body: Any) -> str:
    """The human message of an OpenAI/vLLM error body, in either shape vLLM has used."""
    if isinstance(body, Mapping):
        inner = body.get("error", body)
        if isinstance(inner, Mapping):
            return str(inner.get("message", ""))
        return str(inner)
    return str(body or "")
