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
read as it passes) and logged as one JSON line; :func:`incomplete_reasons` turns the log into the
run-level reasons that leave a steered run INCOMPLETE: an answer that is not the forced one was
never a judgement of the deployment, neither PASS nor FAIL.

A caller's ``max_tokens`` below the forced answer is kept, as the reference server keeps it (it cuts
an answer longer than the limit, finish ``length``): the answer comes back cut, and a prefix of the
forced text cut by that limit counts as held (the integrity module's cut tool call). A limit the
answer fits, but a random model's longer spelling might not, is raised.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from pytest_qualify.request_key import request_key as same_request

TOOL_CALL_SYNTAXES = ("qwen3_coder", "hermes")
STEER_LOG = "steer.jsonl"
# A random-weight model spells a forced text in about twice its minimal token count (measured:
# 344 tokens against 178 for 700 characters); the margin covers the end-of-sequence token and the
# odd worse case.
TOKENS_FACTOR = 2.0
TOKENS_MARGIN = 16
# Only answer oracles may be switched on: a fault of the reference server's own HTTP side (identity,
# health, latency, admission, the stream's shape) cannot be imposed on a real vLLM.
UNSTEERABLE_FAULTS = frozenset({
    "wrong_identity", "overwindow_500", "overwindow_accept", "die_after", "hang_after", "slow", "latency",
    "ignore_cache_salt", "health_500", "hostile_500", "drop_connection", "engine_version", "engine_swap_after",
    "accept_over_limit", "malformed_500", "tool_name_repeated_in_stream", "cached_tokens", "finish_length",
    "leak_reasoning", "leak_think_tag", "thinking_overridable", "thinking_override_blank", "smoke_empty", "empty_answer",
    "load_500_at", "load_drop_at", "load_wrong_concurrent", "load_batch_variance",
})
_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "server", "date"}


class SteerError(ValueError):
    """The oracle's answer cannot be forced on vLLM (a reasoning text, an empty answer)."""


# -- forcing: pure ---------------------------------------------------------------------------------

def regex_escape(text: str) -> str:
    """``text`` as a regular expression that matches exactly it, in the syntax vLLM's structured
    output backends read: metacharacters escaped with a backslash, control characters as ``\\n``,
    ``\\t``, ``\\r`` or ``\\xHH`` (a raw newline in a pattern is not portable)."""
    out = []
    for ch in text:
        if ch in "\\^$.|?*+()[]{}/":
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\r":
            out.append("\\r")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return "".join(out)


def text_constraint(text: str) -> dict[str, Any]:
    """The ``structured_outputs`` value that allows exactly ``text``: a one-item choice for a single
    line, an escaped regex for anything with line breaks or control characters."""
    if not text:
        raise SteerError("an empty answer cannot be forced (a grammar needs at least one token)")
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in text):
        return {"regex": regex_escape(text)}
    return {"choice": [text]}


def _arguments(args: Any) -> dict[str, Any]:
    value = json.loads(args) if isinstance(args, str) else args
    if not isinstance(value, dict):
        raise SteerError(f"tool-call arguments must be a JSON object, got {value!r:.80}")
    return value


def _qwen3_coder_value(value: Any) -> str:
    # vLLM's qwen3_coder parser converts a parameter's text by the tool schema's type: a string is
    # taken as written, anything else is read as JSON.
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def render_tool_calls(calls: Sequence[tuple[str, Any]], syntax: str) -> str:
    """The model's own text for these calls, as the served chat template renders an assistant's
    calls and vLLM's ``--tool-call-parser`` of the same name reads them back."""
    blocks = []
    for name, args in calls:
        arguments = _arguments(args)
        if syntax == "qwen3_coder":
            params = "".join(f"<parameter={key}>\n{_qwen3_coder_value(value)}\n</parameter>\n"
                             for key, value in arguments.items())
            blocks.append(f"<tool_call>\n<function={name}>\n{params}</function>\n</tool_call>")
        elif syntax == "hermes":
            body = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
            blocks.append(f"<tool_call>\n{body}\n</tool_call>")
        else:
            raise SteerError(f"unknown tool-call syntax {syntax!r} (expected one of {', '.join(TOOL_CALL_SYNTAXES)})")
    return "\n".join(blocks)


@dataclass(frozen=True)
class Forced:
    """One forced answer: the exact text vLLM must generate and what its parsers must make of it."""

    text: str
    content: str | None  # the visible content expected back (None: none, a tool turn)
    calls: tuple[tuple[str, dict[str, Any]], ...] = ()
    structured_outputs: Mapping[str, Any] = field(default_factory=dict)
    faults: tuple[str, ...] = ()  # the answer faults that made this answer (the oracle's Reply.faults)


