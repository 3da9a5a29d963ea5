"""Every server-wide fault's effect on the reference server's answers, in one place.

``faults.py`` names the switches; this applies them, one method per point where a request meets
them (on arrival, at the window, on the oracle's reply, on the usage, along the stream). The
handler (``handler.py``) asks these methods and otherwise follows vLLM's normal path, so a
request without faults reads straight through it. No HTTP here.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from pytest_qualify.reference import oracle
from pytest_qualify.reference.faults import Faults


@dataclasses.dataclass(frozen=True)
class Arrival:
    """What the faults do to chat request number ``n`` before it is read."""

    exit: bool = False  # die_after: the process exits
    hang: bool = False  # hang_after: the request never answers
    drop: bool = False  # drop_connection: the connection closes without an answer
    delay_s: float = 0.0  # slow


class FaultEffects:
    def __init__(self, faults: Faults) -> None:
        self.faults = faults

    def __contains__(self, name: str) -> bool:
        return name in self.faults

    # -- the server's identity and health --------------------------------------------------------

    def version(self, normal: str, chat_requests: int) -> str:
        f = self.faults
        if "engine_swap_after" in f and chat_requests >= f.number("engine_swap_after", 1):
            return normal.replace("reference", "reference-swapped") if "reference" in normal else f"{normal}.swapped"
        return f.arg("engine_version", normal)

    def health_fails(self) -> bool:
        return "health_500" in self.faults

    def wrong_identity(self) -> bool:
        return "wrong_identity" in self.faults

    def answers_500(self, hostile_class: str | None) -> bool:
        """hostile_500: malformed input of this class gets HTTP 500 instead of its 4xx."""
        return hostile_class is not None and hostile_class == self.faults.arg("hostile_500")

    # -- a chat request ------------------------------------------------------------------------------

    def arrival(self, n: int) -> Arrival:
        f = self.faults
        return Arrival(
            exit="die_after" in f and n > f.number("die_after", 1),
            hang="hang_after" in f and n > f.number("hang_after", 1),
            drop="drop_connection" in f and n == f.number("drop_connection", 1),
            delay_s=f.number("slow", 1.0) if "slow" in f else 0.0,
        )

    def over_window(self) -> str | None:
        """An over-window prompt: ``None`` (refused with vLLM's 400), ``"accept"`` or ``"500"``."""
        if "overwindow_accept" in self.faults:
            return "accept"
        return "500" if "overwindow_500" in self.faults else None

    def reply(self, reply: oracle.Reply, n: int) -> oracle.Reply:
        """answer_swap_after (another model behind the route), pad_answer."""
        f = self.faults
        if "answer_swap_after" in f and n > f.number("answer_swap_after", 1) and reply.content:
            reply = dataclasses.replace(reply, content=reply.content.upper())
        if "pad_answer" in f and reply.content:
            reply = dataclasses.replace(reply, content=reply.content + " " * 1000)
        return reply

    def result_cache(self) -> bool:
        return "result_cache" in self.faults

    def finish(self, finish: str, calls: list[tuple[str, str]], stream: bool) -> str:
        """cut_call_tool_calls: a streamed call cut by the budget ends ``tool_calls``."""
        if finish == "length" and calls and stream and "cut_call_tool_calls" in self.faults:
            return "tool_calls"
        return finish

    def usage(self, usage: dict[str, Any], stream: bool) -> dict[str, Any]:
        """stream_usage_off: a streamed answer counts one token more."""
        if stream and "stream_usage_off" in self.faults:
            return {**usage, "completion_tokens": usage["completion_tokens"] + 1}
        return usage

    def stream_latency_s(self) -> float:
        """latency: the first token comes late (and the decode is as slow again)."""
        return self.faults.number("latency", 1.0) if "latency" in self.faults else 0.0

    # -- along a stream ------------------------------------------------------------------------------

    def content_pieces(self, pieces: list[str], content: str, has_calls: bool) -> tuple[list[str], list[dict[str, Any]]]:
        """The content deltas and the deltas held back until after the finish chunk:
        stream_char_deltas, stream_drops_tail, stream_after_finish."""
        f = self.faults
        if "stream_char_deltas" in f:
            pieces = list(content)
        if "stream_drops_tail" in f and pieces:
            pieces = [x for x in pieces[:-1] + [pieces[-1][:-1]] if x]
        late: list[dict[str, Any]] = []
        if "stream_after_finish" in f and pieces and not has_calls:
            late.append({"content": pieces.pop()})
        return pieces, late

    def stall_s(self) -> float | None:
        """stream_stall: silence after the stream's first content or tool-call chunk."""
        return self.faults.number("stream_stall", 3600.0) if "stream_stall" in self.faults else None

    def first_tool_delta(self, i: int, call_id: str, name: str) -> dict[str, Any]:
        """stream_tool_delta_bare: the first delta without id and type."""
        if "stream_tool_delta_bare" in self.faults:
            return {"index": i, "function": {"name": name, "arguments": ""}}
        return {"index": i, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}

    def name_repeated(self) -> bool:
        return "tool_name_repeated_in_stream" in self.faults  # declared in oracle_tools.SERVED_FAULTS

    def tool_index(self, i: int) -> int:
        """stream_tool_index: argument deltas carry the next call's index."""
        return i + 1 if "stream_tool_index" in self.faults else i

    def late_argument(self, arg_pieces: list[str], last_call: bool) -> str | None:
        """stream_after_finish: the last call's last argument piece, held back (taken off the list)."""
        if "stream_after_finish" in self.faults and last_call and len(arg_pieces) > 1:
            return arg_pieces.pop()
        return None

    def finish_chunks(self) -> int:
        return 2 if "stream_two_finish" in self.faults else 1

    def sends_usage(self, asked: bool) -> bool:
        """stream_usage_missing, stream_usage_unasked."""
        if asked:
            return "stream_usage_missing" not in self.faults
        return "stream_usage_unasked" in self.faults

    def sends_done(self) -> bool:
        return "stream_no_done" not in self.faults
