"""Short factual questions from ``fixtures/smoke.toml``, answered from their ground truth in the
question's contract (the prompt sent is the question followed by the contract's instruction)."""

from __future__ import annotations

from functools import cache

from pytest_qualify.tasks.fixture_data import smoke_questions
from pytest_qualify.reference.oracle import ChatRequest, OracleContext, Reply

PRIORITY = 900  # a fallback: specific task oracles go first
SERVED_FAULTS = {"smoke_empty": "short factual answers come back empty"}


@cache
def questions() -> dict[str, str]:
    return {q.prompt: q.answer for q in smoke_questions()}


def answer(req: ChatRequest, ctx: OracleContext) -> Reply | None:
    truth = questions().get(req.last_user_text().strip())
    if truth is None:
        return None
    return Reply(content="" if "smoke_empty" in ctx.faults and ctx.faults.engage("smoke_empty") else truth)
