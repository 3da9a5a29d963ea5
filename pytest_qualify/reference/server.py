"""HTTP side of the reference server: vLLM's OpenAI-compatible surface, simulated.

Endpoints: ``/health``, ``/v1/models``, ``/version``, ``/tokenize``, ``/metrics`` (Prometheus
text), ``/v1/chat/completions`` (streaming with ``include_usage`` and not; tool calls with
streamed deltas; ``response_format``; ``cache_salt`` and a block prefix cache reporting
``prompt_tokens_details.cached_tokens``). The window is enforced with vLLM's 400 error shape.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from pytest_qualify.profiles import Profile
from pytest_qualify.reference import SIMULATED_LABEL, oracle, tokenizer
from pytest_qualify.reference.faults import Faults
from pytest_qualify.reference.scheduler import Scheduler
from pytest_qualify.reference.validation import (
    hostile_class, overwindow, parse_json_body, validate_budget, validate_chat,
)

VERSION = "0.1.0-reference (SIMULATED, not vLLM)"
CACHE_BLOCK = 16
CONTENT_PIECE_TOKENS = 4


class Metrics:
    """vLLM-named Prometheus metrics, so evidence code parses the same names on both."""

    def __init__(self, model: str) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry()
        labels = ["model_name"]
        buckets = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0)
        self.ttft = Histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", labels, registry=self.registry, buckets=buckets)
        self.e2e = Histogram("vllm:e2e_request_latency_seconds", "Histogram of end to end request latency in seconds.", labels, registry=self.registry, buckets=buckets)
        self.prompt = Counter("vllm:prompt_tokens", "Number of prefill tokens processed.", labels, registry=self.registry)
        self.generation = Counter("vllm:generation_tokens", "Number of generation tokens processed.", labels, registry=self.registry)
        self.cache_queries = Counter("vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.", labels, registry=self.registry)
        self.cache_hits = Counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.", labels, registry=self.registry)
        self.success = Counter("vllm:request_success", "Count of successfully processed requests.", labels, registry=self.registry)
        self.running = Gauge("vllm:num_requests_running", "Number of requests in model execution batches.", labels, registry=self.registry)
        self.model = model

    def text(self) -> bytes:
        from prometheus_client import generate_latest

        return generate_latest(self.registry)


class PrefixCache:
    """Block-hash prefix cache; the salt is part of the first block's hash, as in vLLM."""

    def __init__(self, ignore_salt: bool) -> None:
        self.blocks: set[bytes] = set()
        self.ignore_salt = ignore_salt
        self.lock = threading.Lock()

    def lookup_and_insert(self, token_ids: list[int], salt: str | None) -> int:
        h = hashlib.sha256(b"" if self.ignore_salt or not salt else salt.encode())
        cached, still_hit = 0, True
        with self.lock:
            for start in range(0, len(token_ids) - CACHE_BLOCK + 1, CACHE_BLOCK):
                h.update(json.dumps(token_ids[start : start + CACHE_BLOCK]).encode())
                key = h.copy().digest()
                if still_hit and key in self.blocks:
                    cached += CACHE_BLOCK
                else:
                    still_hit = False
                    self.blocks.add(key)
        return cached


class ReferenceState:
    def __init__(self, profile: Profile, faults: Faults, api_key: str | None, prefill_tok_s: float, decode_tok_s: float) -> None:
        self.profile = profile
        self.faults = faults
        self.api_key = api_key
        self.prefill_tok_s = prefill_tok_s
        self.decode_tok_s = decode_tok_s
        self.ctx = oracle.OracleContext(profile, faults)
        self.metrics = Metrics(profile.deployment.served_name)
        self.cache = PrefixCache("ignore_cache_salt" in faults)
        self.scheduler = Scheduler(profile.limits.max_num_seqs, faults, self.metrics,
                                   profile.load.levels[-1] if profile.load else 2)
        self.chat_requests = 0
        self.lock = threading.Lock()
        # The result_cache fault's response cache: request body without its cache_salt -> answer.
        self.results: dict[str, tuple[Any, ...]] = {}


