"""An answer as the graders read it: visible content, any reasoning field, tool calls, finish
reason, usage, its timeline and (streamed) the shape of its chunks. Nothing is stripped: stripping
reasoning before grading would hide a leak. Built from a plain response (``from_response``) or
from a stream's chunks (``StreamAssembly``). No I/O here."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pytest_qualify.client.timing import Timeline

REASONING_FIELDS = ("reasoning_content", "reasoning")


@dataclass(frozen=True)
class ToolCall:
    name: str
    # Exactly as the server sent it: the API's JSON text, or whatever came in its place (a JSON
    # object, null), kept so that the tools grader refuses it by name (graders/tools.py).
    arguments: Any
    id: str = ""

    def parsed_arguments(self) -> Any:
        if not isinstance(self.arguments, str):
            return self.arguments
        return json.loads(self.arguments) if self.arguments else {}


@dataclass(frozen=True)
class ToolDelta:
    """One ``delta.tool_calls`` entry as it came on the wire (for the delta rules of
    graders/integrity.py): which fields it carried, not only what they add up to."""

    index: int | None
    id: str | None
    type: str | None
    name: str | None
    arguments: Any  # a piece of JSON text by the API; anything else kept as it came


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
    # The output tokens each chunk with ``choices`` carried, in order, where the stream said so
    # (``stream_options.continuous_usage_stats``: vLLM's running usage on every chunk); empty otherwise.
    chunk_tokens: tuple[int, ...] = ()
    output_chunks: int = 0  # chunks whose delta carried content, reasoning or a tool call
    # Every output delta came in one chunk that carried the finish or came right before it: the
    # answer was not streamed as it was decoded (time to first token is then end to end).
    whole_at_finish: bool = False


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


def as_dict(obj: Any) -> dict[str, Any]:
    if obj is None:
        return {}
    if isinstance(obj, dict):
        return obj
    return obj.model_dump(exclude_none=False)


def reasoning_of(d: Mapping[str, Any]) -> str | None:
    parts = [d.get(name) for name in REASONING_FIELDS if d.get(name)]
    # A server in the middle of the rename may send both names with the same text: it is one reasoning.
    parts = [p for n, p in enumerate(parts) if p not in parts[:n]]
    return "".join(parts) if parts else None


def from_response(data: Mapping[str, Any], e2e_s: float) -> Answer:
    """A plain (not streamed) response's answer."""
    choice = (data.get("choices") or [{}])[0]
    msg = choice.get("message") or {}
    calls = tuple(
        ToolCall(c["function"]["name"], c["function"].get("arguments"), c.get("id") or "")
        for c in (msg.get("tool_calls") or [])
    )
    usage = data.get("usage") or {}
    details = usage.get("completion_tokens_details") or {}
    return Answer(
        content=msg.get("content"),
        reasoning=reasoning_of(msg),
        tool_calls=calls,
        finish_reason=choice.get("finish_reason"),
        usage=usage,
        streamed=False,
        timeline=Timeline.single(e2e_s),
        raw=data,
        reasoning_tokens=details.get("reasoning_tokens"),
    )


