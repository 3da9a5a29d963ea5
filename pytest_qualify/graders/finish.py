"""Visible answer / finish state: the one check every recorded answer goes through.

A non-tool answer must have visible content and end with ``finish_reason == "stop"``; a tool turn
may end with ``"tool_calls"`` when it made calls. ``"length"`` always fails — the answer budget ran
out, so the visible answer is cut short (or, with reasoning, may never have started).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from pytest_qualify.graders import Verdict

ALLOWED_PLAIN = frozenset({"stop"})
ALLOWED_TOOL_TURN = frozenset({"stop", "tool_calls"})


class AnswerLike(Protocol):
    """What the check reads; ``pytest_qualify.client.endpoint.Answer`` is one."""

    content: str | None
    reasoning: str | None
    tool_calls: Sequence[Any]
    finish_reason: str | None

    @property
    def completion_tokens(self) -> int | None: ...


def check_finish(answer: AnswerLike, expect_tool: bool = False) -> Verdict:
    """Accept an answer whose finish state is allowed and which shows the caller something.

    ``expect_tool``: this turn offered tools, so calls (finish ``tool_calls``) are a valid ending
    and visible content is not required when calls were made.
    """
    finish = answer.finish_reason
    calls = list(answer.tool_calls or ())
    tokens = getattr(answer, "completion_tokens", None)
    spent = f" after {tokens} completion tokens" if tokens is not None else ""
    if finish is None:
        return Verdict.reject("no finish_reason: the answer ended without a finish state")
    if finish == "length":
        return Verdict.reject(f"answer budget exhausted (finish_reason 'length'{spent})")
    allowed = ALLOWED_TOOL_TURN if expect_tool else ALLOWED_PLAIN
    if finish not in allowed:
        turn = "tool turn" if expect_tool else "non-tool answer"
        return Verdict.reject(f"finish_reason {finish!r} not allowed on a {turn} (allowed: {', '.join(sorted(allowed))})")
    if finish == "tool_calls" and not calls:
        return Verdict.reject("finish_reason 'tool_calls' without any tool call")
    if expect_tool and calls:
        return Verdict.accept(f"finish_reason {finish!r} with {len(calls)} tool call(s)")
    if calls:
        return Verdict.reject(f"tool calls on a turn that expects a visible answer (finish_reason {finish!r})")
    content = answer.content or ""
    if not content.strip():
        where = " (all output went to the reasoning field)" if (answer.reasoning or "").strip() else ""
        return Verdict.reject(f"empty answer: no visible content{where} (finish_reason {finish!r})")
    return Verdict.accept(f"finish_reason {finish!r} with visible content")
