"""Steering mode: a real vLLM forced to give the reference oracle's answers.

``python -m pytest_qualify.reference --steer URL --port P --profile NAME`` runs a proxy in front
of the real vLLM at URL. Every request goes to vLLM. A chat request the reference server would
accept is first answered by the oracles (``oracle.answer``, the reference server's own machinery
and fault switches), and vLLM is given a ``structured_outputs`` constraint that allows exactly
that answer: a text as a one-item ``choice`` (or an escaped ``regex`` when it spans lines), tool
calls written in the served model's own tool-call syntax so that vLLM's tool parser produces them,
a ``response_format`` task's JSON forced instead of the response format (vLLM refuses both at
once). So a random-weight model emits known-correct answers, and vLLM's own tokenizer,
detokenizer, stream chunker, tool-call and reasoning parsers, usage accounting and media pipeline
sit between that answer and the plugin: a PASS path through a real engine.

vLLM's response goes back untouched, bytes and streams alike. vLLM has no metric that shows a
grammar was applied, so every forced answer is checked against what vLLM returned (a stream is
read as it passes) and logged as one JSON line; ``steer_log.incomplete_reasons`` turns the log into
the run-level reasons that leave a steered run INCOMPLETE: an answer that is not the forced one was
never a judgement of the deployment, neither PASS nor FAIL.

This file is the proxy (the HTTP side); the forcing, the observing and the log are files of their
own: ``steer_forcing.py``, ``steer_observing.py``, ``steer_log.py``.

"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from pytest_qualify.reference.http_serving import serve_http
from pytest_qualify.reference.steer_forcing import (
    Forced, SteerError, force, kept_for_cut, raised_max_tokens, request_key, requested_max_tokens, steered_body,
    text_constraint, tokens_needed,
)
from pytest_qualify.reference.steer_log import OWN_CONSTRAINT, SteerRecord, Unforced
from pytest_qualify.reference.steer_observing import Observed, StreamReader, held, held_cut

_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "server", "date"}
# Distinct /tokenize payloads whose counts the proxy keeps (a digest and an int each): the forced
# answers and prompts of a whole run, many of them asked again in every repetition.
COUNT_CACHE_ENTRIES = 8192


@dataclass(frozen=True)
class SteerConfig:
    upstream: str
    tool_call_syntax: str
    strip_chat_template_kwargs: bool
    log_path: Path
    timeout_s: float = 3600.0


class SteerState:
    def __init__(self, config: SteerConfig, profile: Any, faults: Any) -> None:
        import httpx

        from pytest_qualify.reference import oracle

        self.config = config
        # Lane-keyed faults pick the lane by the prompt's size in vLLM's own tokens.
        self.ctx = oracle.OracleContext(profile, faults, count_chat=self.count_chat)
        self.headers: dict[str, str] = {}  # the caller's credentials, for the proxy's own /tokenize
        # Connections to vLLM are kept alive (a new one per request cost a TCP set-up on each of a
        # run's hundreds of requests and /tokenize calls). After a 5xx vLLM's server closes the
        # connection without saying so (docs/real-vllm.md, media facts), and a request sent on it
        # fails before any answer: ``send`` sends such a request once more, on a new connection.
        self.http = httpx.Client(base_url=config.upstream, timeout=httpx.Timeout(config.timeout_s, connect=10.0),
                                 limits=httpx.Limits(max_keepalive_connections=32, keepalive_expiry=30.0))
        self.lock = threading.Lock()
        # /tokenize counts by the payload's digest: a count is a property of the text and vLLM's
        # tokenizer, so the same payload is counted once (``counts_asked``: the calls vLLM answered).
        self.counts: OrderedDict[str, int | None] = OrderedDict()
        self.counts_asked = 0
        self.seq = 0
        self.window: int | None = None
        # request_key -> (forced text, completion tokens vLLM spent on it under the caller's own limit)
        self.spent: dict[str, tuple[str, int]] = {}

    def send(self, request: Any, *, stream: bool = False) -> Any:
        """``http.send``, once more on a new connection when a kept-alive one turns out closed by vLLM
        before any answer came (the request never reached it: nothing is asked twice)."""
        import httpx

        try:
            return self.http.send(request, stream=stream)
        except httpx.RemoteProtocolError as exc:
            if "without sending" not in str(exc):  # "Server disconnected without sending a response."
                raise
        except (httpx.ReadError, httpx.WriteError):
            pass  # reset by the peer on a connection it had closed
        return self.http.send(request, stream=stream)

    def count(self, payload: Mapping[str, Any]) -> int | None:
        """vLLM's ``/tokenize`` count of ``payload`` (a prompt, or messages and tools), asked with the
        caller's credentials once per distinct payload, or None when vLLM refuses it (a refusal is not
        kept: the next request asks again)."""
        key = hashlib.sha256(json.dumps(payload, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()
        with self.lock:
            if key in self.counts:
                self.counts.move_to_end(key)
                return self.counts[key]
        response = self.send(self.http.build_request("POST", "/tokenize", json=payload, headers=self.headers))
        self.counts_asked += 1
        if response.status_code != 200:
            return None
        tokens = int(response.json()["count"])
        with self.lock:
            self.counts[key] = tokens
            while len(self.counts) > COUNT_CACHE_ENTRIES:
                self.counts.popitem(last=False)
        return tokens

    def count_chat(self, messages: Any, tools: Any) -> int | None:
        """A chat prompt's tokens as vLLM counts them (``/tokenize`` with the messages), or None."""
        return self.count({"messages": messages, **({"tools": tools} if tools else {})})

    def next_seq(self) -> int:
        with self.lock:
            self.seq += 1
            return self.seq

    def log(self, record: SteerRecord) -> None:
        line = json.dumps(asdict(record)) + "\n"
        with self.lock, self.config.log_path.open("a", encoding="utf-8") as fh:
            fh.write(line)


