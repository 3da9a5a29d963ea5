"""Steering, the observing (pure): the answer as vLLM returned it (one response, or a stream read
as it passes without changing a byte), and whether it is exactly the forced one, whole or cut by the
caller's limit. vLLM has no metric that shows a grammar was applied, so this check is the proof."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pytest_qualify.reference.steer_forcing import Forced


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
