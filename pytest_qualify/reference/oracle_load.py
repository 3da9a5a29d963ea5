"""vLLM's length controls and the load module's answer faults, applied to every answer.

``ignore_eos`` (generate until ``max_tokens``) and ``min_tokens`` (no end of sequence before that
many tokens) are vLLM's extra sampling parameters: the load module's decode probe asks for exactly
N tokens with both, so its decode figures are measured on N tokens, not on however long an answer
happened to be. Here the answer is continued (counting on, as the probe asks) and the server's
budget cut ends it at ``max_tokens`` with finish ``length``, as vLLM does.

The answer faults read this request's seat in the scheduler (scheduler.py): whether it met another
request in flight, i.e. was served under concurrency.
"""

from __future__ import annotations

import dataclasses
import json

from pytest_qualify.reference import tokenizer
from pytest_qualify.reference.oracle import ChatRequest, OracleContext, Reply
from pytest_qualify.reference.scheduler import current_seat

PRIORITY = 990  # finalize after the other oracles' own changes


def _continued(content: str, tokens: int) -> str:
    """``content`` continued by counting on until it holds more than ``tokens`` tokens."""
    have = tokenizer.count(content)
    more = " ".join(str(i) for i in range(1, max(0, tokens - have) + 2))
    return f"{content}\n{more}" if content else more


def _variant(content: str) -> str:
    """The same answer in other tokens, which its grader still accepts: a JSON value laid out
    otherwise, a reply in bold (markdown emphasis is formatting noise to every contract)."""
    try:
        return json.dumps(json.loads(content), indent=2)
    except ValueError:
        return f"**{content.strip()}**" if "\n" not in content.strip() else content + "\n"


def finalize(req: ChatRequest, reply: Reply, ctx: OracleContext) -> Reply:
    seat = current_seat()
    if seat is not None and seat.shared:
        if "load_wrong_concurrent" in ctx.faults and (reply.content or reply.tool_calls):
            ctx.faults.engage("load_wrong_concurrent")
            reply = dataclasses.replace(reply, content="I do not know.", tool_calls=[], finish_reason=None,
                                        faults=(*reply.faults, "load_wrong_concurrent"))
        elif "load_batch_variance" in ctx.faults and reply.content:
            ctx.faults.engage("load_batch_variance")
            reply = dataclasses.replace(reply, content=_variant(reply.content),
                                        faults=(*reply.faults, "load_batch_variance"))
    body = req.body
    max_tokens = body.get("max_tokens") or body.get("max_completion_tokens")
    floor = body.get("min_tokens") or 0
    if isinstance(max_tokens, int) and (body.get("ignore_eos") is True or (isinstance(floor, int) and floor >= max_tokens)):
        reply = dataclasses.replace(reply, content=_continued(reply.content or "", max_tokens), tool_calls=[],
                                    finish_reason=None)
    elif isinstance(floor, int) and floor > 0 and tokenizer.count(reply.content or "") < floor and not reply.tool_calls:
        reply = dataclasses.replace(reply, content=_continued(reply.content or "", floor - 1))
    return reply