class SteerHandler(BaseHTTPRequestHandler):
    state: SteerState  # set on the subclass by serve_steer()
    server_version = "pytest-qualify-steer"

    def log_message(self, fmt: str, *args: Any) -> None:
        print(f"{self.address_string()} {fmt % args}", flush=True)

    def do_GET(self) -> None:  # noqa: N802
        self._forward("GET", b"", None)

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if self.path.split("?")[0] == "/v1/chat/completions":
            self._chat(raw)
        else:
            self._forward("POST", raw, None)

    def _headers_out(self) -> dict[str, str]:
        keep = ("authorization", "content-type", "accept")
        return {k: v for k, v in self.headers.items() if k.lower() in keep}

    def _forward(self, method: str, raw: bytes, reader: StreamReader | None,
                 settle: Callable[[int, bytes], None] | None = None) -> tuple[int, bytes]:
        """Send the request to vLLM and its answer back unchanged; return status and body (a stream's
        body is passed on as it arrives and fed to ``reader``). ``settle(status, body)`` runs once the
        answer is whole and before its last bytes reach the caller (a plain body before it is sent, a
        stream before its ``[DONE]``): what it records is in place before the caller can ask again."""
        st = self.state
        request = st.http.build_request(method, self.path, content=raw or None, headers=self._headers_out())
        response = st.send(request, stream=True)
        try:
            streaming = response.headers.get("content-type", "").startswith("text/event-stream")
            self.send_response(response.status_code)
            for key, value in response.headers.items():
                if key.lower() not in _HOP_BY_HOP:
                    self.send_header(key, value)
            if streaming:
                self.send_header("Connection", "close")
                self.end_headers()
                body = b""
                settled = settle is None
                for data in response.iter_raw():
                    if reader is not None:
                        reader.feed(data)
                    if not settled and b"[DONE]" in data:
                        settle(response.status_code, body)
                        settled = True
                    self.wfile.write(data)
                    self.wfile.flush()
                self.close_connection = True
                if not settled:
                    settle(response.status_code, body)
                return response.status_code, body
            body = response.read()
            if settle is not None:
                settle(response.status_code, body)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return response.status_code, body
        finally:
            response.close()

    def _chat(self, raw: bytes) -> None:
        st = self.state
        seq = st.next_seq()
        plan = self._plan(raw)
        if isinstance(plan, Unforced):  # nothing to force: the caller's bytes as they came
            started = time.time()
            status, body = self._forward("POST", raw, None)
            stream = b'"stream": true' in raw or b'"stream":true' in raw
            st.log(SteerRecord(seq, status, stream, False, None, plan.reason, prompt=_prompt(raw),
                               passed_through=plan.passed_through, started_at=started, ended_at=time.time()))
            return
        body, forced, changes, cut, key = plan
        stream = bool(body.get("stream"))
        reader = StreamReader() if stream else None
        reason, ok, observed = "", None, None

        def settle(status: int, answer: bytes) -> None:
            # Whether vLLM returned the forced answer, and what it spent on it: recorded before the
            # caller has the whole answer, so its next request (the integrity module's cut of the same
            # request) finds it.
            nonlocal reason, ok, observed
            if status == 200:
                if reader is not None:
                    observed = reader.observed
                else:
                    try:
                        observed = Observed.from_response(json.loads(answer))
                    except ValueError as exc:
                        reason = f"unreadable answer: {exc}"
                if observed is not None:
                    reason = (held(forced, observed) if cut is None else held_cut(forced, observed, cut)) or ""
                ok = not reason
            limit_kept = not any(c.startswith(("max_tokens", "max_completion_tokens")) for c in changes)
            if ok and cut is None and limit_kept and observed is not None and observed.completion_tokens:
                with st.lock:
                    st.spent[key] = (forced.text, observed.completion_tokens)

        started = time.time()
        status, _ = self._forward("POST", json.dumps(body).encode(), reader, settle)
        ended = time.time()
        st.log(SteerRecord(seq, status, stream, True, ok, reason, tuple(changes), forced.text,
                           prompt=_prompt_of(body), faults=forced.faults, cut=cut,
                           finish=observed.finish_reason if observed is not None and cut is not None else None,
                           started_at=started, ended_at=ended))

    def _plan(self, raw: bytes) -> tuple[dict[str, Any], Forced, list[str], int | None, str] | Unforced:
        """The steered request, the forced answer, what was changed, the caller's limit kept below the
        answer (None: the answer fits) and the request's key; or why the request goes through as it came."""
        from pytest_qualify.reference import oracle
        from pytest_qualify.reference.validation import validate_chat

        st = self.state
        st.headers = self._headers_out()
        try:
            body = json.loads(raw)
            validate_chat(body)
        except (ValueError, oracle.Rejection) as exc:
            # Malformed input is vLLM's to refuse, with its own words.
            return Unforced.passthrough(f"the reference server would refuse it: {exc}")
        if any(key in body for key in ("structured_outputs", "guided_json", "guided_regex", "guided_choice")):
            from pytest_qualify.reference.oracle_parsers import shifted_text

            shifted = shifted_text(body, st.ctx, st.config.tool_call_syntax)
            if shifted is None:
                return Unforced.passthrough(OWN_CONSTRAINT)
            text, content, calls = shifted  # the parsers fault: the caller's forced calls, one argument changed
            forced = Forced(text, content, tuple(calls), text_constraint(text), faults=("parser_shift_argument",))
            need = len(text.encode("utf-8")) + 8  # the caller's budget was its own text's (a token is a byte or more)
            asked = requested_max_tokens(body)
            steered, changes = steered_body(body, forced, strip_chat_template_kwargs=False,
                                            max_tokens=need if asked is not None and asked < need else None)
            return steered, forced, [*changes, "parser_shift_argument: the caller's constraint replaced"], None, \
                request_key(body)
        if body.get("ignore_eos") is True:
            return Unforced.passthrough("it asks for a fixed length (ignore_eos): the load module's decode probe, "
                                        "whose text is never graded")
        if body.get("tool_choice") not in (None, "auto", "none"):
            return Unforced.passthrough(f"tool_choice {body.get('tool_choice')!r} is vLLM's own constraint")
        strip = st.config.strip_chat_template_kwargs
        # The oracle answers the request vLLM will see: without the caller's kwargs when stripped.
        seen = {k: v for k, v in body.items() if not (strip and k == "chat_template_kwargs")}
        try:
            reply = oracle.answer(oracle.ChatRequest(seen), st.ctx)
            forced = force(reply.content, reply.tool_calls, reply.reasoning, st.config.tool_call_syntax)
            forced = replace(forced, faults=tuple(reply.faults))
            if reply.finish_reason not in (None, "stop", "tool_calls"):
                raise SteerError(f"finish_reason {reply.finish_reason!r} cannot be forced")
        except oracle.Rejection as rej:
            return Unforced(f"the oracle refused it: HTTP {rej.status} {rej.message}")
        except Exception as exc:  # noqa: BLE001 - any oracle failure leaves this answer unforced, and logged
            return Unforced(f"the oracle could not answer it: {type(exc).__name__}: {exc}")
        key = request_key(seen)
        with st.lock:
            text, spent = st.spent.get(key, (None, None))
        try:
            max_tokens, cut = self._budget(seen, forced, spent if text == forced.text else None)
        except Exception:  # noqa: BLE001 - /tokenize may fail where the chat request fails too: vLLM's to answer
            max_tokens, cut = None, None
        steered, changes = steered_body(body, forced, strip_chat_template_kwargs=strip, max_tokens=max_tokens)
        if cut is not None:
            changes.append(f"max_tokens {cut} kept: below the forced answer, which comes back cut")
        return steered, forced, changes, cut, key

    def _budget(self, body: Mapping[str, Any], forced: Forced, spent: int | None) -> tuple[int | None, int | None]:
        """The raised ``max_tokens`` (None: the caller's stands) and the caller's limit kept for a
        cut answer (:func:`kept_for_cut`; None: the answer fits)."""
        st = self.state
        asked = requested_max_tokens(body)
        cut = kept_for_cut(asked, spent)
        if cut is not None:
            return None, cut
        counted = st.count({"prompt": forced.text, "add_special_tokens": False})
        need = tokens_needed(counted if counted is not None else len(forced.text))
        if asked is not None and asked >= need:
            return None, None
        if st.window is None:
            models = st.http.get("/v1/models", headers=self._headers_out()).json()
            st.window = int(models["data"][0]["max_model_len"])
        prompt = st.count({k: body[k] for k in ("model", "messages", "tools") if k in body}) or 0
        return raised_max_tokens(asked, need, st.window - prompt), None



