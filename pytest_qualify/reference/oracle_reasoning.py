"""Reasoning: the reasoning module's prompts (``fixtures/reasoning.toml``) and the thinking switch.

``finalize`` decides for every answer whether reasoning is returned: when the profile enables
thinking, or when a caller's ``chat_template_kwargs.enable_thinking`` is honoured (the profile says
it is overridable, or the ``thinking_overridable`` or ``thinking_override_blank`` fault is on).
Reasoning goes to its own field, as vLLM's reasoning parser does; the leak faults break that on the
reasoning module's prompts. ``thinking_override_blank`` honours the caller as vLLM 0.26.0 does with
a random-weight model (docs/real-vllm.md): the reasoning field fills with whitespace until the
answer budget is spent, and no visible answer comes.
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
    "leak_reasoning_unmarked": "with thinking enabled, answers to the reasoning prompts return no reasoning field and "
                               "carry the reasoning as plain prose before the answer in the content, its think tags "
                               "stripped (a parser that stripped or missed them: vLLM #46042)",
    "leak_reasoning_one_line": "with thinking enabled, answers to the reasoning prompts return no reasoning field and "
                               "carry the reasoning as one sentence of plain prose on the answer's own line, its think "
                               "tags stripped (the one-line form of leak_reasoning_unmarked)",
    "thinking_override_blank": "a caller's chat_template_kwargs enable_thinking=true is honoured although the profile "
                               "forbids it, as vLLM 0.26.0 honours it on a random-weight model: the reasoning field "
                               "fills with whitespace until the answer budget is spent (finish 'length', no visible answer)",
}
HONOURING_FAULTS = ("thinking_overridable", "thinking_override_blank")
REASONING_TEXT = "The user asks a short question. I recall the fact and answer it briefly."
# The reasoning as a thinking model writes it, once its markers are gone (leak_reasoning_unmarked).
UNMARKED_WORKING = "Okay, the user wants a short answer. Let me think step by step.\n" + REASONING_TEXT
# The same on one line before the answer's last line (leak_reasoning_one_line): no line stands
# outside the slot, only the words tell the working apart.
ONE_LINE_WORKING = "Okay, the user wants a short answer, so I recall the fact and answer it briefly."


@cache
def prompts() -> dict[str, str]:
    return {p.prompt.strip(): p.answer for p in reasoning_prompts()}


def answer(req: ChatRequest, ctx: OracleContext) -> Reply | None:
    truth = prompts().get(req.last_user_text().strip())
    return None if truth is None else Reply(content=truth)


def thinking_on(req: ChatRequest, ctx: OracleContext) -> bool:
    thinking = ctx.profile.thinking
    kwargs = req.body.get("chat_template_kwargs") or {}
    if "enable_thinking" in kwargs and (thinking.overridable or any(f in ctx.faults for f in HONOURING_FAULTS)):
        if not thinking.overridable and bool(kwargs["enable_thinking"]) != thinking.enabled:
            for name in HONOURING_FAULTS:
                ctx.faults.engage(name)  # the caller's override took effect where the profile forbids it
        return bool(kwargs["enable_thinking"])
    return thinking.enabled


def _blank_override(req: ChatRequest, ctx: OracleContext) -> bool:
    """The caller's enable_thinking=true, honoured by the whitespace fault alone."""
    kwargs = req.body.get("chat_template_kwargs") or {}
    thinking = ctx.profile.thinking
    return ("thinking_override_blank" in ctx.faults and bool(kwargs.get("enable_thinking"))
            and not thinking.enabled and not thinking.overridable)


def finalize(req: ChatRequest, reply: Reply, ctx: OracleContext) -> Reply:
    if _blank_override(req, ctx):
        ctx.faults.engage("thinking_override_blank")
        budget = int(req.body.get("max_tokens") or req.body.get("max_completion_tokens") or 256)
        return Reply(content=None, reasoning="\n" * budget, finish_reason="length",
                     faults=(*reply.faults, "thinking_override_blank"))
    if thinking_on(req, ctx) and not reply.reasoning:
        reply = dataclasses.replace(reply, reasoning=REASONING_TEXT)
    if "leak_reasoning_unmarked" in ctx.faults and thinking_on(req, ctx) and req.last_user_text().strip() in prompts():
        ctx.faults.engage("leak_reasoning_unmarked")
        reply = dataclasses.replace(reply, reasoning=None, content=f"{UNMARKED_WORKING}\n\n{reply.content or ''}")
    if "leak_reasoning_one_line" in ctx.faults and thinking_on(req, ctx) and req.last_user_text().strip() in prompts():
        ctx.faults.engage("leak_reasoning_one_line")
        last = (reply.content or "").strip().splitlines()[-1] if (reply.content or "").strip() else ""
        reply = dataclasses.replace(reply, reasoning=None, content=f"{ONE_LINE_WORKING} {last}")
    if req.last_user_text().strip() in prompts():
        if "leak_reasoning" in ctx.faults:
            ctx.faults.engage("leak_reasoning")
            reply = dataclasses.replace(reply, reasoning=REASONING_TEXT)
        if "leak_think_tag" in ctx.faults:
            ctx.faults.engage("leak_think_tag")
            reply = dataclasses.replace(reply, content=f"<think>\n{REASONING_TEXT}\n</think>\n\n{reply.content or ''}")
    return reply
