"""Visible answer / finish state: the plain prompts of ``fixtures/finish.toml`` answered with their
ground truth, in each prompt's contract. The faults end the finish module's prompts wrongly (the
liveness question after a refusal is the smoke module's, answered by its own oracle)."""

from __future__ import annotations

from functools import cache

from pytest_qualify.tasks.fixture_data import finish_prompts
from pytest_qualify.reference.oracle import ChatRequest, OracleContext, Reply

PRIORITY = 60
SERVED_FAULTS = {
    "finish_length": "answers to the finish module's prompts end with finish_reason 'length'",
    "empty_answer": "answers to the finish module's prompts have no visible content",
}


@cache
def prompts() -> dict[str, str]:
    return {p.prompt.strip(): p.answer for p in finish_prompts()}


def answer(req: ChatRequest, ctx: OracleContext) -> Reply | None:
    text = req.last_user_text().strip()
    truth = prompts().get(text)
    if truth is None:
        return None
    if "empty_answer" in ctx.faults:
        ctx.faults.engage("empty_answer")
        return Reply(content="")
    if "finish_length" in ctx.faults:
        ctx.faults.engage("finish_length")
        return Reply(content=truth, finish_reason="length")
    return Reply(content=truth)
