"""Session recall: every early fact present in the answer, no near-miss fact from a distractor turn.

Conversations (history, question, facts, near misses) are data in ``fixtures/recall/``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pytest_qualify.graders import Verdict
from pytest_qualify.graders.text import (
    claim_text, disowned, number_spans, number_word_spans, phrase_spans, rival_reason,
)

KINDS = ("text", "number")


@dataclass(frozen=True)
class Fact:
    name: str
    value: str
    kind: str = "text"  # text: whole words, case and separators free; number: any equal number
    accept: tuple[str, ...] = ()  # other written forms with the same meaning


@dataclass(frozen=True)
class Conversation:
    id: str
    turns: tuple[tuple[str, str], ...]  # (user, assistant) pairs, sent as history
    question: str
    facts: tuple[Fact, ...]
    near_misses: tuple[Fact, ...]

    def messages(self, system: str) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = [{"role": "system", "content": system}]
        for user, assistant in self.turns:
            out += [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]
        out.append({"role": "user", "content": self.question})
        return out


@dataclass(frozen=True)
class RecallFixtures:
    system: str
    conversations: tuple[Conversation, ...]


def fact_spans(text: str, fact: Fact) -> list[tuple[int, int, str]]:
    """Where :func:`claim_text` states the fact (negated mentions left out): a number by its value
    in digits or words ("12" = "twelve"), text as whole words, or one of its accepted forms."""
    spans = []
    if fact.kind == "number":
        spans += number_spans(text, fact.value)
        spans += number_word_spans(text, fact.value)
        forms: tuple[str, ...] = fact.accept
    else:
        forms = (fact.value, *fact.accept)
    spans += [span for form in forms for span in phrase_spans(text, form)]
    return sorted((s, e, fact.value) for s, e in set(spans) if not disowned(text, s, e))


def fact_present(content: str | None, fact: Fact) -> bool:
    """Whether the answer states the fact, in its own form or an accepted one."""
    return bool(fact_spans(claim_text(content or ""), fact))


def near_miss_stated(content: str | None, near: Fact, facts: Sequence[Fact] = ()) -> bool:
    """Whether the answer offers a near-miss fact as (part of) its answer: stated while its fact
    is missing, before it, beside it or hedged with it ("freezer 12 or 21"). Negated ("B-1907, not
    B-1970") or told afterwards as context ("... later B-1970 went to freezer 21") it is not."""
    text = claim_text(content or "")
    others = fact_spans(text, near)
    if not others:
        return False
    said = sorted(s for f in facts if f.name == near.name for s in fact_spans(text, f))
    return not said or rival_reason(text, said, others) is not None


def grade_recall(content: str | None, facts: Sequence[Fact], near_misses: Sequence[Fact] = ()) -> Verdict:
    """All facts present and no near miss stated (a near miss the answer itself negates is fine)."""
    if content is None or not content.strip():
        return Verdict.reject("empty answer")
    shown = content.strip().replace("\n", " ")[:160]
    missing = [f for f in facts if not fact_present(content, f)]
    wrong = [f for f in near_misses if near_miss_stated(content, f, facts)]
    problems = [f"lacks {f.name} {f.value!r}" for f in missing]
    problems += [f"states the near-miss {f.name} {f.value!r}" for f in wrong]
    if problems:
        return Verdict.reject(f"answer {shown!r} " + "; ".join(problems))
    return Verdict.accept(f"all {len(facts)} facts recalled")
