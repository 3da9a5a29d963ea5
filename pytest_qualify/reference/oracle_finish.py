"""Visible answer / finish state: the plain prompts of ``fixtures/finish.toml`` answered with their
ground truth, in each prompt's contract. The faults end the finish module's prompts wrongly; the window bracket's follow-up
question (``follow_up``) is always answered normally."""

from __future__ import annotations

from functools import cache

from pytest_qualify.tasks.fixture_data import finish_prompts, window_follow_up
from pytest_qualify.reference.oracle import ChatRequest, OracleContext, Reply

PRIORITY = 60
FAULTS = {
    "finish_length": "answers to the finish module's prompts end with finish_reason 'length'",
    "empty_answer": "answers to the finish module's prompts have no visible content",
}


@cache
def prompts(section: str = "prompt") -> dict[str, str]:
    questions = (window_follow_up(),) if section == "follow_up" else finish_prompts()
    return {p.prompt.strip(): p.answer for p in questions}


def answer(req: ChatRequest, ctx: OracleContext) -> Reply | None:
    text = req.last_user_text().strip()
    follow_up = prompts("follow_up").get(text)
    if follow_up is not None:
        return Reply(content=follow_up)
    truth = prompts().get(text)
    if truth is None:
        return None
    if "empty_answer" in ctx.faults:
        return Reply(content="")
    if "finish_length" in ctx.faults:
        return Reply(content=truth, finish_reason="length")
    return Reply(content=truth)
