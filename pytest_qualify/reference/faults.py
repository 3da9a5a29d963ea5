"""Fault switches of the reference server: ``NAME`` or ``NAME=ARG``.

Server-wide faults are listed here; each oracle module lists its own in ``FAULTS``. An unknown
fault name is an error, so a typo cannot make a fault test pass vacuously.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

SERVER_FAULTS = {
    "wrong_identity": "/v1/models reports another root and max_model_len",
    "overwindow_500": "an over-window prompt gets HTTP 500 instead of 400",
    "overwindow_accept": "an over-window prompt is answered instead of refused",
    "die_after": "=N: the process exits after N chat requests",
    "hang_after": "=N: chat requests after the first N never answer",
    "slow": "=S: every chat request takes S more seconds",
    "latency": "=S: a streamed answer's first token comes S seconds late and its decode takes S seconds more "
               "(TTFT, end to end and decode tok/s all worse; answers unchanged: only latency SLOs can fail)",
    "ignore_cache_salt": "the prefix cache ignores cache_salt",
    "health_500": "/health answers 500",
    "hostile_500": "=CLASS: malformed input of this class (validation.HOSTILE_CLASSES) gets HTTP 500, not 400",
    "drop_connection": "=N: the Nth chat request's connection is closed without an answer; the server lives on",
    "engine_version": "=V: /version reports V (another engine build behind the route)",
    "engine_swap_after": "=N: after N chat requests /version reports another engine build (a restart mid-run)",
    # The integrity module's rules (graders/integrity.py), each broken on request.
    "stream_drops_tail": "a streamed answer loses its last content piece (streamed and plain answers differ)",
    "stream_usage_off": "a streamed answer's usage.completion_tokens is one more than the plain answer's",
    "stream_two_finish": "a streamed answer carries its finish_reason in two chunks",
    "stream_usage_unasked": "a streamed answer sends a usage chunk although stream_options did not ask for it",
    "stream_usage_missing": "a streamed answer sends no usage chunk although include_usage asked for it",
    "stream_char_deltas": "a streamed answer sends its content one character per delta (more deltas than tokens)",
    "stream_tool_delta_bare": "a streamed tool call's first delta lacks id and type (vLLM #18412, #16340)",
    "stream_tool_index": "a streamed tool call's argument deltas carry the next call's index",
    "cut_call_tool_calls": "a streamed tool call cut by max_tokens ends 'tool_calls' instead of 'length' (vLLM #53269)",
    "stream_stall": "=S: a streamed answer goes silent for S seconds after its first content or tool-call chunk",
    "result_cache": "a repeated request (same body, any cache_salt) is answered at once from a response cache",
    "answer_swap_after": "=N: after N chat requests another model answers behind the route (visible content changes)",
    "pad_answer": "visible answers are padded with 1,000 trailing spaces",
    "stream_after_finish": "a streamed answer's last content or argument piece comes after its finish chunk "
                           "(a parser that flushes its buffer late)",
    "stream_no_done": "a streamed answer ends without 'data: [DONE]' (a proxy that closes the stream early)",
    "timed_answer_differs": "a context-lane prompt asked without streaming gets a near miss of the value its "
                            "streamed (timed, graded) answer gives: the timing phase answers otherwise than the "
                            "functional one",
    # The load module's rules (suites/test_load.py); scheduler.py and oracle_load.py apply them.
    "load_wrong_concurrent": "an answer served while another request is in flight (queued or running) is wrong: "
                             "right alone, wrong under concurrency",
    "load_500_at": "[=N]: a chat request that finds N-1 or more others in flight gets HTTP 500 (N: the "
                   "profile's highest load level)",
    "load_drop_at": "[=N]: a chat request that finds N-1 or more others in flight has its connection closed "
                    "without an answer (N: the profile's highest load level)",
    "load_batch_variance": "an answer served while another request is in flight comes out in other tokens its "
                           "grader still accepts (greedy output that is not batch-invariant)",
}


class FaultError(ValueError):
    pass


@dataclass(frozen=True)
class Faults:
    active: dict[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, specs: Iterable[str]) -> "Faults":
        from pytest_qualify.reference.oracle import known_faults

        known = {**SERVER_FAULTS, **known_faults()}
        active = {}
        for spec in specs:
            name, _, arg = spec.partition("=")
            if name not in known:
                raise FaultError(f"unknown fault {name!r}; known: {', '.join(sorted(known))}")
            if name == "hostile_500":
                from pytest_qualify.reference.validation import HOSTILE_CLASSES

                if arg not in HOSTILE_CLASSES:
                    raise FaultError(f"hostile_500={arg}: expected one of {', '.join(HOSTILE_CLASSES)}")
            active[name] = arg
        return cls(active)

    def __contains__(self, name: str) -> bool:
        return name in self.active

    def arg(self, name: str, default: str = "") -> str:
        return self.active.get(name, default) or default

    def number(self, name: str, default: float) -> float:
        try:
            return float(self.active.get(name) or default)
        except ValueError:
            return default
