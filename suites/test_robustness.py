"""Protocol module — robustness to hostile requests.

Per class of bad input (malformed JSON, wrong types, bad ``max_tokens``, bad roles, bad tools, bad
``response_format``, bad ``cache_salt``, oversized strings, bad media parts; see
``fixtures/robustness.toml``), hostile chat requests from the stored corpus (a seeded draw:
``tasks/hostile.py``), the profile's budget (``modules.robustness_examples`` per run) spread over
the classes. Each must be refused with a 4xx: never a 5xx, never a hang, never a dropped connection,
never an answer. Before the class, a valid control request must be answered (a server that refuses
everything would pass vacuously); after it, the server must still be serving
(:mod:`pytest_qualify.server.liveness`).

A prompt over the window is one property with the window bracket's over-window refusal: the
bracket proves it in every repetition, and ``test_over_window_refused`` relies on that proof (it
runs after the window module, and says which item proved it); where no proof is on the run's record
(the window module not run yet, or not selected) it sends one over-window prompt itself. It is never
PASS without a proof that held.

Every failing example is appended to ``robustness-failures.jsonl`` in the run's evidence directory
with the exact request body, so it can be replayed.

One repetition only (``qualify_repeat(1)``): the examples are derandomized, so a repetition would
send the same requests again and validation is deterministic; the budget is per run.
"""

from __future__ import annotations

import pytest

from pytest_qualify.tasks import hostile

from pytest_qualify.server import liveness
from pytest_qualify.tasks.robustness import (
    FAILURES_FILE, OVER_WINDOW_REFUSED, Outcome, Proof, proofs_of, record_failure, record_proof, send_hostile,
)
from pytest_qualify.checks import fail, held

pytestmark = [pytest.mark.qualify_module("robustness"), pytest.mark.qualify_repeat(1)]

# After this many timeouts in one class the server is hanging on it; the rest would only wait.
MAX_TIMEOUTS_PER_CLASS = 3


def _still_up(http) -> bool:  # type: ignore[no-untyped-def]
    import httpx

    try:
        http.get("/health", timeout=5.0)
    except httpx.TransportError:
        return False
    return True


def _answered(client, messages, profile, what: str, kind: str) -> None:  # type: ignore[no-untyped-def]
    from pytest_qualify.client.errors import EndpointError, error_message

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
    target = hostile.RequestTarget(profile.deployment.served_name, profile.limits.window_tokens)
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
        outcome = send_hostile(qualify_http, example, profile.timeouts.for_prompt(example.prompt_tokens_estimate))
        if outcome.problem is None:
            return
        failures.append((example, outcome, record_failure(qualify_run.run_dir, request.node.nodeid, example, outcome)))
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
    held(kind, f"{sent} hostile requests refused with a 4xx, then still serving")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    # Where the run's stage has the window module, the over-window item holds its answer: marked so,
    # it runs after the window module (and under xdist is handed out last) and finds the proof made.
    # Elsewhere it is not marked (a read marker would drop it with the window module) and proves it itself.
    if "over_window_proof" in metafunc.fixturenames:
        from pytest_qualify.hooks import state_of
        from pytest_qualify.hooks.stage import stage_of

        state = state_of(metafunc.config)
        by_window = state is not None and state.stage_run is not None and stage_of(state).stage.selects("window", None)
        param = (pytest.param("window", marks=pytest.mark.qualify_reads("window")) if by_window
                 else pytest.param("own"))
        metafunc.parametrize("over_window_proof", [param])


def test_over_window_refused(over_window_proof, qualify_client, qualify_http, qualify_profile, qualify_run,
                             qualify_record, request):
    profile = qualify_profile
    proofs = proofs_of(qualify_run.run_dir, OVER_WINDOW_REFUSED)
    if proofs:
        # The window bracket sent its over-window prompt already: one giant prompt proves it.
        qualify_record.props(over_window_proof=proofs[0].nodeid, over_window_proofs=len(proofs), hostile_requests=0,
                             hostile_failures=0)
        failed = [p for p in proofs if not p.held]
        if failed:
            fail("oversized", f"relied on {failed[0].nodeid}, where it did not hold: {failed[0].detail}")
        held("oversized", f"relied on {proofs[0].nodeid}: {proofs[0].detail}")
        return
    target = hostile.RequestTarget(profile.deployment.served_name, profile.limits.window_tokens)
    example = hostile.over_window(target)
    outcome = send_hostile(qualify_http, example, profile.timeouts.for_prompt(example.prompt_tokens_estimate))
    qualify_record.props(over_window_proof=request.node.nodeid, hostile_requests=1, over_window_status=outcome.status)
    problem = outcome.problem
    if problem is None:
        live = liveness.check(qualify_client, profile, after="the over-window prompt")
        qualify_record.props(**live.properties())
        problem = None if live.ok else live.reason
    else:
        record_failure(qualify_run.run_dir, request.node.nodeid, example, outcome)
    qualify_record.props(hostile_failures=int(problem is not None))
    detail = f"{example.note}: HTTP {outcome.status}" + (f"; {problem}" if problem else ", then still serving")
    record_proof(qualify_run.run_dir, Proof(OVER_WINDOW_REFUSED, request.node.nodeid, problem is None, detail))
    if problem is not None:
        fail("oversized", f"{example.note}: {problem}")
    held("oversized", detail)
