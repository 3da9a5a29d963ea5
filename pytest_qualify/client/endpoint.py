"""The client: one OpenAI-compatible endpoint, chat requests with client-observed timing.

Suites call :meth:`QualifyClient.chat` (streamed or not) and get an ``Answer`` (``answer.py``)
that keeps everything the graders need. The room's other files: ``errors.py`` (what can go
wrong), ``estimate.py`` (a prompt's size before it is sent), ``stream.py`` (reading a stream on a
helper thread), ``timing.py`` (the client-observed timeline).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pytest_qualify.client.answer import Answer, StreamAssembly, as_dict, from_response
from pytest_qualify.client.errors import AuthRejected, EndpointError, RequestTimeout, ServerGone, StreamIdle, error_body
from pytest_qualify.client.estimate import estimate_prompt_tokens
from pytest_qualify.client.stream import DEFAULT_STREAM_IDLE_S, Deadline, chunks_with_idle_limit, watch_for_done
from pytest_qualify.client.timing import Timeline

if TYPE_CHECKING:
    import ssl

    from pytest_qualify.profiles import Timeouts


_TLS_LOCK = threading.Lock()
_TLS: list[ssl.SSLContext] = []  # the one context, once built


def tls_context() -> ssl.SSLContext:
    """The process's one TLS context (the CA bundle and ``SSL_CERT_FILE``/``SSL_CERT_DIR`` as httpx
    reads them), shared by every client. httpx builds a context for each client it makes, loading the
    CA bundle each time: about 50 ms a raw client and 100 ms an openai client on a 2-core machine, paid
    again for every load-level client and every reconnection, plain ``http://`` included. Built once
    under a lock: the preload thread and the first reads may ask at the same moment."""
    with _TLS_LOCK:
        if not _TLS:
            import httpx

            _TLS.append(httpx.create_ssl_context())
        return _TLS[0]


def preload() -> threading.Thread:
    """Import the SDK and its response classes and build the TLS context on a helper thread, so that
    a run pays them while it waits for the server (launch mode: the engine's start; attach mode: the
    first reads), not after: importing openai alone takes 0.8 s on a 2-core machine."""

    def load() -> None:
        import openai
        from openai.types.chat import ChatCompletion, ChatCompletionChunk  # noqa: F401

        openai.OpenAI  # noqa: B018 - the client class and its resources are imported on first access
        tls_context()

    thread = threading.Thread(target=load, name="qualify-preload", daemon=True)
    thread.start()
    return thread


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
                http_client=openai.DefaultHttpxClient(verify=tls_context()),
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

            self._http = httpx.Client(base_url=self.base_url, headers=self.headers, timeout=self.timeout_s,
                                      verify=tls_context())
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
        if resp.status_code in (401, 403):
            raise AuthRejected(f"{method} {path}", resp.text, self.api_key_env, status=resp.status_code)
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

    def text_token_ids(self, text: str) -> list[int]:
        """A plain text's token ids as the *server's* tokenizer encodes it, no special tokens added."""
        body = {"model": self.model, "prompt": text, "add_special_tokens": False}
        return [int(i) for i in self.post_json("/tokenize", body).get("tokens") or []]

    # -- chat ------------------------------------------------------------------------------------

    def chat(
        self,
        messages: list[dict[str, Any]],
        *,
        stream: bool = False,
        max_tokens: int | None = None,
        timeout_s: float | None = None,
        prompt_tokens_hint: int | None = None,
        stream_idle_s: float | None = None,
        **params: Any,
    ) -> Answer:
        """One chat completion. Extra vLLM parameters (``cache_salt``, ``chat_template_kwargs``)
        go through ``params`` as they are; an HTTP error raises :class:`EndpointError`.

        The time limit is ``timeout_s`` if given, else the profile's timeout for the prompt's
        size (``prompt_tokens_hint``, e.g. a lane's size, or an estimate from the messages); no
        complete answer within it raises :class:`RequestTimeout` with the elapsed time. A stream
        silent for the profile's ``stream_idle_s`` (or this call's, where a parser may rightly hold
        the whole answer to its finish) raises :class:`StreamIdle`."""
        import httpx
        import openai

        # The body is the JSON the server reads, as built: everything but the model travels in the
        # SDK's extra_body, merged into the request as it is. As typed arguments, the SDK's transform
        # walks every message and tool schema by their type hints first (1 to 2 ms a request on a
        # 2-core machine, a run's hundreds of requests apart), and sends the same JSON.
        extra: dict[str, Any] = {"messages": messages, **params}
        if max_tokens is not None:
            extra["max_tokens"] = max_tokens
        kwargs: dict[str, Any] = {"model": self.model, "messages": []}  # messages: the SDK requires the argument
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
                extra.setdefault("stream_options", {"include_usage": True})
                return self._stream(client, kwargs, extra, t0 + limit, t0, stream_idle_s or self.stream_idle_s)
            resp = client.chat.completions.create(**kwargs, extra_body=extra)
            return from_response(as_dict(resp), time.perf_counter() - t0)
        except (openai.AuthenticationError, openai.PermissionDeniedError) as exc:
            raise AuthRejected("POST /v1/chat/completions", error_body(exc), self.api_key_env,
                               status=exc.status_code) from exc
        except openai.APIStatusError as exc:
            if exc.status_code >= 500:
                self._forget_connections()
            raise EndpointError(exc.status_code, error_body(exc), f"HTTP {exc.status_code}: {exc.message}") from exc
        except StreamIdle:
            raise
        except (openai.APITimeoutError, httpx.TimeoutException, Deadline) as exc:
            raise RequestTimeout(where, time.perf_counter() - t0, limit, prompt_tokens) from exc
        except (openai.APIConnectionError, httpx.TransportError) as exc:
            # Raised mid-stream, httpx errors reach us unwrapped by the SDK.
            raise ServerGone(f"{where}: {type(exc).__name__}: {exc}") from exc

    @property
    def stream_idle_s(self) -> float:
        return self.timeouts.stream_idle_s if self.timeouts is not None else DEFAULT_STREAM_IDLE_S

    def _stream(self, client: Any, kwargs: dict[str, Any], extra: dict[str, Any], deadline: float, t0: float,
                idle_s: float) -> Answer:
        timeline = Timeline.start()
        stream = client.chat.completions.create(**kwargs, stream=True, extra_body=extra)
        ended = watch_for_done(stream)
        options = extra.get("stream_options") or {}
        assembly = StreamAssembly(usage_asked=bool(options.get("include_usage")),
                                  continuous_usage=bool(options.get("continuous_usage_stats")))
        for data in chunks_with_idle_limit(stream, idle_s, deadline, t0):
            assembly.add(data, timeline)
        timeline.finish()
        return assembly.answer(timeline, done=ended())
