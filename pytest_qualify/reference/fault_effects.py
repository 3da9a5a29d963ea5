"""Every server-wide fault's effect on the reference server's answers, in one place.

``faults.py`` names the switches; this applies them, one method per point where a request meets
them (on arrival, at the window, on the oracle's reply, on the usage, along the stream). The
handler (``handler.py``) asks these methods and otherwise follows vLLM's normal path, so a
request without faults reads straight through it. Each method records a fault as engaged
(``Faults.engage``) where it changes what is served, and only there: a switch that met no request
it applies to must read as never engaged (fault_log.py). No HTTP here.
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
            f.engage("engine_swap_after")
            return normal.replace("reference", "reference-swapped") if "reference" in normal else f"{normal}.swapped"
        if "engine_version" in f:
            f.engage("engine_version")
        return f.arg("engine_version", normal)

    def health_fails(self) -> bool:
        return "health_500" in self.faults and self.faults.engage("health_500")

    def wrong_identity(self) -> bool:
        return "wrong_identity" in self.faults and self.faults.engage("wrong_identity")

    def answers_500(self, hostile_class: str | None) -> bool:
        """hostile_500: malformed input of this class gets HTTP 500 instead of its 4xx."""
        return (hostile_class is not None and hostile_class == self.faults.arg("hostile_500")
                and self.faults.engage("hostile_500"))

    # -- a chat request ------------------------------------------------------------------------------

    def arrival(self, n: int) -> Arrival:
        """Recorded as engaged before the effect: the process may end or hang on it."""
        f = self.faults
        return Arrival(
            exit="die_after" in f and n > f.number("die_after", 1) and f.engage("die_after"),
            hang="hang_after" in f and n > f.number("hang_after", 1) and f.engage("hang_after"),
            drop="drop_connection" in f and n == f.number("drop_connection", 1) and f.engage("drop_connection"),
            delay_s=f.number("slow", 1.0) if "slow" in f and f.engage("slow") else 0.0,
        )

    def over_window(self) -> str | None:
        """An over-window prompt: ``None`` (refused with vLLM's 400), ``"accept"`` or ``"500"``.
        Asked only of a prompt over the window."""
        if "overwindow_accept" in self.faults:
            self.faults.engage("overwindow_accept")
            return "accept"
        return "500" if "overwindow_500" in self.faults and self.faults.engage("overwindow_500") else None

    def reply(self, reply: oracle.Reply, n: int) -> oracle.Reply:
        """answer_swap_after (another model behind the route), pad_answer."""
        f = self.faults
        if "answer_swap_after" in f and n > f.number("answer_swap_after", 1) and reply.content:
            f.engage("answer_swap_after")
            reply = dataclasses.replace(reply, content=reply.content.upper())
        if "pad_answer" in f and reply.content:
            f.engage("pad_answer")
            reply = dataclasses.replace(reply, content=reply.content + " " * 1000)
        return reply

    def result_cache(self) -> bool:
        return "result_cache" in self.faults

    def cached_result(self, results: dict[str, tuple[Any, ...]], key: str) -> tuple[Any, ...] | None:
        """result_cache: the answer kept for the same request (any cache_salt), served at once."""
        if "result_cache" not in self.faults:
            return None
        found = results.get(key)
        if found is not None:
            self.faults.engage("result_cache")
        return found

    def finish(self, finish: str, calls: list[tuple[str, str]], stream: bool) -> str:
        """cut_call_tool_calls: a streamed call cut by the budget ends ``tool_calls``."""
        if finish == "length" and calls and stream and "cut_call_tool_calls" in self.faults:
            self.faults.engage("cut_call_tool_calls")
            return "tool_calls"
        return finish

    def usage(self, usage: dict[str, Any], stream: bool) -> dict[str, Any]:
        """stream_usage_off: a streamed answer counts one token more."""
        if stream and "stream_usage_off" in self.faults:
            self.faults.engage("stream_usage_off")
            return {**usage, "completion_tokens": usage["completion_tokens"] + 1}
        return usage

    def stream_latency_s(self) -> float:
        """latency: the first token comes late (and the decode is as slow again). Asked of streamed answers only."""
        return self.faults.number("latency", 1.0) if "latency" in self.faults and self.faults.engage("latency") else 0.0

    # -- along a stream ------------------------------------------------------------------------------

    def content_pieces(self, pieces: list[str], content: str, has_calls: bool) -> tuple[list[str], list[dict[str, Any]]]:
        """The content deltas and the deltas held back until after the finish chunk:
        stream_char_deltas, stream_drops_tail, stream_after_finish."""
        f = self.faults
        if "stream_char_deltas" in f:
            chars = list(content)
            if chars != pieces:
                f.engage("stream_char_deltas")
            pieces = chars
        if "stream_drops_tail" in f and pieces:
            f.engage("stream_drops_tail")
            pieces = [x for x in pieces[:-1] + [pieces[-1][:-1]] if x]
        late: list[dict[str, Any]] = []
        if "stream_after_finish" in f and pieces and not has_calls:
            f.engage("stream_after_finish")
            late.append({"content": pieces.pop()})
        return pieces, late

    def stall_s(self) -> float | None:
        """stream_stall: silence after the stream's first content or tool-call chunk (asked there)."""
        f = self.faults
        return f.number("stream_stall", 3600.0) if "stream_stall" in f and f.engage("stream_stall") else None

    def first_tool_delta(self, i: int, call_id: str, name: str) -> dict[str, Any]:
        """stream_tool_delta_bare: the first delta without id and type."""
        if "stream_tool_delta_bare" in self.faults:
            self.faults.engage("stream_tool_delta_bare")
            return {"index": i, "function": {"name": name, "arguments": ""}}
        return {"index": i, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}

    def name_repeated(self) -> bool:
        # declared in oracle_tools.SERVED_FAULTS; asked of each streamed call
        f = self.faults
        return "tool_name_repeated_in_stream" in f and f.engage("tool_name_repeated_in_stream")

    def tool_index(self, i: int, has_arguments: bool = True) -> int:
        """stream_tool_index: argument deltas carry the next call's index (engaged where one is sent)."""
        if "stream_tool_index" in self.faults:
            if has_arguments:
                self.faults.engage("stream_tool_index")
            return i + 1
        return i

    def late_argument(self, arg_pieces: list[str], last_call: bool) -> str | None:
        """stream_after_finish: the last call's last argument piece, held back (taken off the list)."""
        if "stream_after_finish" in self.faults and last_call and len(arg_pieces) > 1:
            self.faults.engage("stream_after_finish")
            return arg_pieces.pop()
        return None

    def finish_chunks(self) -> int:
        """stream_two_finish (asked of streamed answers only: each then sends its finish twice)."""
        return 2 if "stream_two_finish" in self.faults and self.faults.engage("stream_two_finish") else 1

    def sends_usage(self, asked: bool) -> bool:
        """stream_usage_missing, stream_usage_unasked."""
        f = self.faults
        if asked:
            return not ("stream_usage_missing" in f and f.engage("stream_usage_missing"))
        return "stream_usage_unasked" in f and f.engage("stream_usage_unasked")

    def sends_done(self) -> bool:
        return not ("stream_no_done" in self.faults and self.faults.engage("stream_no_done"))