class StreamAssembly:
    """A streamed answer put together chunk by chunk. Each ``delta.tool_calls`` entry is kept once,
    as the :class:`ToolDelta` it came as; the calls are added up from those at the end."""

    def __init__(self, usage_asked: bool, continuous_usage: bool = False) -> None:
        self.usage_asked = usage_asked
        # Running usage on every chunk was asked for: a usage riding on a chunk with choices is
        # that chunk's token count, not the answer's usage chunk.
        self.continuous_usage = continuous_usage and usage_asked
        self.chunk_tokens: list[int] = []
        self._tokens_so_far = 0
        self._choice_chunks = 0
        self._output_at: list[int] = []  # indexes (among chunks with choices) of chunks with output
        self._finish_at: int | None = None
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.tool_deltas: list[ToolDelta] = []
        self.finish: str | None = None
        self.usage: dict[str, Any] = {}
        self.counts = {"content": 0, "finish": 0, "usage": 0, "after_finish": 0, "usage_early": 0}

    def add(self, data: Mapping[str, Any], timeline: Timeline) -> None:
        counts = self.counts
        choices = data.get("choices") or []
        visible = output = finished_here = False
        for choice in choices:
            delta = choice.get("delta") or {}
            if delta.get("content"):
                self.content.append(delta["content"])
                counts["content"] += 1
                visible = output = True
            r = reasoning_of(delta)
            if r:
                self.reasoning.append(r)
                output = True
            for tc in delta.get("tool_calls") or []:
                fn = tc.get("function") or {}
                self.tool_deltas.append(ToolDelta(tc.get("index"), tc.get("id"), tc.get("type"), fn.get("name"),
                                                  fn.get("arguments")))
                visible = output = True
            if choice.get("finish_reason"):
                self.finish = choice["finish_reason"]
                counts["finish"] += 1
                finished_here = True
        if output and counts["finish"] and not finished_here:
            counts["after_finish"] += 1  # the finish chunk said the answer was over
        if choices:
            if output:
                self._output_at.append(self._choice_chunks)
            if finished_here and self._finish_at is None:
                self._finish_at = self._choice_chunks
            self._choice_chunks += 1
        usage = data.get("usage")
        running = usage.get("completion_tokens") if isinstance(usage, Mapping) else None
        if choices and self.continuous_usage and isinstance(running, int):
            self.chunk_tokens.append(max(0, running - self._tokens_so_far))
            self._tokens_so_far = max(self._tokens_so_far, running)
            self.usage = usage
        elif usage:
            self.usage = usage
            counts["usage"] += 1
            if not counts["finish"]:
                counts["usage_early"] += 1
        timeline.chunk(has_choices=bool(choices), visible=visible)

    def calls(self) -> list[dict[str, Any]]:
        """The tool calls added up from their deltas, by index: name, arguments, id, and how many
        deltas carried the name."""
        slots: dict[Any, dict[str, Any]] = {}
        for d in self.tool_deltas:
            slot = slots.setdefault(0 if d.index is None else d.index, {"name": "", "arguments": "", "id": "", "names": 0})
            if d.name:
                slot["name"] += d.name
                slot["names"] += 1
            if isinstance(d.arguments, str) and isinstance(slot["arguments"], str):
                slot["arguments"] += d.arguments
            elif d.arguments is not None:
                slot["arguments"] = d.arguments  # a JSON value in place of text: kept as it came
            if d.id:
                slot["id"] = d.id
        return [slots[i] for i in sorted(slots)]

    def answer(self, timeline: Timeline, done: bool | None) -> Answer:
        counts = self.counts
        ordered = self.calls()
        details = self.usage.get("completion_tokens_details") or {}
        shape = StreamShape(
            chunks=len(timeline.chunk_s), content_deltas=counts["content"], finish_chunks=counts["finish"],
            usage_chunks=counts["usage"], usage_asked=self.usage_asked,
            tool_deltas=tuple(self.tool_deltas), output_after_finish=counts["after_finish"],
            usage_before_finish=counts["usage_early"], done=done,
            chunk_tokens=tuple(self.chunk_tokens) if len(self.chunk_tokens) == self._choice_chunks else (),
            output_chunks=len(self._output_at),
            whole_at_finish=(len(self._output_at) == 1 and self._finish_at is not None
                             and 0 <= self._finish_at - self._output_at[0] <= 1),
        )
        return Answer(
            content="".join(self.content) if self.content else None,
            reasoning="".join(self.reasoning) if self.reasoning else None,
            tool_calls=tuple(ToolCall(c["name"], c["arguments"], c["id"]) for c in ordered),
            finish_reason=self.finish,
            usage=self.usage,
            streamed=True,
            timeline=timeline,
            tool_name_deltas=tuple(c["names"] for c in ordered),
            reasoning_tokens=details.get("reasoning_tokens"),
            stream=shape,
        )