def force(content: str | None, tool_calls: Sequence[tuple[str, Any]], reasoning: str | None,
          syntax: str) -> Forced:
    """The forced answer for an oracle's reply (its content, tool calls and reasoning)."""
    if reasoning:
        raise SteerError("a reasoning text cannot be forced: the constraint applies only after reasoning ends")
    calls = tuple((str(name), _arguments(args)) for name, args in tool_calls)
    if calls:
        rendered = render_tool_calls(calls, syntax)
        text = f"{content}\n{rendered}" if content else rendered
        return Forced(text, content or None, calls, text_constraint(text))
    text = content or ""
    return Forced(text, text, (), text_constraint(text))


def steered_body(body: Mapping[str, Any], forced: Forced, *, strip_chat_template_kwargs: bool,
                 max_tokens: int | None) -> tuple[dict[str, Any], list[str]]:
    """The request vLLM gets, and what was changed (for the log): the constraint added, a
    ``response_format`` replaced by it, ``max_tokens`` raised to fit the answer, the caller's
    ``chat_template_kwargs`` stripped (as the router in front of the deployment does)."""
    out = dict(body)
    changes = ["structured_outputs " + next(iter(forced.structured_outputs))]
    if "response_format" in out:
        fmt = out.pop("response_format")
        kind = fmt.get("type") if isinstance(fmt, Mapping) else None
        changes.append(f"response_format {kind} replaced by structured_outputs (vLLM refuses both: HTTP 400)")
    out["structured_outputs"] = dict(forced.structured_outputs)
    if strip_chat_template_kwargs and "chat_template_kwargs" in out:
        changes.append(f"chat_template_kwargs {json.dumps(out.pop('chat_template_kwargs'))[:120]} stripped")
    if max_tokens is not None:
        key = "max_completion_tokens" if "max_completion_tokens" in out and "max_tokens" not in out else "max_tokens"
        changes.append(f"{key} {out.get(key)} raised to {max_tokens}")
        out[key] = max_tokens
    return out, changes


def tokens_needed(minimal_tokens: int) -> int:
    """The completion budget a forced answer of ``minimal_tokens`` needs on a random model."""
    return int(minimal_tokens * TOKENS_FACTOR) + TOKENS_MARGIN


def requested_max_tokens(body: Mapping[str, Any]) -> int | None:
    value = body.get("max_tokens", body.get("max_completion_tokens"))
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def kept_for_cut(asked: int | None, spent_tokens: int | None) -> int | None:
    """The caller's limit when the caller asked for a cut answer, else None.

    The reference server cuts an answer longer than the caller's ``max_tokens`` and says ``length``;
    the proxy follows it where the caller shows it wants the cut: the limit is below what vLLM spent
    on this same request's forced answer earlier in the run under the caller's own, larger limit
    (``spent_tokens``: temperature 0 spells it the same way again; the integrity module asks a tool
    call whole, then halves its tokens to cut it). With nothing spent yet a short limit is a budget,
    not a cut: no tokenizer tells which (a 16-token media budget fits the oracle's answer in the
    reference server's tokens, not in a BPE's), so it is raised as a random model's spelling needs
    (:func:`raised_max_tokens`)."""
    return asked if asked is not None and spent_tokens is not None and asked < spent_tokens else None


def raised_max_tokens(asked: int | None, need: int, room: int) -> int | None:
    """A raised ``max_tokens`` when the caller's (``asked``, None: vLLM's default, the whole
    ``room`` left in the window) may be short of ``need`` for a random model's spelling of an answer
    that fits it, else None; never past the window (vLLM refuses a prompt plus max_tokens over it)."""
    if asked is not None and asked >= need:
        return None
    if asked is None:
        return None if room <= need else need
    return min(need, room) if min(need, room) > asked else None


def request_key(body: Mapping[str, Any]) -> str:
    """The key under which the tokens vLLM spent on a request's forced answer are kept: the same
    request (``request_key.py``) whatever its token limit."""
    return same_request(body, without_limit=True)


# -- what vLLM returned: pure ----------------------------------------------------------------------

