"""The one check that a server is still serving after it refused something (an over-window
prompt, over-limit or malformed media, hostile requests).

What it measures is liveness, as PROTOCOL.md defines "healthy after a refusal": ``GET /health``
answers 200 and a short question is answered — HTTP 200 within the profile's request timeout,
at most the answer budget of tokens, finished with a finish state the engine gives a completed
answer (``stop``, or ``length`` when the budget was spent). Whether the answer is *right* is
reported beside it (``liveness_answer_correct``: the answer graded under the question's contract,
``fixtures/smoke.toml``) and never decides it: a weak or random-weight
model's wrong answer says nothing about whether the server survived the refusal, and the modules
that grade answers (smoke, finish) grade them there. ``length`` counts as alive for the same
reason: the engine generated the whole budget; ``finish`` fails it on its own prompts.

No pytest, openai or httpx at import: the suites call :func:`check` and fail with its reason.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from pytest_qualify.graders.contract import Question

# Finish states of an answer the engine completed: the server is alive either way.
LIVE_FINISH_STATES = ("stop", "length")
MEASURES = "liveness"  # recorded with every result: what "healthy" meant here


@dataclass(frozen=True)
class Liveness:
    """One liveness check: ``ok`` and ``reason`` decide; the answer's correctness is reported only."""

    ok: bool
    reason: str
    health_status: int | None
    chat_status: int | None
    finish_reason: str | None
    elapsed_s: float
    answer_correct: bool | None  # None: no answer to judge
    answer_excerpt: str

    def properties(self) -> dict[str, Any]:
        """What the evidence records about the check (JUnit properties, summary.json)."""
        return {
            "liveness_measures": MEASURES,
            "liveness_ok": self.ok,
            "liveness_health_status": self.health_status,
            "liveness_chat_status": self.chat_status,
            "liveness_finish_reason": self.finish_reason,
            "liveness_s": round(self.elapsed_s, 3),
            "liveness_answer_correct": self.answer_correct,
            "liveness_answer": self.answer_excerpt,
        }


def default_question() -> Question:
    """The smoke module's first question: short, with a one-word answer under its contract."""
    from pytest_qualify.tasks.fixture_data import smoke_questions

    return smoke_questions()[0]


def check(client: Any, profile: Any, *, after: str, question: Question | None = None) -> Liveness:
    """``GET /health`` then one short chat request (``max_tokens`` = the profile's answer budget,
    the profile's request timeout). ``after`` names what came before, for the reason."""
    from pytest_qualify.client.errors import EndpointError, error_message, RequestTimeout, ServerGone
    q = question or default_question()
    t0 = time.perf_counter()

    def result(ok: bool, reason: str, health: int | None, chat: int | None = None, finish: str | None = None,
               correct: bool | None = None, excerpt: str = "") -> Liveness:
        return Liveness(ok, reason, health, chat, finish, time.perf_counter() - t0, correct, excerpt)

    try:
        health = client.health()
    except (ServerGone, RequestTimeout) as exc:
        return result(False, f"after {after}, GET /health failed: {exc}", None)
    if health != 200:
        return result(False, f"after {after}, GET /health answered HTTP {health}, expected 200", health)
    try:
        answer = client.chat([{"role": "user", "content": q.prompt}], max_tokens=profile.limits.answer_tokens,
                             temperature=0, timeout_s=profile.timeouts.request_s)
    except EndpointError as exc:
        return result(False, f"after {after}, a short request got HTTP {exc.status}: "
                             f"{error_message(exc.body)[:200]!r}", health, exc.status)
    except RequestTimeout as exc:
        return result(False, f"after {after}, a short request was not answered: {exc}", health)
    except ServerGone as exc:
        return result(False, f"after {after}, a short request lost the connection: {exc}", health)
    content = answer.content or ""
    correct = q.grade(content).ok
    excerpt = content[:120]
    if answer.finish_reason not in LIVE_FINISH_STATES:
        return result(False, f"after {after}, a short request ended with finish_reason {answer.finish_reason!r} "
                             f"(a completed answer ends with one of {', '.join(LIVE_FINISH_STATES)})",
                      health, 200, answer.finish_reason, correct, excerpt)
    return result(True, f"after {after}: /health 200 and a short request answered "
                        f"(finish {answer.finish_reason}, answer {'right' if correct else 'wrong'}; "
                        f"liveness only, the answer is not graded here)",
                  health, 200, answer.finish_reason, correct, excerpt)

