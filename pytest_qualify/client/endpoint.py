"""The client: one OpenAI-compatible endpoint, chat requests with client-observed timing.

Suites call :meth:`QualifyClient.chat` (streamed or not) and get an :class:`Answer` that keeps
everything the graders need — visible content, any reasoning field, tool calls, finish reason,
usage — without stripping anything: stripping reasoning before grading would hide a leak.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pytest_qualify.client.timing import Timeline

if TYPE_CHECKING:
    from pytest_qualify.profiles import Timeouts

REASONING_FIELDS = ("reasoning_content", "reasoning")


class EndpointError(RuntimeError):
    """The endpoint answered with an HTTP error; ``status`` and ``body`` say what it was."""

    def __init__(self, status: int, body: Any, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.body = body


class ServerGone(RuntimeError):
    """The endpoint cannot be reached any more (connection refused or reset)."""


class AuthRejected(EndpointError):
    """HTTP 401: the endpoint refused our API key. Reported as such, never as a traceback."""

    def __init__(self, where: str, body: Any, api_key_env: str = "") -> None:
        source = f" (the key is read from ${api_key_env})" if api_key_env else ""
        super().__init__(401, body, f"the endpoint rejected the API key{source}: HTTP 401 on {where}")


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


# A stream may go silent this long after its first chunk when the profile does not say otherwise.
DEFAULT_STREAM_IDLE_S = 30.0


# A generous estimate of prompt size for the per-request timeout when the caller gives none:
# real tokenizers average 3.5-4.5 characters per token on English, and media blocks vary by model.
CHARS_PER_TOKEN_ESTIMATE = 3
IMAGE_TOKENS_ESTIMATE = 2048
VIDEO_TOKENS_ESTIMATE = 16384


def estimate_prompt_tokens(messages: Iterable[Mapping[str, Any]], tools: Any = None) -> int:
    """An upper-side estimate of a chat's prompt tokens, from characters and media parts."""
    chars = len(json.dumps(tools)) if tools else 0
    media = 0
    for msg in messages:
        content = msg.get("content") if isinstance(msg, Mapping) else None
        if isinstance(content, str):
            chars += len(content)
        elif isinstance(content, list):
            for part in content:
                if not isinstance(part, Mapping):
                    continue
                kind = part.get("type")
                if kind == "text":
                    chars += len(str(part.get("text", "")))
                elif kind == "image_url":
                    media += IMAGE_TOKENS_ESTIMATE
                elif kind == "video_url":
                    media += VIDEO_TOKENS_ESTIMATE
    return chars // CHARS_PER_TOKEN_ESTIMATE + media


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: str  # the raw JSON text, exactly as the server sent it
    id: str = ""

    def parsed_arguments(self) -> Any:
        return json.loads(self.arguments) if self.arguments else {}


@dataclass(frozen=True)
class ToolDelta:
    """One ``delta.tool_calls`` entry as it came on the wire (for the delta rules of
    graders/integrity.py): which fields it carried, not only what they add up to."""

    index: int | None
    id: str | None
    type: str | None
    name: str | None
    arguments: str | None


@dataclass(frozen=True)
class StreamShape:
    """How a streamed answer was cut into chunks: what the stream contract checks read."""

    chunks: int  # chunks that carried a ``choices`` entry
    content_deltas: int  # chunks whose delta carried non-empty content
    finish_chunks: int  # chunks that carried a finish_reason
    usage_chunks: int  # chunks that carried a (non-null) usage object
    usage_asked: bool  # stream_options.include_usage was true
    tool_deltas: tuple[ToolDelta, ...] = ()
    output_after_finish: int = 0  # chunks after the finish chunk whose delta carried output
    usage_before_finish: int = 0  # usage chunks that came before the finish chunk
    done: bool | None = None  # the stream ended with ``data: [DONE]`` (None: not observable)


