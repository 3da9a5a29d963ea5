"""Fault switches of the reference server: ``NAME`` or ``NAME=ARG``.

Server-wide faults are listed here; each oracle module lists its own: in ``FAULTS`` those that
change what its answers say (text, tool calls), in ``SERVED_FAULTS`` those that change how an
answer is served (its finish, an empty or reasoning answer, its usage, its HTTP status, a stream's
shape). Where a fault is declared is its steerability (:attr:`FaultSpec.steerable`): the steering
proxy forces an oracle's answer text on a real vLLM, so only an oracle's ``FAULTS`` can be imposed
there; every other fault would silently change nothing. An unknown fault name is an error, so a
typo cannot make a fault test pass vacuously.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from pytest_qualify.reference.fault_log import EngagementLog

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
    # The serving facts and the recipe's claims (reference/serving.py applies them).
    "kv_pool_shrink": "[=X]: the KV pool is X of its size (default 0.5): fewer KV tokens and less concurrency at "
                      "the window, in the SIMULATED start-up facts and /metrics",
    "slow_startup": "[=S]: the server waits S seconds (default 5) before it listens; its SIMULATED weight load "
                    "took S seconds longer",
    "slow_decode": "[=X]: decode runs X times slower (default 1.25: a fifth fewer tokens a second)",
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


# The protocol modules that can see a fault: a run that leaves all of them out cannot engage it,
# so the fault would change nothing and a PASS with it on would prove nothing. Oracle faults are
# seen by the module their oracle answers (``oracle_<name>.py``, the module of that name unless
# listed here); server-wide faults not listed touch every answer.
ORACLE_SEEN_BY = {"media": ("multimodal", "media_admission")}
SEEN_BY = {
    "overwindow_500": ("window",),
    "overwindow_accept": ("window",),
    "hostile_500": ("robustness",),
    "ignore_cache_salt": ("context", "integrity"),
    "timed_answer_differs": ("integrity",),
    "cut_call_tool_calls": ("integrity",),
    "stream_tool_delta_bare": ("integrity", "tools"),
    "stream_tool_index": ("integrity", "tools"),
}
# "=N: the N-th ... of each lane / conversation": counted per repetition, so N above --repeat never comes.
PER_REPETITION = {"fail_repetition": 2, "recall_fail_repetition": 2}


@dataclass(frozen=True)
class FaultSpec:
    name: str
    arg_kind: str | None  # N, S, LANE, ITEM_ID, CLASS, V (from the description's "=X:"); None: no argument
    seen_by: tuple[str, ...] | None  # None: every module
    # The steering proxy can impose it on a real vLLM: an oracle's answer fault (its ``FAULTS``),
    # which changes the answer text the proxy forces.
    steerable: bool = False


def fault_specs() -> dict[str, FaultSpec]:
    """Every fault switch with the kind of its argument and the modules that can see it."""
    from pytest_qualify.reference.oracle import oracle_modules

    owners: dict[str, tuple[str, ...] | None] = {name: SEEN_BY.get(name) for name in SERVER_FAULTS}
    described = dict(SERVER_FAULTS)
    steerable: set[str] = set()
    for mod in oracle_modules():
        short = mod.__name__.rsplit(".", 1)[-1].removeprefix("oracle_")
        answer_faults = getattr(mod, "FAULTS", {})
        steerable.update(answer_faults)
        for name, text in {**answer_faults, **getattr(mod, "SERVED_FAULTS", {})}.items():
            owners[name] = SEEN_BY.get(name) or ORACLE_SEEN_BY.get(short, (short,))
            described[name] = text
    specs = {}
    for name, text in described.items():
        # "=KIND: ..." takes an argument; "[=KIND]: ..." may take one (the load faults' level).
        if text.startswith("="):
            kind = text[1:].split(":", 1)[0]
        elif text.startswith("[="):
            kind = text[2:].split("]", 1)[0]
        else:
            kind = None
        specs[name] = FaultSpec(name, kind, owners.get(name), name in steerable)
    return specs


# Faults that engage at a concurrency (N: a request that finds N-1 others in flight): N is held to
# the profile's highest [load] level, the most requests its load module ever has in flight.
AT_CONCURRENCY = ("load_500_at", "load_drop_at")


def check_for_run(
    specs: Iterable[str], *, modules: Iterable[str], lanes: Iterable[str], repeat: int, where: str,
    default_lane: str | None = None, load_levels: Sequence[int] = (),
) -> None:
    """Every fault named, with an argument it takes, that can engage with this run: its module
    runs (``modules``: the profile's and the stage's), its lane or corpus item exists, its count
    comes within ``repeat``, its concurrency within the profile's highest load level
    (``load_levels``). Raises :class:`FaultError` naming the first that cannot.

    A count of the server's chat requests (``die_after``, ``hang_after``, ``drop_connection``,
    ``answer_swap_after``, ``engine_swap_after``) is not held here: how many chat requests a run
    makes is known only as it runs (retries, the load module's levels, the integrity samples, a
    stop). The server's own record holds it instead (fault_log.py): a fault that never engaged leaves
    the run INCOMPLETE, naming it."""
    known = fault_specs()
    run_modules, run_lanes = tuple(modules), tuple(lanes)
    for text in specs:
        name, has_arg, arg = text.partition("=")
        spec = known.get(name)
        label = f"{where} {text}"
        if spec is None:
            raise FaultError(f"{label}: unknown fault {name!r}; known: {', '.join(sorted(known))}")
        if spec.seen_by is not None and not set(spec.seen_by) & set(run_modules):
            raise FaultError(f"{label}: cannot engage: only module(s) {', '.join(spec.seen_by)} see it, and this "
                             f"run's profile and stage run {', '.join(run_modules) or 'none'}")
        if spec.arg_kind is None:
            if has_arg:
                raise FaultError(f"{label}: fault {name!r} takes no argument")
            continue
        _check_arg(label, name, spec.arg_kind, arg if has_arg else None, run_lanes, repeat, default_lane)
        if name in AT_CONCURRENCY and has_arg:
            top = max(load_levels, default=0)
            if int(arg) > top:
                raise FaultError(f"{label}: cannot engage: no request ever finds {int(arg) - 1} others in flight, "
                                 f"since the profile's highest load level is {top} ([load] levels "
                                 f"{', '.join(map(str, load_levels)) or 'none'})")


def _check_arg(label: str, name: str, kind: str, arg: str | None, lanes: tuple[str, ...], repeat: int,
               default_lane: str | None) -> None:
    if kind == "LANE":
        lane = arg if arg is not None else default_lane
        if lane not in lanes:
            said = f"no context lane {lane!r}" if arg is not None else f"its default lane {lane!r} is not"
            raise FaultError(f"{label}: cannot engage: {said} in this run (its lanes: {', '.join(lanes) or 'none'})")
        return
    if kind == "ITEM_ID":
        from pytest_qualify.tasks.corpus import load_manifest

        ids = [item.id for item in load_manifest().items]
        if arg not in ids:
            raise FaultError(f"{label}: cannot engage: {arg!r} is not a corpus item "
                             f"(items: {', '.join(ids[:6])}, ...)" if arg else f"{label}: needs =ITEM_ID, a corpus item")
        return
    if kind == "CLASS":
        from pytest_qualify.reference.validation import HOSTILE_CLASSES

        if arg not in HOSTILE_CLASSES:
            raise FaultError(f"{label}: expected one of {', '.join(HOSTILE_CLASSES)}")
        return
    if kind == "V":
        if not (arg or "").strip():
            raise FaultError(f"{label}: needs =VERSION, the engine version to report")
        return
    if arg is None:
        default = PER_REPETITION.get(name)
        if name in PER_REPETITION and default is not None and default > repeat:
            raise FaultError(f"{label}: cannot engage: its default N is {default}, and --repeat is {repeat}")
        return
    if kind == "N":
        try:
            n = int(arg)
        except ValueError:
            raise FaultError(f"{label}: expected a whole number, got {arg!r}") from None
        least = 1 if name in PER_REPETITION or name == "drop_connection" else 0
        if n < least:
            raise FaultError(f"{label}: expected a count of at least {least}, got {n}")
        if name in PER_REPETITION and n > repeat:
            raise FaultError(f"{label}: cannot engage: it counts per repetition and --repeat is {repeat}")
        return
    if kind == "X":
        import math

        try:
            factor = float(arg)
        except ValueError:
            raise FaultError(f"{label}: expected a factor, got {arg!r}") from None
        if not math.isfinite(factor) or factor <= 0 or (name == "kv_pool_shrink" and factor >= 1):
            raise FaultError(f"{label}: expected a factor above 0{' and below 1' if name == 'kv_pool_shrink' else ''}, "
                             f"got {arg!r}")
        return
    if kind == "S":
        import math

        try:
            seconds = float(arg)
        except ValueError:
            raise FaultError(f"{label}: expected seconds, got {arg!r}") from None
        if not math.isfinite(seconds) or seconds <= 0:
            raise FaultError(f"{label}: expected a number of seconds above 0, got {arg!r}")


def what_it_breaks(description: str, arg: str = "") -> str:
    """A switch's description for an operator, its argument in place of its kind: "=N: the process
    exits after N chat requests" with ``100`` is "the process exits after 100 chat requests"."""
    if not description.startswith(("=", "[=")):
        return description
    kind, text = description.lstrip("[=").split(":", 1)
    kind, text = kind.rstrip("]"), text.strip()
    if not arg:
        return text

    def value(match: re.Match[str]) -> str:
        if not match.group(1):
            return arg
        # "the Nth chat request": an ordinal of the count
        last2 = arg[-2:]
        suffix = "th" if last2 in ("11", "12", "13") else {"1": "st", "2": "nd", "3": "rd"}.get(arg[-1:], "th")
        return arg + suffix

    return re.sub(rf"\b{re.escape(kind)}(th)?\b", value, text)


@dataclass(frozen=True)
class Faults:
    active: dict[str, str] = field(default_factory=dict)
    # Which of them engaged, and when (fault_log.py): every place that applies one calls engage().
    log: EngagementLog = field(default_factory=EngagementLog, compare=False, repr=False)

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
        armed = {name: (f"{name}={arg}" if arg else name, what_it_breaks(known[name], arg)) for name, arg in active.items()}
        return cls(active, EngagementLog(armed))

    def engage(self, name: str) -> bool:
        """Record that the armed fault ``name`` changed what the server did just now (its first time
        is kept: when, and after how many chat requests). True, so it reads inside a condition."""
        if name in self.active:
            self.log.engaged(name)
        return True

    def __contains__(self, name: str) -> bool:
        return name in self.active

    def arg(self, name: str, default: str = "") -> str:
        return self.active.get(name, default) or default

    def number(self, name: str, default: float) -> float:
        try:
            return float(self.active.get(name) or default)
        except ValueError:
            return default
