"""Visible answer / finish state: the finish module's plain prompts (``fixtures/finish.toml``)
answered with their ground truth; the faults end them wrongly."""

from __future__ import annotations

import tomllib
from functools import cache
from importlib import resources

from pytest_qualify.reference.oracle import ChatRequest, OracleContext, Reply

PRIORITY = 60
FAULTS = {
    "finish_length": "answers to the finish module's prompts end with finish_reason 'length'",
    "empty_answer": "answers to the finish module's prompts have no visible content",
}


@cache
def prompts() -> dict[str, str]:
    text = resources.files("pytest_qualify.fixtures").joinpath("finish.toml").read_text(encoding="utf-8")
    return {p["text"].strip(): p["answer"] for p in tomllib.loads(text)["prompt"]}


def answer(req: ChatRequest, ctx: OracleContext) -> Reply | None:
    truth = prompts().get(req.last_user_text().strip())
    if truth is None:
        return None
    if "empty_answer" in ctx.faults:
        return Reply(content="")
    if "finish_length" in ctx.faults:
        return Reply(content=truth, finish_reason="length")
    return Reply(content=truth)
