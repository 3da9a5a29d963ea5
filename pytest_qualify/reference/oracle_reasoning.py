"""Reasoning: the reasoning module's prompts (``fixtures/reasoning.toml``) and the thinking switch.

``finalize`` decides for every answer whether reasoning is returned: when the profile enables
thinking, or when a caller's ``chat_template_kwargs.enable_thinking`` is honoured (the profile says
it is overridable, or the ``thinking_overridable`` fault is on). Reasoning goes to its own field,
as vLLM's reasoning parser does; the leak faults break that on the reasoning module's prompts.
"""

from __future__ import annotations

import dataclasses
from functools import cache

from pytest_qualify.tasks.fixture_data import reasoning_prompts
from pytest_qualify.reference.oracle import ChatRequest, OracleContext, Reply

PRIORITY = 60
SERVED_FAULTS = {
    "leak_reasoning": "answers to the reasoning prompts carry reasoning_content although thinking is disabled",
    "leak_think_tag": "answers to the reasoning prompts start with <think>...</think> in the content",
    "thinking_overridable": "a caller's chat_template_kwargs enable_thinking is honoured although the profile forbids it",
}
REASONING_TEXT = "The user asks a short question. I recall the fact and answer it briefly."


@cache
def prompts() -> dict[str, str]:
    return {p.prompt.strip(): p.answer for p in reasoning_prompts()}


def answer(req: ChatRequest, ctx: OracleContext) -> Reply | None:
    truth = prompts().get(req.last_user_text().strip())
    return None if truth is None else Reply(content=truth)


def thinking_on(req: ChatRequest, ctx: OracleContext) -> bool:
    thinking = ctx.profile.thinking
    kwargs = req.body.get("chat_template_kwargs") or {}
    if "enable_thinking" in kwargs and (thinking.overridable or "thinking_overridable" in ctx.faults):
        return bool(kwargs["enable_thinking"])
    return thinking.enabled


def finalize(req: ChatRequest, reply: Reply, ctx: OracleContext) -> Reply:
    if thinking_on(req, ctx) and not reply.reasoning:
        reply = dataclasses.replace(reply, reasoning=REASONING_TEXT)
    if req.last_user_text().strip() in prompts():
        if "leak_reasoning" in ctx.faults:
            reply = dataclasses.replace(reply, reasoning=REASONING_TEXT)
        if "leak_think_tag" in ctx.faults:
            reply = dataclasses.replace(reply, content=f"<think>\n{REASONING_TEXT}\n</think>\n\n{reply.content or ''}")
    return reply