@dataclass
class Observed:
    """The answer as vLLM returned it, assembled from one response or from a stream's deltas."""

    content: str | None = None
    calls: list[list[str]] = field(default_factory=list)  # [name, arguments JSON text]
    reasoning: str | None = None
    finish_reason: str | None = None
    completion_tokens: int | None = None

    @classmethod
    def from_response(cls, payload: Mapping[str, Any]) -> "Observed":
        choice = (payload.get("choices") or [{}])[0]
        message = choice.get("message") or {}
        calls = [[str((c.get("function") or {}).get("name")), str((c.get("function") or {}).get("arguments") or "")]
                 for c in message.get("tool_calls") or []]
        return cls(message.get("content"), calls, message.get("reasoning_content") or message.get("reasoning"),
                   choice.get("finish_reason"), (payload.get("usage") or {}).get("completion_tokens"))


class StreamReader:
    """Reads a server-sent-event stream as it passes through, without changing a byte."""

    def __init__(self) -> None:
        self._buffer = b""
        self.observed = Observed()

    def feed(self, data: bytes) -> None:
        self._buffer += data
        while True:
            cut = self._buffer.find(b"\n\n")
            if cut < 0:
                return
            event, self._buffer = self._buffer[:cut], self._buffer[cut + 2:]
            for line in event.split(b"\n"):
                if line.startswith(b"data:"):
                    self._data(line[5:].strip())

    def _data(self, raw: bytes) -> None:
        if raw == b"[DONE]":
            return
        try:
            chunk = json.loads(raw)
        except ValueError:
            return
        obs = self.observed
        usage = chunk.get("usage") or {}
        if usage.get("completion_tokens") is not None:
            obs.completion_tokens = usage["completion_tokens"]
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("content"):
                obs.content = (obs.content or "") + delta["content"]
            thought = delta.get("reasoning_content") or delta.get("reasoning")
            if thought:
                obs.reasoning = (obs.reasoning or "") + thought
            for call in delta.get("tool_calls") or []:
                index = call.get("index", 0)
                while len(obs.calls) <= index:
                    obs.calls.append(["", ""])
                function = call.get("function") or {}
                obs.calls[index][0] += function.get("name") or ""
                obs.calls[index][1] += function.get("arguments") or ""
            if choice.get("finish_reason"):
                obs.finish_reason = choice["finish_reason"]


def held(forced: Forced, observed: Observed) -> str | None:
    """Whether vLLM's answer is exactly the forced one: None if so, else what differs."""
    if observed.reasoning:
        return f"reasoning {observed.reasoning[:80]!r} returned beside the forced answer"
    if forced.calls:
        got = []
        for name, args in observed.calls:
            try:
                got.append((name, json.loads(args)))
            except ValueError:
                got.append((name, args))
        if got != [tuple(c) for c in forced.calls]:
            return f"tool calls {got!r:.300} instead of the forced {list(forced.calls)!r:.300}"
        if (observed.content or "").strip() != (forced.content or "").strip():
            return f"content {observed.content!r:.120} beside the forced tool calls"
        if observed.finish_reason != "tool_calls":
            return f"finish_reason {observed.finish_reason!r} after the forced tool calls (expected 'tool_calls')"
        return None
    if observed.calls:
        return f"tool calls {observed.calls!r:.200} instead of the forced text"
    if observed.content != forced.content:
        return f"content {observed.content!r:.160} instead of the forced {forced.content!r:.160}"
    if observed.finish_reason != "stop":
        return f"finish_reason {observed.finish_reason!r} after the forced text (expected 'stop')"
    return None


def _arguments_prefix(text: str, forced: Mapping[str, Any]) -> bool:
    """Whether a cut call's arguments are the start of the forced ones: a prefix of their JSON text, or
    a JSON object (a parser closes what it had) holding the forced parameters in order, every value
    whole but the last, which may be a string cut short."""
    if json.dumps(dict(forced), ensure_ascii=False).startswith(text) or json.dumps(dict(forced)).startswith(text):
        return True
    try:
        got = json.loads(text)
    except ValueError:
        return False
    if not isinstance(got, dict) or list(got) != list(forced)[:len(got)]:
        return False
    items = list(got.items())
    if any(forced[k] != v for k, v in items[:-1]):
        return False
    if not items:
        return True
    last, value = items[-1]
    whole = forced[last]
    return value == whole or (isinstance(value, str) and isinstance(whole, str) and whole.startswith(value))