@dataclass(frozen=True)
class Answer:
    content: str | None
    reasoning: str | None
    tool_calls: tuple[ToolCall, ...]
    finish_reason: str | None
    usage: Mapping[str, Any]
    streamed: bool
    timeline: Timeline | None = None
    raw: Mapping[str, Any] = field(default_factory=dict)
    # Streaming only: how often each tool call's name appeared in the deltas.
    tool_name_deltas: tuple[int, ...] = ()
    # Visible markers seen anywhere in the stream (for leak checks).
    reasoning_tokens: int | None = None
    # Streaming only: the chunk structure (None for a non-streamed answer).
    stream: StreamShape | None = None

    @property
    def prompt_tokens(self) -> int | None:
        return self.usage.get("prompt_tokens")

    @property
    def completion_tokens(self) -> int | None:
        return self.usage.get("completion_tokens")

    @property
    def cached_tokens(self) -> int | None:
        details = self.usage.get("prompt_tokens_details") or {}
        return details.get("cached_tokens")


def _as_dict(obj: Any) -> dict[str, Any]:
    if obj is None:
        return {}
    if isinstance(obj, dict):
        return obj
    return obj.model_dump(exclude_none=False)


def _reasoning_of(d: Mapping[str, Any]) -> str | None:
    parts = [d.get(name) for name in REASONING_FIELDS if d.get(name)]
    # A server in the middle of the rename may send both names with the same text: it is one reasoning.
    parts = [p for n, p in enumerate(parts) if p not in parts[:n]]
    return "".join(parts) if parts else None


