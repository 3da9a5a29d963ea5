"""Protocol module — robustness to hostile requests.

Per class of bad input (malformed JSON, wrong types, bad ``max_tokens``, bad roles, bad tools, bad
``response_format``, bad ``cache_salt``, oversized strings, bad media parts; see
``fixtures/robustness.toml``), hypothesis generates hostile chat requests with a fixed seed, the
profile's budget (``modules.robustness_examples`` per run) spread over the classes. Each must be
refused with a 4xx: never a 5xx, never a hang, never a dropped connection, never an answer. Before
the class, a valid control request must be answered (a server that refuses everything would pass
vacuously); after it, the server must still be serving (:mod:`pytest_qualify.liveness`).

Every failing example is appended to ``robustness-failures.jsonl`` in the run's evidence directory
with the exact request body, so it can be replayed.

One repetition only (``qualify_repeat(1)``): the examples are derandomized, so a repetition would
send the same requests again and validation is deterministic; the budget is per run.
"""

from __future__ import annotations

import fcntl
import json
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from pytest_qualify import hostile, liveness
from pytest_qualify.checks import fail

pytestmark = [pytest.mark.qualify_module("robustness"), pytest.mark.qualify_repeat(1)]

FAILURES_FILE = "robustness-failures.jsonl"
# 4xx answers that mean the request was never judged: they cannot count as a refusal.
NOT_A_JUDGEMENT = {401: "unauthorized", 403: "forbidden", 407: "proxy authentication", 429: "rate limited"}
# After this many timeouts in one class the server is hanging on it; the rest would only wait.
MAX_TIMEOUTS_PER_CLASS = 3


@dataclass(frozen=True)
class Outcome:
    status: int | None
    response: str
    elapsed_s: float
    problem: str | None  # None: refused with a 4xx, as it must be
    connection_lost: bool = False
    timed_out: bool = False


def _send(http, example: hostile.Hostile, timeout_s: float) -> Outcome:  # type: ignore[no-untyped-def]
    import httpx

    t0 = time.perf_counter()
    try:
        resp = http.post(hostile.CHAT_PATH, content=example.body, headers={"Content-Type": "application/json"},
                         timeout=timeout_s)
    except httpx.TimeoutException:
        elapsed = time.perf_counter() - t0
        return Outcome(None, "", elapsed, f"no answer after {elapsed:.1f} s (limit {timeout_s:.1f} s)", timed_out=True)
    except httpx.TransportError as exc:
        elapsed = time.perf_counter() - t0
        return Outcome(None, "", elapsed, f"connection lost without an answer ({type(exc).__name__}: {exc})",
                       connection_lost=True)
    elapsed = time.perf_counter() - t0
    status, text = resp.status_code, resp.text[:500]
    if status in NOT_A_JUDGEMENT:
        problem = f"HTTP {status} ({NOT_A_JUDGEMENT[status]}): the request was not judged"
    elif 400 <= status < 500:
        problem = None
    elif status >= 500:
        problem = f"HTTP {status} instead of a 4xx refusal"
    else:
        problem = f"HTTP {status}: answered instead of refused"
    return Outcome(status, text, elapsed, problem)


def _record(run_dir: Path, nodeid: str, example: hostile.Hostile, outcome: Outcome) -> int:
    """Append one failing example; returns its line number in the file (1-based)."""
    line = json.dumps({
        "test": nodeid, "class": example.kind, "what": example.note, "problem": outcome.problem,
        "status": outcome.status, "response": outcome.response, "elapsed_s": round(outcome.elapsed_s, 3),
        "request": example.replay(),
    }, ensure_ascii=False)
    path = run_dir / FAILURES_FILE
    with open(path, "a+", encoding="utf-8") as fh:
        # xdist workers share the evidence directory: one writer at a time, whole lines.
        fcntl.flock(fh, fcntl.LOCK_EX)
        fh.seek(0)
        number = sum(1 for _ in fh) + 1
        fh.write(line + "\n")
        fh.flush()
        fcntl.flock(fh, fcntl.LOCK_UN)
    return number


def _still_up(http) -> bool:  # type: ignore[no-untyped-def]
    import httpx

    try:
        http.get("/health", timeout=5.0)
    except httpx.TransportError:
        return False
    return True


def _answered(client, messages, profile, what: str, kind: str) -> None:  # type: ignore[no-untyped-def]
    from pytest_qualify.client import EndpointError, error_message

    try:
        answer = client.chat(messages, max_tokens=profile.limits.answer_tokens, temperature=0)
    except EndpointError as exc:
        fail(kind, f"{what} was refused with HTTP {exc.status}: {error_message(exc.body)[:200]!r}")
    if not (answer.content or "").strip():
        fail(kind, f"{what} got no visible answer (finish_reason {answer.finish_reason!r})")


@pytest.mark.parametrize("kind", hostile.classes())
def test_hostile_requests_refused(kind, qualify_client, qualify_http, qualify_profile, qualify_run, qualify_record,
                                  request):
    profile = qualify_profile
    target = hostile.Target(profile.deployment.served_name, profile.limits.window_tokens)
    control = [{"role": "user", "content": hostile.data()["base"]["prompts"][0]}]
    _answered(qualify_client, control, profile, "the valid control request before the hostile ones", kind)

    count = hostile.examples_per_class(profile.robustness_examples, len(hostile.classes()))
    failures: list[tuple[hostile.Hostile, Outcome, int]] = []
    timeouts = 0
    lost = False

    def send(example: hostile.Hostile) -> None:
        nonlocal timeouts, lost
        if lost or timeouts >= MAX_TIMEOUTS_PER_CLASS:
            return
        outcome = _send(qualify_http, example, profile.timeouts.for_prompt(example.prompt_tokens_estimate))
        if outcome.problem is None:
            return
        failures.append((example, outcome, _record(qualify_run.run_dir, request.node.nodeid, example, outcome)))
        timeouts += outcome.timed_out
        # A dropped connection with the server still up is one failure; with it gone, stop.
        lost = lost or (outcome.connection_lost and not _still_up(qualify_http))

    sent = hostile.collect(kind, target, count, send)
    qualify_record.props(hostile_class=kind, hostile_requests=sent, hostile_failures=len(failures))

    # A server that died on a hostile request fails here, with its exit code and log tail.
    live = liveness.check(qualify_client, profile, after=f"{sent} hostile requests")
    qualify_record.props(**live.properties())
    if not live.ok:
        fail(kind, live.reason)

    if failures:
        example, outcome, line = failures[0]
        stopped = " (stopped early: the server hangs on this class)" if timeouts >= MAX_TIMEOUTS_PER_CLASS else ""
        fail(kind, f"{len(failures)} of {sent} hostile requests were not refused with a 4xx{stopped}; "
                   f"first: {example.note}: {outcome.problem}; request body: {example.preview()}; "
                   f"replay: {qualify_run.run_dir / FAILURES_FILE} line {line}")