def held_cut(forced: Forced, observed: Observed, max_tokens: int) -> str | None:
    """Whether a cut answer is the forced one cut by the caller's ``max_tokens``: None if so, else
    what differs.

    The generated text must be a start of the forced text (content, or the calls so far: whole ones
    equal, the one in progress with its arguments so far) and the limit must have ended it: finish
    ``length``, or the whole limit spent (``completion_tokens`` = ``max_tokens``) with another finish
    reason, which is then the engine's own report of a cut, for the plugin to judge (vLLM labels a
    non-streamed cut call ``tool_calls``). A ``stop`` means the answer ended before the limit: not
    the forced text."""
    if observed.reasoning:
        return f"reasoning {observed.reasoning[:80]!r} returned beside the forced answer"
    content = observed.content or ""
    if observed.calls:
        names = [name for name, _ in forced.calls]
        if len(observed.calls) > len(forced.calls) or [n for n, _ in observed.calls] != names[:len(observed.calls)]:
            return f"tool calls {observed.calls!r:.300} are not the start of the forced {list(forced.calls)!r:.300}"
        for i, (_, args) in enumerate(observed.calls):
            whole = forced.calls[i][1]
            last = i == len(observed.calls) - 1
            try:
                same = json.loads(args) == whole
            except ValueError:
                same = False
            if not same and not (last and _arguments_prefix(args, whole)):
                return f"tool call {i} arguments {args!r:.200} are not the start of the forced {whole!r:.200}"
        if not (forced.content or "").strip().startswith(content.strip()):
            return f"content {observed.content!r:.120} beside the cut tool calls"
    elif not forced.text.startswith(content):
        return f"content {observed.content!r:.160} is not the start of the forced {forced.text!r:.160}"
    if observed.finish_reason == "length":
        return None
    if observed.finish_reason != "stop" and observed.completion_tokens == max_tokens:
        return None
    return (f"finish_reason {observed.finish_reason!r} with {observed.completion_tokens} completion tokens after "
            f"the forced answer's start, cut by max_tokens {max_tokens} (expected 'length', or the whole limit spent)")


@dataclass(frozen=True)
class SteerRecord:
    """One chat request through the proxy, as one line of ``steer.jsonl``."""

    seq: int
    status: int
    stream: bool
    forced: bool  # a constraint was sent
    held: bool | None  # the forced answer came back exactly (None: nothing forced or refused)
    reason: str = ""  # why nothing was forced, or what differed
    changes: tuple[str, ...] = ()
    forced_text: str | None = None
    prompt: str = ""  # the start of the last user message, to find the item
    faults: tuple[str, ...] = ()  # the answer faults that changed the forced answer (oracle Reply.faults)
    # The caller's max_tokens, kept below the forced answer (kept_for_cut): held means a start of the
    # forced text came back cut by it (held_cut); ``finish`` is how vLLM ended that answer.
    cut: int | None = None
    finish: str | None = None

    @property
    def breaks_steering(self) -> bool:
        """A 200 answer that is not the oracle's: the plugin graded a random model's text."""
        return self.status == 200 and self.held is not True and not self.reason.startswith(PASSTHROUGH)


PASSTHROUGH = "passed through:"


def incomplete_reasons(log_path: Path, faults: Sequence[str] = ()) -> list[str]:
    """The run-level reasons a steered run is INCOMPLETE: every answered request whose forced answer
    did not come back (or that could not be forced), a steering that forced nothing at all, and a
    lane-keyed answer fault (``faults``: the run's fault switches, ``NAME[=ARG]``) that changed no
    forced answer: a fault that never engaged cannot show that the plugin catches it."""
    if not log_path.is_file():
        return [f"steering: no log {log_path.name}: the steering proxy recorded no request"]
    from pytest_qualify.reference.oracle_context import LANE_FAULTS

    records = [SteerRecord(**{**row, "changes": tuple(row.get("changes") or ()),
                              "faults": tuple(row.get("faults") or ())})
               for row in map(json.loads, log_path.read_text(encoding="utf-8").splitlines()) if row]
    reasons = [f"steering: request {r.seq} ({'stream' if r.stream else 'no stream'}, prompt {r.prompt!r:.60}): "
               f"{'forced answer did not hold: ' if r.forced else 'not forced: '}{r.reason}"
               for r in records if r.breaks_steering]
    if not any(r.forced and r.held for r in records):
        reasons.append(f"steering: no forced answer came back from vLLM in {len(records)} chat requests")
    engaged = {name for r in records if r.held for name in r.faults}
    for spec in faults:
        name = spec.partition("=")[0]
        if name in LANE_FAULTS and name not in engaged:
            reasons.append(f"steering: fault {spec} never changed a forced answer (no context prompt of its lane "
                           f"reached vLLM, or none was counted in that lane): the run cannot show it is caught")
    return reasons


