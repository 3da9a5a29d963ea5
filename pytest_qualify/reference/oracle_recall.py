"""Session recall from ``fixtures/recall/``: the conversation is known by its first user turn and
its closing question (with its contract); the answer is the conversation's ground truth as the JSON
object the contract asks for, in a layout that varies by conversation (bare, indented, fenced after
a preamble line) so the grader is shown to read any of them."""

from __future__ import annotations

import json

from pytest_qualify.tasks.fixture_data import recall_fixtures
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
        if users[0].strip() == conv.turns[0][0] and users[-1].strip() == conv.prompt.strip():
            return conv
    return None


def answer(req: ChatRequest, ctx: OracleContext) -> Reply | None:
    conv = _conversation(req)
    if conv is None:
        return None
    occurrence = ctx.occurrence(f"recall:{conv.id}")
    if "recall_fail_repetition" in ctx.faults and occurrence == int(ctx.faults.number("recall_fail_repetition", 2)):
        ctx.faults.engage("recall_fail_repetition")
        return Reply(content="Sorry, I don't have those details any more.")
    near = dict(conv.near_misses) if "recall_near_miss" in ctx.faults else {}
    if near and any(name in near and near[name] != truth for name, truth in conv.truth.items()):
        ctx.faults.engage("recall_near_miss")
    value = {name: near.get(name, truth) for name, truth in conv.truth.items()}
    index = [c.id for c in recall_fixtures().conversations].index(conv.id)
    if index % 3 == 1:
        return Reply(content=json.dumps(dict(reversed(list(value.items()))), indent=2))
    if index % 3 == 2:
        return Reply(content="Here are the details you gave me:\n```json\n" + json.dumps(value) + "\n```")
    return Reply(content=json.dumps(value))
