"""HTTP side of the reference server: vLLM's OpenAI-compatible surface, simulated.

Endpoints: ``/health``, ``/v1/models``, ``/version``, ``/tokenize``, ``/metrics`` (Prometheus
text), ``/v1/chat/completions`` (streaming with ``include_usage`` and not; tool calls with
streamed deltas; ``response_format``; ``cache_salt`` and a block prefix cache reporting
``prompt_tokens_details.cached_tokens``). The window is enforced with vLLM's 400 error shape.
"""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any

from pytest_qualify.profiles import Profile
from pytest_qualify.reference import SIMULATED_LABEL, oracle, shaping, tokenizer
from pytest_qualify.reference.faults import Faults
from pytest_qualify.reference.http_serving import serve_http
from pytest_qualify.reference import serving
from pytest_qualify.reference.state import ReferenceState
from pytest_qualify.request_key import request_key
from pytest_qualify.tasks.parsers import served
from pytest_qualify.reference.validation import (
    hostile_class, overwindow, parse_json_body, validate_budget, validate_chat,
)

VERSION = "0.1.0-reference (SIMULATED, not vLLM)"


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
        # A conforming deployment runs the engine build its profile declares, as vLLM's /version
        # says it (the bare version); a profile that declares none gets the server's own.
        from pytest_qualify.promotion.identity import engine_version_of

        return self.state.effects.version(engine_version_of(self.state.profile) or VERSION, self.state.chat_requests)

    # -- routes --------------------------------------------------------------------------------

    def do_GET(self) -> None:  # noqa: N802
        if not self._authorized():
            return
        profile = self.state.profile
        if self.path == "/health":
            if self.state.effects.health_fails():
                self._error(500, "health check failed", "InternalServerError")
            else:
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()
        elif self.path == "/version":
            self._send_json(200, {"version": self._version(), "simulated": True})
        elif self.path == "/v1/models":
            wrong = self.state.effects.wrong_identity()
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
            if self.state.effects.answers_500(hostile_class(rej)):
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
        faults = st.effects
        arrival = faults.arrival(n)
        if arrival.exit:
            print(f"fault die_after: exiting after {n - 1} chat requests", flush=True)
            os._exit(3)
        if arrival.hang:
            time.sleep(3600)
        if arrival.drop:
            print(f"fault drop_connection: closing chat request {n} without an answer", flush=True)
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        time.sleep(arrival.delay_s)

        req = oracle.ChatRequest(body)
        window = st.profile.limits.window_tokens
        text, media = tokenizer.render_chat(req.messages, req.tools or None)
        prompt_ids = tokenizer.ids(text) + [0] * media
        prompt_tokens = len(prompt_ids)
        if prompt_tokens > window and faults.over_window() != "accept":
            if faults.over_window() == "500":
                raise oracle.Rejection(500, "Internal Server Error", "InternalServerError")
            raise overwindow(window, prompt_tokens)
        if prompt_tokens <= window:
            validate_budget(body, prompt_tokens, window)
        oracle.admit(req, st.ctx)
        reply = faults.reply(oracle.answer(req, st.ctx), n)
        result_key = request_key(body)
        cached_result = faults.cached_result(st.results, result_key)

        cached = st.cache.lookup_and_insert(prompt_ids, body.get("cache_salt"))
        if reply.cached_tokens is not None:
            cached = min(prompt_tokens, reply.cached_tokens)
        st.metrics.cache_queries.labels(st.metrics.model).inc(prompt_tokens)
        st.metrics.cache_hits.labels(st.metrics.model).inc(cached)
        max_tokens = body.get("max_tokens") or body.get("max_completion_tokens") or max(1, window - prompt_tokens)
        max_tokens = min(max_tokens, max(1, window - prompt_tokens))
        content, calls, finish = shaping.shape(reply, max_tokens)
        cut = finish == "length"
        finish = faults.finish(finish, calls, req.stream)
        completion_tokens = max_tokens if cut else shaping.completion_tokens(content, calls, reply.reasoning)
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached, "multimodal_tokens": shaping.media_tokens(req)},
        }
        if cached_result is not None:
            content, calls, finish, usage = cached_result
        elif faults.result_cache():
            st.results[result_key] = (content, calls, finish, usage)
        usage = faults.usage(usage, req.stream)
        if st.prefill_tok_s > 0 and cached_result is None:
            time.sleep(max(0, prompt_tokens - cached) / st.prefill_tok_s)
        if req.stream:
            time.sleep(faults.stream_latency_s())  # a slow prefill; _stream slows the decode
        ttft = time.perf_counter() - t0

        def record() -> None:
            # Recorded when the request finishes, before its last bytes reach the client: a
            # /metrics scrape made right after the answer always counts it.
            st.scheduler.release_current()  # the engine is done with it: its place is free
            if cached_result is not None:
                return  # a response cache answered: the engine never saw the request
            m = st.metrics
            e2e = time.perf_counter() - t0
            m.ttft.labels(m.model).observe(ttft)
            m.e2e.labels(m.model).observe(e2e)
            m.decoded(ttft, e2e, completion_tokens)
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
            choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": finish, "logprobs": None}
            if body.get("return_token_ids") and reply.token_ids is not None:
                choice["token_ids"] = list(reply.token_ids)
            self._send_json(200, {
                "id": rid, "object": "chat.completion", "created": int(time.time()),
                "model": st.profile.deployment.served_name,
                "choices": [choice],
                "usage": usage,
            })

    def _stream(self, rid: str, body: Any, content: str | None, calls: list[tuple[str, str]],
                reasoning: str | None, finish: str, usage: dict[str, Any], record: Callable[[], None],
                from_result_cache: bool = False) -> None:
        st = self.state
        faults = st.effects
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        created = int(time.time())
        model = st.profile.deployment.served_name

        options = body.get("stream_options") or {}
        # vLLM's continuous_usage_stats: every chunk with choices carries the running usage.
        continuous = bool(options.get("include_usage")) and bool(options.get("continuous_usage_stats"))
        running = [0]

        def send(choices: list[Any], extra: dict[str, Any] | None = None, tokens: int = 0) -> None:
            payload = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": model, "choices": choices}
            if continuous and choices and isinstance(usage.get("completion_tokens"), int):
                total, prompt = usage["completion_tokens"], usage.get("prompt_tokens") or 0
                final = choices[0].get("finish_reason") is not None
                running[0] = total if final else min(running[0] + tokens, total)
                payload["usage"] = {"prompt_tokens": prompt, "completion_tokens": running[0],
                                    "total_tokens": prompt + running[0]}
            payload.update(extra or {})
            self.wfile.write(f"data: {json.dumps(payload)}\n\n".encode())
            self.wfile.flush()

        def pause(tokens: int) -> None:
            if not from_result_cache:
                st.scheduler.decode(tokens, st.decode_tok_s)

        stalled = []

        def stall() -> None:
            # Once per stream, after its first content or tool-call chunk.
            stall_s = faults.stall_s()
            if stall_s is not None and not stalled:
                stalled.append(True)
                st.scheduler.release_current()  # the client gives up on it and vLLM aborts it
                time.sleep(stall_s)

        send([{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}])
        time.sleep(faults.stream_latency_s())
        if reasoning:
            for piece in shaping.pieces(reasoning):
                send([{"index": 0, "delta": {"reasoning_content": piece}, "finish_reason": None}],
                     tokens=tokenizer.count(piece))
        # late: deltas held back until after the finish chunk (stream_after_finish)
        pieces, late = faults.content_pieces(shaping.pieces(content or ""), content or "", bool(calls))
        # vLLM's qwen3_coder parser holds whitespace-only text to the finish (engines.toml); with
        # stream_whole (vLLM 0.32.0 as first measured) it holds any text.
        held = pieces and not "".join(pieces).strip() and served(st.profile.serve.args).tool_parser is not None
        if (st.stream_whole or held) and pieces and not calls and not late and faults.finish_chunks() == 1:
            # The parser holds the text, which comes whole with the finish.
            pause(len(pieces) * shaping.CONTENT_PIECE_TOKENS)
            record()
            send([{"index": 0, "delta": {"content": "".join(pieces)}, "finish_reason": finish}])
            pieces = []
            finish_sent = True
        else:
            finish_sent = False
        for piece in pieces:
            pause(shaping.CONTENT_PIECE_TOKENS)
            send([{"index": 0, "delta": {"content": piece}, "finish_reason": None}], tokens=tokenizer.count(piece))
            stall()
        for i, (name, args) in enumerate(calls):
            first = faults.first_tool_delta(i, f"call_{i}_{uuid.uuid4().hex[:8]}", name)
            send([{"index": 0, "delta": {"tool_calls": [first]}, "finish_reason": None}])
            stall()
            if faults.name_repeated():
                send([{"index": 0, "delta": {"tool_calls": [{"index": i, "function": {"name": name}}]}, "finish_reason": None}])
            arg_pieces = shaping.pieces(args)
            index = faults.tool_index(i, bool(arg_pieces))
            held = faults.late_argument(arg_pieces, i == len(calls) - 1)
            if held is not None:
                late.append({"tool_calls": [{"index": index, "function": {"arguments": held}}]})
            for piece in arg_pieces:
                pause(shaping.CONTENT_PIECE_TOKENS)
                send([{"index": 0, "delta": {"tool_calls": [{"index": index, "function": {"arguments": piece}}]}, "finish_reason": None}],
                     tokens=tokenizer.count(piece))
        if not finish_sent:
            record()
            for _ in range(faults.finish_chunks()):
                send([{"index": 0, "delta": {}, "finish_reason": finish}])
        for delta in late:
            send([{"index": 0, "delta": delta, "finish_reason": None}])
        asked = bool((body.get("stream_options") or {}).get("include_usage"))
        if faults.sends_usage(asked):
            send([], {"usage": usage})
        if not faults.sends_done():
            self.close_connection = True  # the body ends with the connection: no [DONE]
            return
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()


def serve(host: str, port: int, profile: Profile, faults: Faults, api_key: str | None = None,
          prefill_tok_s: float = 0.0, decode_tok_s: float = 0.0, stream_whole: bool = False) -> None:
    state = ReferenceState(profile, faults, api_key, prefill_tok_s, decode_tok_s, stream_whole)
    delay = serving.startup_delay_s(faults)
    if delay:
        faults.engage("slow_startup")
        time.sleep(delay)  # slow_startup: not listening yet, as a vLLM still loading its weights
    print(serving.SIMULATED_LINE + json.dumps(state.serving_facts), flush=True)
    serve_http(host, port, Handler, state,
               f"{SIMULATED_LABEL}: profile {profile.name}, serving {profile.deployment.served_name} "
               f"on http://{host}:{port}; faults: {', '.join(sorted(faults.active)) or 'none'}")