class QualifyClient:
    """An endpoint: ``base_url`` without ``/v1``. ``api_key`` is held, never printed."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None,
        model: str,
        timeout_s: float,
        timeouts: Timeouts | None = None,
        api_key_env: str = "",
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._api_key = api_key
        self.model = model
        self.timeout_s = timeout_s
        # The profile's timeouts scale a chat's limit with its prompt size (long lanes take longer).
        self.timeouts = timeouts
        self.api_key_env = api_key_env
        self._openai = None
        self._http = None

    def __repr__(self) -> str:
        return f"QualifyClient({self.base_url!r}, model={self.model!r})"

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}

    @property
    def openai(self):  # type: ignore[no-untyped-def]
        """An ``openai.OpenAI`` client with no retries: a retry would hide a failure."""
        if self._openai is None:
            import openai

            self._openai = openai.OpenAI(
                base_url=self.base_url + "/v1",
                api_key=self._api_key or "EMPTY",
                max_retries=0,
                timeout=self.timeout_s,
            )
        return self._openai

    def warm_up(self) -> None:
        """Pay the client's one-time costs (imports, response classes, the connection) before any
        timed request, so the first request's TTFT measures the server, not the client."""
        from openai.types.chat import ChatCompletion, ChatCompletionChunk

        ChatCompletionChunk.model_validate({"id": "w", "object": "chat.completion.chunk", "created": 0, "model": "w",
                                            "choices": [{"index": 0, "delta": {"content": "w"}, "finish_reason": None}]})
        ChatCompletion.model_validate({"id": "w", "object": "chat.completion", "created": 0, "model": "w",
                                       "choices": [{"index": 0, "finish_reason": "stop",
                                                    "message": {"role": "assistant", "content": "w"}}]})
        self.openai.chat.completions  # noqa: B018 - openai imports its resources on first access
        try:
            self.openai.models.list()
        except Exception:  # the smoke module judges the endpoint; warming up never fails a run
            pass

    @property
    def http(self):  # type: ignore[no-untyped-def]
        """A raw ``httpx.Client`` for /health, /tokenize, /metrics, /version and raw requests."""
        if self._http is None:
            import httpx

            self._http = httpx.Client(base_url=self.base_url, headers=self.headers, timeout=self.timeout_s)
        return self._http

    def _forget_connections(self) -> None:
        """Open new connections for the next request. After an exception it did not handle, vLLM's
        HTTP server (uvicorn) answers 500 and closes the connection without saying so in the
        response (no ``Connection: close``); a request sent on the pooled connection before the
        close is seen would fail as a dropped connection that the server never caused."""
        self.close()
        self._http = None
        self._openai = None

    def close(self) -> None:
        if self._http is not None:
            self._http.close()
        if self._openai is not None:
            self._openai.close()

    # -- raw endpoints ---------------------------------------------------------------------------

    def get_json(self, path: str) -> Any:
        resp = self._send("GET", path)
        return resp.json()

    def post_json(self, path: str, body: Mapping[str, Any], timeout_s: float | None = None) -> Any:
        resp = self._send("POST", path, json=body, timeout=timeout_s or self.timeout_s)
        return resp.json()

    def _send(self, method: str, path: str, **kw: Any):  # type: ignore[no-untyped-def]
        import httpx

        limit = kw.get("timeout") or self.timeout_s
        t0 = time.perf_counter()
        try:
            resp = self.http.request(method, path, **kw)
        except httpx.TimeoutException as exc:
            raise RequestTimeout(f"{method} {path}", time.perf_counter() - t0, limit) from exc
        except (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
            raise ServerGone(f"{method} {path}: {type(exc).__name__}: {exc}") from exc
        if resp.status_code == 401:
            raise AuthRejected(f"{method} {path}", resp.text, self.api_key_env)
        if resp.status_code >= 500:
            self._forget_connections()
        if resp.status_code >= 400:
            try:
                body = resp.json()
            except ValueError:
                body = resp.text
            raise EndpointError(resp.status_code, body, f"{method} {path} -> HTTP {resp.status_code}: {body}")
        return resp

    def health(self) -> int:
        import httpx

        t0 = time.perf_counter()
        try:
            return self.http.get("/health", timeout=10.0).status_code
        except httpx.TimeoutException as exc:
            raise RequestTimeout("GET /health", time.perf_counter() - t0, 10.0) from exc
        except (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
            raise ServerGone(f"GET /health: {type(exc).__name__}: {exc}") from exc

    def models(self) -> list[dict[str, Any]]:
        return self.get_json("/v1/models")["data"]

    def version(self) -> str:
        return str(self.get_json("/version").get("version", ""))

    def metrics_text(self) -> str:
        return self._send("GET", "/metrics").text

    def count_chat_tokens(self, messages: list[dict[str, Any]], **extra: Any) -> int:
        """Prompt tokens of a chat as the *server's* tokenizer and template count them."""
        body = {"model": self.model, "messages": messages, "add_generation_prompt": True, **extra}
        return int(self.post_json("/tokenize", body)["count"])

    # -- chat ------------------------------------------------------------------------------------

    def chat(
        self,
        messages: list[dict[str, Any]],
        *,
        stream: bool = False,
        max_tokens: int | None = None,
        timeout_s: float | None = None,
        prompt_tokens_hint: int | None = None,
        **params: Any,
    ) -> Answer:
        """One chat completion. Extra vLLM parameters (``cache_salt``, ``chat_template_kwargs``)
        go through ``params`` as they are; an HTTP error raises :class:`EndpointError`.

        The time limit is ``timeout_s`` if given, else the profile's timeout for the prompt's
        size (``prompt_tokens_hint``, e.g. a lane's size, or an estimate from the messages); no
        complete answer within it raises :class:`RequestTimeout` with the elapsed time."""
        import httpx
        import openai

        body: dict[str, Any] = {"model": self.model, "messages": messages, **params}
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        known = {
            "temperature", "seed", "tools", "tool_choice", "response_format", "top_p",
            "stream_options", "parallel_tool_calls", "n", "stop",
        }
        kwargs = {k: v for k, v in body.items() if k in known or k in ("model", "messages", "max_tokens")}
        extra = {k: v for k, v in body.items() if k not in kwargs}
        prompt_tokens: int | None = None
        if timeout_s is None and self.timeouts is not None:
            prompt_tokens = prompt_tokens_hint or estimate_prompt_tokens(messages, params.get("tools"))
            limit = self.timeouts.for_prompt(prompt_tokens)
        else:
            limit = timeout_s or self.timeout_s
        client = self.openai.with_options(timeout=limit)
        where = "streamed chat completion" if stream else "chat completion"
        t0 = time.perf_counter()
        try:
            if stream:
                kwargs.setdefault("stream_options", {"include_usage": True})
                return self._stream(client, kwargs, extra, t0 + limit, t0)
            resp = client.chat.completions.create(**kwargs, extra_body=extra or None)
            return self._answer_from_response(_as_dict(resp), time.perf_counter() - t0)
        except openai.AuthenticationError as exc:
            raise AuthRejected("POST /v1/chat/completions", _error_body(exc), self.api_key_env) from exc
        except openai.APIStatusError as exc:
            if exc.status_code >= 500:
                self._forget_connections()
            raise EndpointError(exc.status_code, _error_body(exc), f"HTTP {exc.status_code}: {exc.message}") from exc
        except StreamIdle:
            raise
        except (openai.APITimeoutError, httpx.TimeoutException, _Deadline) as exc:
            raise RequestTimeout(where, time.perf_counter() - t0, limit, prompt_tokens) from exc
        except (openai.APIConnectionError, httpx.TransportError) as exc:
            # Raised mid-stream, httpx errors reach us unwrapped by the SDK.
            raise ServerGone(f"{where}: {type(exc).__name__}: {exc}") from exc

    @staticmethod
    def _answer_from_response(data: Mapping[str, Any], e2e_s: float) -> Answer:
        choice = (data.get("choices") or [{}])[0]
        msg = choice.get("message") or {}
        calls = tuple(
            ToolCall(c["function"]["name"], c["function"].get("arguments") or "", c.get("id") or "")
            for c in (msg.get("tool_calls") or [])
        )
        usage = data.get("usage") or {}
        details = usage.get("completion_tokens_details") or {}
        return Answer(
            content=msg.get("content"),
            reasoning=_reasoning_of(msg),
            tool_calls=calls,
            finish_reason=choice.get("finish_reason"),
            usage=usage,
            streamed=False,
            timeline=Timeline.single(e2e_s),
            raw=data,
            reasoning_tokens=details.get("reasoning_tokens"),
        )

    @property
    def stream_idle_s(self) -> float:
        return self.timeouts.stream_idle_s if self.timeouts is not None else DEFAULT_STREAM_IDLE_S

    def _stream(self, client: Any, kwargs: dict[str, Any], extra: dict[str, Any], deadline: float, t0: float) -> Answer:
        timeline = Timeline.start()
        stream = client.chat.completions.create(**kwargs, stream=True, extra_body=extra or None)
        ended = _watch_for_done(stream)
        content: list[str] = []
        reasoning: list[str] = []
        calls: dict[int, dict[str, Any]] = {}
        tool_deltas: list[ToolDelta] = []
        finish = None
        usage: dict[str, Any] = {}
        counts = {"content": 0, "finish": 0, "usage": 0, "after_finish": 0, "usage_early": 0}
        idle_s = self.stream_idle_s
        for data in _chunks_with_idle_limit(stream, idle_s, deadline, t0):
            choices = data.get("choices") or []
            visible = False
            output = False
            finished_here = False
            for choice in choices:
                delta = choice.get("delta") or {}
                if delta.get("content"):
                    content.append(delta["content"])
                    counts["content"] += 1
                    visible = output = True
                r = _reasoning_of(delta)
                if r:
                    reasoning.append(r)
                    output = True
                for tc in delta.get("tool_calls") or []:
                    fn = tc.get("function") or {}
                    tool_deltas.append(ToolDelta(tc.get("index"), tc.get("id"), tc.get("type"), fn.get("name"),
                                                 fn.get("arguments")))
                    slot = calls.setdefault(tc.get("index", 0), {"name": "", "arguments": "", "id": "", "names": 0})
                    if fn.get("name"):
                        slot["name"] += fn["name"]
                        slot["names"] += 1
                    if fn.get("arguments"):
                        slot["arguments"] += fn["arguments"]
                    if tc.get("id"):
                        slot["id"] = tc["id"]
                    visible = output = True
                if choice.get("finish_reason"):
                    finish = choice["finish_reason"]
                    counts["finish"] += 1
                    finished_here = True
            if output and counts["finish"] and not finished_here:
                counts["after_finish"] += 1  # the finish chunk said the answer was over
            if data.get("usage"):
                usage = data["usage"]
                counts["usage"] += 1
                if not counts["finish"]:
                    counts["usage_early"] += 1
            timeline.chunk(has_choices=bool(choices), visible=visible)
        timeline.finish()
        ordered = [calls[i] for i in sorted(calls)]
        details = usage.get("completion_tokens_details") or {}
        shape = StreamShape(
            chunks=len(timeline.chunk_s), content_deltas=counts["content"], finish_chunks=counts["finish"],
            usage_chunks=counts["usage"], usage_asked=bool((kwargs.get("stream_options") or {}).get("include_usage")),
            tool_deltas=tuple(tool_deltas), output_after_finish=counts["after_finish"],
            usage_before_finish=counts["usage_early"], done=ended(),
        )
        return Answer(
            content="".join(content) if content else None,
            reasoning="".join(reasoning) if reasoning else None,
            tool_calls=tuple(ToolCall(c["name"], c["arguments"], c["id"]) for c in ordered),
            finish_reason=finish,
            usage=usage,
            streamed=True,
            timeline=timeline,
            tool_name_deltas=tuple(c["names"] for c in ordered),
            reasoning_tokens=details.get("reasoning_tokens"),
            stream=shape,
        )


def _watch_for_done(stream: Any) -> Callable[[], bool | None]:
    """Whether the stream ended with ``data: [DONE]``: the SDK ends its iteration on it and on a
    closed connection alike, so its events are watched as they pass. None when this SDK's stream
    does not show its events (nothing is judged then)."""
    events = getattr(stream, "_iter_events", None)
    if events is None or not callable(events):
        return lambda: None
    seen: list[bool] = []
    used: list[bool] = []  # the SDK read its events through the watch (else nothing is judged)

    def watched() -> Iterator[Any]:
        used.append(True)
        for sse in events():
            if str(getattr(sse, "data", "")).startswith("[DONE]"):
                seen.append(True)
            yield sse

    try:
        stream._iter_events = watched
    except Exception:  # noqa: BLE001 - a stream we cannot watch is read as it is
        return lambda: None
    return lambda: bool(seen) if used else None


def _chunks_with_idle_limit(stream: Any, idle_s: float, deadline: float, t0: float) -> Iterator[dict[str, Any]]:
    """The stream's chunks as dicts, read by a helper thread so that silence can be timed.

    httpx's read timeout is one number for every read, and the first read legitimately waits for
    the whole prefill (minutes on a long lane); after the first token a healthy server sends
    tokens every few hundred milliseconds. So the request budget governs until the first chunk,
    and ``idle_s`` after it; either limit closes the connection and raises at once. Any chunk
    starts the clock, a bare role chunk too: vLLM sends the role with the first token, after the
    prefill (its chat stream generator answers the first engine output with it), so silence after
    any chunk is a stalled decode. A router that sent the role before the prefill would need a
    ``stream_idle_s`` above its prefill time. SSE comments (``: keep-alive``) are not chunks: a
    server that sends only those has stopped answering, and is idle."""
    items: queue.Queue[tuple[str, Any]] = queue.Queue()

    def read() -> None:
        try:
            for chunk in stream:
                items.put(("chunk", _as_dict(chunk)))
            items.put(("end", None))
        except BaseException as exc:  # handed to the caller's thread, which raises it
            items.put(("error", exc))

    threading.Thread(target=read, name="qualify-stream-reader", daemon=True).start()
    received = 0
    running = False  # the idle clock: on from the first chunk
    last = time.perf_counter()
    while True:
        now = time.perf_counter()
        wait = deadline - now
        if running:
            wait = min(wait, last + idle_s - now)
        try:
            kind, value = items.get(timeout=max(wait, 0.0))
        except queue.Empty:
            _abandon(stream)
            now = time.perf_counter()
            if running and now - last >= idle_s:
                raise StreamIdle("streamed chat completion", idle_s, received, now - t0) from None
            raise _Deadline() from None
        if kind == "end":
            return
        if kind == "error":
            raise value
        received += 1
        last = time.perf_counter()
        running = True
        yield value


def _abandon(stream: Any) -> None:
    """Cut a stream we stopped waiting for: shut its socket down, so the reader thread ends and
    the connection is never handed to another request."""
    import socket

    response = getattr(stream, "response", None)
    try:
        network = response.extensions.get("network_stream") if response is not None else None
        sock = network.get_extra_info("socket") if network is not None else None
        if sock is not None:
            sock.shutdown(socket.SHUT_RDWR)
    except Exception:  # best effort: the reader is a daemon thread and dies with the run
        pass


class _Deadline(Exception):
    """A stream still running at the request's time limit."""


def _error_body(exc: Any) -> Any:
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