def _media_tokens(req: oracle.ChatRequest) -> dict[str, int] | None:
    """Prompt tokens per kind of media, as vLLM reports them (``null`` for a text-only prompt)."""
    counts: dict[str, int] = {}
    for part in req.media_parts():
        kind = {"image_url": "image", "video_url": "video"}.get(str(part.get("type")))
        if kind:
            counts[kind] = counts.get(kind, 0) + (tokenizer.IMAGE_TOKENS if kind == "image" else tokenizer.VIDEO_TOKENS)
    return counts or None


def error_body(status: int, message: str, err_type: str = "BadRequestError", param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": err_type, "param": param, "code": status}}


class Handler(BaseHTTPRequestHandler):
    server_version = "pytest-qualify-reference"
    state: ReferenceState  # set on the subclass by serve()

    def log_message(self, fmt: str, *args: Any) -> None:
        # One line per request, no headers and no bodies: nothing secret reaches the log.
        print(f"{self.address_string()} {fmt % args}", flush=True)

    # -- plumbing ------------------------------------------------------------------------------

    def _send_json(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, message: str, err_type: str = "BadRequestError", param: str | None = None) -> None:
        self._send_json(status, error_body(status, message, err_type, param))

    def _authorized(self) -> bool:
        key = self.state.api_key
        if not key or self.path in ("/health", "/version", "/metrics"):
            return True
        if self.headers.get("Authorization", "") == f"Bearer {key}":
            return True
        self._send_json(401, {"error": "Unauthorized"})
        return False

    def _read_json(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        return parse_json_body(raw)

    def _version(self) -> str:
        faults = self.state.faults
        if "engine_swap_after" in faults and self.state.chat_requests >= faults.number("engine_swap_after", 1):
            return VERSION.replace("reference", "reference-swapped")
        return faults.arg("engine_version", VERSION)

    # -- routes --------------------------------------------------------------------------------

    def do_GET(self) -> None:  # noqa: N802
        if not self._authorized():
            return
        profile = self.state.profile
        if self.path == "/health":
            if "health_500" in self.state.faults:
                self._error(500, "health check failed", "InternalServerError")
            else:
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()
        elif self.path == "/version":
            self._send_json(200, {"version": self._version(), "simulated": True})
        elif self.path == "/v1/models":
            wrong = "wrong_identity" in self.state.faults
            root = profile.deployment.model + ("-other" if wrong else "")
            window = profile.limits.window_tokens // (2 if wrong else 1)
            self._send_json(200, {"object": "list", "data": [{
                "id": profile.deployment.served_name, "object": "model", "created": 0,
                "owned_by": SIMULATED_LABEL, "root": root, "parent": None,
                "max_model_len": window, "simulated": True,
            }]})
        elif self.path == "/metrics":
            data = self.state.metrics.text()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        else:
            self._error(404, f"not found: {self.path}", "NotFoundError")

    def do_POST(self) -> None:  # noqa: N802
        if not self._authorized():
            return
        try:
            body = self._read_json()
            if self.path == "/tokenize":
                self._tokenize(body)
            elif self.path == "/v1/chat/completions":
                with self.state.scheduler.seat(self):  # the queue and the batch (scheduler.py)
                    self._chat(body)
            else:
                self._error(404, f"not found: {self.path}", "NotFoundError")
        except oracle.Rejection as rej:
            kind = hostile_class(rej)
            if kind is not None and kind == self.state.faults.arg("hostile_500"):
                self._error(500, "Internal Server Error", "InternalServerError")
            else:
                self._error(rej.status, rej.message, rej.err_type, getattr(rej, "param", None))
        except (BrokenPipeError, ConnectionResetError):
            pass
        except Exception:
            # As an ASGI server would: a bug answers 500 (and is logged) instead of a dropped
            # connection, so the robustness module sees it as the 5xx it is.
            import traceback

            traceback.print_exc()
            self._error(500, "Internal Server Error", "InternalServerError")

    def _tokenize(self, body: Any) -> None:
        if not isinstance(body, dict):
            raise oracle.Rejection(400, "request body must be a JSON object")
        if "messages" in body:
            validate_chat({"messages": body["messages"], "model": body.get("model")}, require_model=False)
            # vLLM renders the prompt with its media, so a part that does not decode is refused here too.
            from pytest_qualify.reference.oracle_media import decode_all

            decode_all(oracle.ChatRequest({"messages": body["messages"]}), self.state.ctx)
            text, media = tokenizer.render_chat(body["messages"], body.get("tools"), body.get("add_generation_prompt", True))
        elif isinstance(body.get("prompt"), str):
            text, media = body["prompt"], 0
        else:
            raise oracle.Rejection(400, "tokenize needs 'messages' or 'prompt'")
        token_ids = tokenizer.ids(text) + [0] * media
        self._send_json(200, {"count": len(token_ids), "max_model_len": self.state.profile.limits.window_tokens,
                              "tokens": token_ids, "token_strs": None})

    def _chat(self, body: Any) -> None:
        st = self.state
        # Server-side latency counts from arrival, as vLLM's arrival_time does.
        t0 = time.perf_counter()
        validate_chat(body)
        if body.get("model") != st.profile.deployment.served_name:
            raise oracle.Rejection(404, f"The model `{body.get('model')}` does not exist.", "NotFoundError")
        with st.lock:
            st.chat_requests += 1
            n = st.chat_requests
        if "die_after" in st.faults and n > st.faults.number("die_after", 1):
            print(f"fault die_after: exiting after {n - 1} chat requests", flush=True)
            os._exit(3)
        if "hang_after" in st.faults and n > st.faults.number("hang_after", 1):
            time.sleep(3600)
        if "drop_connection" in st.faults and n == st.faults.number("drop_connection", 1):
            print(f"fault drop_connection: closing chat request {n} without an answer", flush=True)
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        if "slow" in st.faults:
            time.sleep(st.faults.number("slow", 1.0))

        req = oracle.ChatRequest(body)
        window = st.profile.limits.window_tokens
        text, media = tokenizer.render_chat(req.messages, req.tools or None)
        prompt_ids = tokenizer.ids(text) + [0] * media
        prompt_tokens = len(prompt_ids)
        if prompt_tokens > window and "overwindow_accept" not in st.faults:
            if "overwindow_500" in st.faults:
                raise oracle.Rejection(500, "Internal Server Error", "InternalServerError")
            raise overwindow(window, prompt_tokens)
        if prompt_tokens <= window:
            validate_budget(body, prompt_tokens, window)
        oracle.admit(req, st.ctx)
        reply = oracle.answer(req, st.ctx)
        if "answer_swap_after" in st.faults and n > st.faults.number("answer_swap_after", 1) and reply.content:
            reply = dataclasses.replace(reply, content=reply.content.upper())
        if "pad_answer" in st.faults and reply.content:
            reply = dataclasses.replace(reply, content=reply.content + " " * 1000)
        result_key = json.dumps({k: v for k, v in body.items() if k not in ("cache_salt", "stream", "stream_options")},
                                sort_keys=True)
        cached_result = st.results.get(result_key) if "result_cache" in st.faults else None

        cached = st.cache.lookup_and_insert(prompt_ids, body.get("cache_salt"))
        if reply.cached_tokens is not None:
            cached = min(prompt_tokens, reply.cached_tokens)
        st.metrics.cache_queries.labels(st.metrics.model).inc(prompt_tokens)
        st.metrics.cache_hits.labels(st.metrics.model).inc(cached)
        max_tokens = body.get("max_tokens") or body.get("max_completion_tokens") or max(1, window - prompt_tokens)
        max_tokens = min(max_tokens, max(1, window - prompt_tokens))
        content, calls, finish = _shape(reply, max_tokens)
        cut = finish == "length"
        if cut and calls and req.stream and "cut_call_tool_calls" in st.faults:
            finish = "tool_calls"
        completion_tokens = max_tokens if cut else _completion_tokens(content, calls, reply.reasoning)
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached, "multimodal_tokens": _media_tokens(req)},
        }
        if cached_result is not None:
            content, calls, finish, usage = cached_result
        elif "result_cache" in st.faults:
            st.results[result_key] = (content, calls, finish, usage)
        if req.stream and "stream_usage_off" in st.faults:
            usage = {**usage, "completion_tokens": usage["completion_tokens"] + 1}
        if st.prefill_tok_s > 0 and cached_result is None:
            time.sleep(max(0, prompt_tokens - cached) / st.prefill_tok_s)
        if req.stream and "latency" in st.faults:
            time.sleep(st.faults.number("latency", 1.0))  # a slow prefill; _stream slows the decode
        ttft = time.perf_counter() - t0

        def record() -> None:
            # Recorded when the request finishes, before its last bytes reach the client: a
            # /metrics scrape made right after the answer always counts it.
            if cached_result is not None:
                return  # a response cache answered: the engine never saw the request
            m = st.metrics
            m.ttft.labels(m.model).observe(ttft)
            m.e2e.labels(m.model).observe(time.perf_counter() - t0)
            m.prompt.labels(m.model).inc(prompt_tokens)
            m.generation.labels(m.model).inc(completion_tokens)
            m.success.labels(m.model).inc()

        rid = f"chatcmpl-{uuid.uuid4().hex}"
        if req.stream:
            self._stream(rid, body, content, calls, reply.reasoning, finish, usage, record, cached_result is not None)
        else:
            if cached_result is None:
                st.scheduler.decode(completion_tokens, st.decode_tok_s)
            record()
            message: dict[str, Any] = {"role": "assistant", "content": content, "tool_calls": [
                {"id": f"call_{i}_{uuid.uuid4().hex[:8]}", "type": "function", "function": {"name": name, "arguments": args}}
                for i, (name, args) in enumerate(calls)
            ]}
            if reply.reasoning:
                message["reasoning_content"] = reply.reasoning
            self._send_json(200, {
                "id": rid, "object": "chat.completion", "created": int(time.time()),
                "model": st.profile.deployment.served_name,
                "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
                "usage": usage,
            })

    def _stream(self, rid: str, body: Any, content: str | None, calls: list[tuple[str, str]],
                reasoning: str | None, finish: str, usage: dict[str, Any], record: Callable[[], None],
                from_result_cache: bool = False) -> None:
        st = self.state
        faults = st.faults
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        created = int(time.time())
        model = st.profile.deployment.served_name

        def send(choices: list[Any], extra: dict[str, Any] | None = None) -> None:
            payload = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": model, "choices": choices}
            payload.update(extra or {})
            self.wfile.write(f"data: {json.dumps(payload)}\n\n".encode())
            self.wfile.flush()

        def pause(tokens: int) -> None:
            if not from_result_cache:
                st.scheduler.decode(tokens, st.decode_tok_s)

        stalled = []

        def stall() -> None:
            # Once per stream, after its first content or tool-call chunk.
            if "stream_stall" in faults and not stalled:
                stalled.append(True)
                st.scheduler.release_current()  # the client gives up on it and vLLM aborts it
                time.sleep(faults.number("stream_stall", 3600.0))

        send([{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}])
        if "latency" in st.faults:
            time.sleep(st.faults.number("latency", 1.0))
        if reasoning:
            for piece in _pieces(reasoning):
                send([{"index": 0, "delta": {"reasoning_content": piece}, "finish_reason": None}])
        pieces = list(content or "") if "stream_char_deltas" in faults else _pieces(content or "")
        if "stream_drops_tail" in faults and pieces:
            pieces = [x for x in pieces[:-1] + [pieces[-1][:-1]] if x]
        late: list[dict[str, Any]] = []  # stream_after_finish: the last piece, held back
        if "stream_after_finish" in faults and pieces and not calls:
            late.append({"content": pieces.pop()})
        for piece in pieces:
            pause(CONTENT_PIECE_TOKENS)
            send([{"index": 0, "delta": {"content": piece}, "finish_reason": None}])
            stall()
        for i, (name, args) in enumerate(calls):
            first: dict[str, Any] = {"index": i, "id": f"call_{i}_{uuid.uuid4().hex[:8]}", "type": "function",
                                     "function": {"name": name, "arguments": ""}}
            if "stream_tool_delta_bare" in faults:
                first = {"index": i, "function": {"name": name, "arguments": ""}}
            send([{"index": 0, "delta": {"tool_calls": [first]}, "finish_reason": None}])
            stall()
            if "tool_name_repeated_in_stream" in st.faults:  # declared in oracle_tools.FAULTS
                send([{"index": 0, "delta": {"tool_calls": [{"index": i, "function": {"name": name}}]}, "finish_reason": None}])
            index = i + 1 if "stream_tool_index" in faults else i
            arg_pieces = _pieces(args)
            if "stream_after_finish" in faults and i == len(calls) - 1 and len(arg_pieces) > 1:
                late.append({"tool_calls": [{"index": index, "function": {"arguments": arg_pieces.pop()}}]})
            for piece in arg_pieces:
                pause(CONTENT_PIECE_TOKENS)
                send([{"index": 0, "delta": {"tool_calls": [{"index": index, "function": {"arguments": piece}}]}, "finish_reason": None}])
        record()
        send([{"index": 0, "delta": {}, "finish_reason": finish}])
        if "stream_two_finish" in faults:
            send([{"index": 0, "delta": {}, "finish_reason": finish}])
        for delta in late:
            send([{"index": 0, "delta": delta, "finish_reason": None}])
        asked = bool((body.get("stream_options") or {}).get("include_usage"))
        if (asked and "stream_usage_missing" not in faults) or (not asked and "stream_usage_unasked" in faults):
            send([], {"usage": usage})
        if "stream_no_done" in faults:
            self.close_connection = True  # the body ends with the connection: no [DONE]
            return
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()