def _prompt(raw: bytes) -> str:
    try:
        return _prompt_of(json.loads(raw))
    except Exception:  # noqa: BLE001 - only a label for the log
        return ""


def _prompt_of(body: Any) -> str:
    """The log's label of a request: the start of its last user message, whitespace collapsed (from
    the body already parsed: a 240K-token prompt is not parsed again, nor split whole, for a label)."""
    try:
        from pytest_qualify.reference.oracle import ChatRequest

        return " ".join(ChatRequest(body).last_user_text()[:2000].split())[:120]
    except Exception:  # noqa: BLE001 - only a label for the log
        return ""


def check_faults(names: Sequence[str]) -> None:
    """Only an oracle's answer faults can be imposed on a real vLLM (``faults.FaultSpec.steerable``):
    a fault of the reference server's own HTTP side (identity, health, latency, admission, the
    stream's shape) or of how an answer is served would change nothing here."""
    from pytest_qualify.reference.faults import fault_specs

    specs = fault_specs()
    bad = sorted(name for name in set(names) if name in specs and not specs[name].steerable)
    if bad:
        raise SteerError(f"fault(s) {', '.join(bad)} cannot be imposed on a real vLLM by steering; "
                         "only the oracles' answer faults can")


def serve_steer(host: str, port: int, config: SteerConfig, profile: Any, faults: Any) -> None:
    check_faults(list(faults.active))
    config.log_path.parent.mkdir(parents=True, exist_ok=True)
    config.log_path.touch()
    serve_http(host, port, SteerHandler, SteerState(config, profile, faults),
               f"steering proxy: profile {profile.name}, forwarding to {config.upstream} on http://{host}:{port}; "
               f"tool-call syntax {config.tool_call_syntax}; chat_template_kwargs "
               f"{'stripped' if config.strip_chat_template_kwargs else 'kept'}; log {config.log_path}; "
               f"faults: {', '.join(sorted(faults.active)) or 'none'}")
