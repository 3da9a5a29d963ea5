"""Reasoning leakage: the engine's reasoning reaching the caller. With thinking disabled, no
reasoning anywhere — not in a reasoning field, not as ``<think>``-style or chat-template markers in
the visible content, not counted as reasoning tokens. With thinking enabled, reasoning must stay
out of the visible content.

Prose working is not a leak: a visible answer that starts "**Reasoning:**" or "Thoughts:" is the
model answering a prompt that asked it to think it through, in words the caller was meant to read.
Only what the engine and its template produce for hidden reasoning (fields, tags, markers, usage)
is. Nothing is stripped before grading: the content is judged exactly as the caller would see it.
"""

from __future__ import annotations

import re
import unicodedata

from pytest_qualify.graders import Verdict

# Markers reasoning models and their chat templates emit around hidden reasoning.
MARKER_RE = re.compile(
    r"</?\s*think(?:ing)?\s*>"            # Qwen3 / DeepSeek-R1 <think>, some templates <thinking>
    r"|<\|?/?\s*(?:begin|end)_of_thought\s*\|?>"  # <|begin_of_thought|>
    r"|</?\s*reasoning\s*>"
    r"|\[/?THINK\]"                        # Mistral Magistral
    r"|◁/?think▷"                          # Kimi
    r"|<\|channel\|>\s*analysis"           # gpt-oss harmony
    r"|<\|start_thinking\|>|<\|end_thinking\|>",
    re.I,
)


def reasoning_markers(content: str | None) -> list[str]:
    """The reasoning markers (tags and template tokens) found in visible content."""
    if not content:
        return []
    return [m.group(0) for m in MARKER_RE.finditer(unicodedata.normalize("NFKC", content))]


def _shown(text: str) -> str:
    text = " ".join(text.split())
    return repr(text if len(text) <= 60 else text[:57] + "...")


def check_no_reasoning(content: str | None, reasoning: str | None, reasoning_tokens: int | None = None) -> Verdict:
    """Thinking disabled: accept only when no reasoning shows anywhere."""
    problems = []
    if reasoning is not None and reasoning.strip():
        problems.append(f"reasoning field populated ({len(reasoning)} chars: {_shown(reasoning)})")
    markers = reasoning_markers(content)
    if markers:
        problems.append(f"reasoning markers in the visible content: {', '.join(repr(m) for m in markers[:3])}")
    if reasoning_tokens:
        problems.append(f"usage reports {reasoning_tokens} reasoning tokens")
    if problems:
        return Verdict.reject("; ".join(problems))
    return Verdict.accept("no reasoning in the fields, the content or the usage")


def check_reasoning_separated(content: str | None, reasoning: str | None) -> Verdict:
    """Thinking enabled: reasoning may exist but only in its own field, never in the content."""
    markers = reasoning_markers(content)
    if markers:
        return Verdict.reject(
            f"reasoning markers in the visible content: {', '.join(repr(m) for m in markers[:3])} "
            "(the reasoning parser did not separate them)"
        )
    where = "in the reasoning field" if reasoning and reasoning.strip() else "none returned"
    return Verdict.accept(f"visible content free of reasoning markers; reasoning {where}")