def _pieces(text: str) -> list[str]:
    """Split text into stream deltas of a few tokens, keeping every character."""
    toks = list(tokenizer.TOKEN_RE.finditer(text))
    if not toks:
        return [text] if text else []
    cuts = [toks[i].start() for i in range(0, len(toks), CONTENT_PIECE_TOKENS)][1:]
    out, prev = [], 0
    for cut in cuts:
        out.append(text[prev:cut])
        prev = cut
    out.append(text[prev:])
    return out


def _cut(text: str, tokens: int) -> str:
    """The text's first ``tokens`` tokens."""
    toks = list(tokenizer.TOKEN_RE.finditer(text))
    return text[: toks[tokens - 1].end()] if tokens > 0 and toks else ""


def _shape(reply: oracle.Reply, max_tokens: int) -> tuple[str | None, list[tuple[str, str]], str]:
    """Apply the token budget: an answer longer than ``max_tokens`` is cut, finish ``length``;
    tool calls too (the call in progress keeps the arguments generated so far, later ones go)."""
    calls = [(n, a if isinstance(a, str) else json.dumps(a)) for n, a in reply.tool_calls]
    content = reply.content
    finish = reply.finish_reason or ("tool_calls" if calls else "stop")
    if content is not None and tokenizer.count(content) > max_tokens:
        content = _cut(content, max_tokens)
        finish = "length"
    if calls and _completion_tokens(None, calls, None) > max_tokens:
        left, kept = max_tokens, []
        for name, args in calls:
            need = tokenizer.count(name) + tokenizer.count(args)
            if need <= left:
                kept.append((name, args))
                left -= need
                continue
            if left > tokenizer.count(name):
                kept.append((name, _cut(args, left - tokenizer.count(name))))
            break
        calls, finish = kept, "length"
    return content, calls, finish


def _completion_tokens(content: str | None, calls: list[tuple[str, str]], reasoning: str | None) -> int:
    n = tokenizer.count(content or "") + tokenizer.count(reasoning or "")
    n += sum(tokenizer.count(name) + tokenizer.count(args) for name, args in calls)
    return max(1, n + 1)  # the end-of-sequence token counts, as it does on a real server


def serve(host: str, port: int, profile: Profile, faults: Faults, api_key: str | None = None,
          prefill_tok_s: float = 0.0, decode_tok_s: float = 0.0) -> None:
    state = ReferenceState(profile, faults, api_key, prefill_tok_s, decode_tok_s)
    handler = type("BoundHandler", (Handler,), {"state": state})
    httpd = ThreadingHTTPServer((host, port), handler)
    httpd.daemon_threads = True
    print(f"{SIMULATED_LABEL}: profile {profile.name}, serving {profile.deployment.served_name} "
          f"on http://{host}:{port}; faults: {', '.join(sorted(faults.active)) or 'none'}", flush=True)
    try:
        httpd.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        httpd.server_close()
