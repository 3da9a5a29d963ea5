"""Protocol module — robustness to hostile requests.

Per class of bad input (malformed JSON, wrong types, bad ``max_tokens``, bad roles, bad tools, bad
``response_format``, bad ``cache_salt``, oversized strings, bad media parts; see
``fixtures/robustness.toml``), hypothesis generates hostile chat requests with a fixed seed, the
profile's budget (``modules.robustness_examples`` per run) spread over the classes. Each must be
refused with a 4xx: never a 5xx, never a hang, never a dropped connection, never an answer. Before
the class, a valid control request must be answered (a server that refuses everything would pass
vacuously); after it, the server must still be serving (:mod:`pytest_qualify.server.liveness`).

Every failing example is appended to ``robustness-failures.jsonl`` in the run's evidence directory
with the exact request body, so it can be replayed.

One repetition only (``qualify_repeat(1)``): the examples are derandomized, so a repetition would
send the same requests again and validation is deterministic; the budget is per run.
"""

from __future__ import annotations

import pytest

from pytest_qualify.tasks import hostile

from pytest_qualify.server import liveness
from pytest_qualify.tasks.robustness import FAILURES_FILE, Outcome, record_failure, send_hostile
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
