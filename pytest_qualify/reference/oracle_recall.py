"""Session recall from ``fixtures/recall/``: the conversation is known by its first user turn and
its closing question; the answer states the early facts from ground truth."""

from __future__ import annotations

from pytest_qualify.fixture_data import recall_fixtures
from pytest_qualify.graders.recall import Conversation
from pytest_qualify.reference.oracle import ChatRequest, OracleContext, Reply

FAULTS = {
    "recall_near_miss": "recall answers state the near-miss fact from a distractor turn",
    "recall_fail_repetition": "=N: the Nth recall request of each conversation forgets the facts",
}


def _conversation(req: ChatRequest) -> Conversation | None:
    users = req.texts("user")
    if len(users) < 2:
        return None
    for conv in recall_fixtures().conversations:
        if users[0].strip() == conv.turns[0][0] and users[-1].strip() == conv.question:
            return conv
    return None


def answer(req: ChatRequest, ctx: OracleContext) -> Reply | None:
    conv = _conversation(req)
    if conv is None:
        return None
    occurrence = ctx.occurrence(f"recall:{conv.id}")
    if "recall_fail_repetition" in ctx.faults and occurrence == int(ctx.faults.number("recall_fail_repetition", 2)):
        return Reply(content="Sorry, I don't have those details any more.")
    near = {f.name: f.value for f in conv.near_misses} if "recall_near_miss" in ctx.faults else {}
    return Reply(content="; ".join(f"{f.name.capitalize()}: {near.get(f.name, f.value)}" for f in conv.facts) + ".")