# -- the proxy ---------------------------------------------------------------------------------------

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
        # No kept-alive connections: after a 5xx vLLM's server closes the connection without saying
        # so, and the next request sent on it would be reset (docs/real-vllm.md, media facts).
        self.http = httpx.Client(base_url=config.upstream, timeout=httpx.Timeout(config.timeout_s, connect=10.0),
                                 limits=httpx.Limits(max_keepalive_connections=0))
        self.lock = threading.Lock()
        self.seq = 0
        self.window: int | None = None
        # request_key -> (forced text, completion tokens vLLM spent on it under the caller's own limit)
        self.spent: dict[str, tuple[str, int]] = {}

    def count(self, payload: Mapping[str, Any]) -> int | None:
        """vLLM's ``/tokenize`` count of ``payload`` (a prompt, or messages and tools), asked with the
        caller's credentials, or None when vLLM refuses it."""
        response = self.http.post("/tokenize", json=payload, headers=self.headers)
        return int(response.json()["count"]) if response.status_code == 200 else None

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

    def _forward(self, method: str, raw: bytes, reader: StreamReader | None) -> tuple[int, bytes]:
        """Send the request to vLLM and its answer back unchanged; return status and body (a stream's
        body is passed on as it arrives and fed to ``reader``)."""
        st = self.state
        request = st.http.build_request(method, self.path, content=raw or None, headers=self._headers_out())
        response = st.http.send(request, stream=True)
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
                for data in response.iter_raw():
                    self.wfile.write(data)
                    self.wfile.flush()
                    if reader is not None:
                        reader.feed(data)
                self.close_connection = True
                return response.status_code, body
            body = response.read()
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
        if isinstance(plan, str):  # nothing to force: the caller's bytes as they came
            status, body = self._forward("POST", raw, None)
            stream = b'"stream": true' in raw or b'"stream":true' in raw
            st.log(SteerRecord(seq, status, stream, False, None, plan, prompt=_prompt(raw)))
            return
        body, forced, changes, cut, key = plan
        stream = bool(body.get("stream"))
        reader = StreamReader() if stream else None
        status, answer = self._forward("POST", json.dumps(body).encode(), reader)
        reason, ok, observed = "", None, None
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
        st.log(SteerRecord(seq, status, stream, True, ok, reason, tuple(changes), forced.text,
                           prompt=_prompt(raw), faults=forced.faults, cut=cut,
                           finish=observed.finish_reason if observed is not None and cut is not None else None))

    def _plan(self, raw: bytes) -> tuple[dict[str, Any], Forced, list[str], int | None, str] | str:
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
            return f"{PASSTHROUGH} the reference server would refuse it: {exc}"
        if any(key in body for key in ("structured_outputs", "guided_json", "guided_regex", "guided_choice")):
            return f"{PASSTHROUGH} the caller sent its own structured-output constraint"
        if body.get("ignore_eos") is True:
            return f"{PASSTHROUGH} it asks for a fixed length (ignore_eos): the load module's decode probe, whose text is never graded"
        if body.get("tool_choice") not in (None, "auto", "none"):
            return f"{PASSTHROUGH} tool_choice {body.get('tool_choice')!r} is vLLM's own constraint"
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
            return f"the oracle refused it: HTTP {rej.status} {rej.message}"
        except Exception as exc:  # noqa: BLE001 - any oracle failure leaves this answer unforced, and logged
            return f"the oracle could not answer it: {type(exc).__name__}: {exc}"
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
        from pytest_qualify.reference.oracle import ChatRequest

        return " ".join(ChatRequest(json.loads(raw)).last_user_text().split())[:120]
    except Exception:  # noqa: BLE001 - only a label for the log
        return ""


def check_faults(names: Sequence[str]) -> None:
    bad = sorted(set(names) & UNSTEERABLE_FAULTS)
    if bad:
        raise SteerError(f"fault(s) {', '.join(bad)} cannot be imposed on a real vLLM by steering; "
                         "only the oracles' answer faults can")


def serve_steer(host: str, port: int, config: SteerConfig, profile: Any, faults: Any) -> None:
    check_faults(list(faults.active))
    config.log_path.parent.mkdir(parents=True, exist_ok=True)
    config.log_path.touch()
    state = SteerState(config, profile, faults)
    handler = type("BoundSteerHandler", (SteerHandler,), {"state": state})
    httpd = ThreadingHTTPServer((host, port), handler)
    httpd.daemon_threads = True
    print(f"steering proxy: profile {profile.name}, forwarding to {config.upstream} on http://{host}:{port}; "
          f"tool-call syntax {config.tool_call_syntax}; chat_template_kwargs "
          f"{'stripped' if config.strip_chat_template_kwargs else 'kept'}; log {config.log_path}; "
          f"faults: {', '.join(sorted(faults.active)) or 'none'}", flush=True)
    try:
        httpd.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        httpd.server_close()
