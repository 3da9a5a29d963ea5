"""Session recall: every early fact present in the answer, no near-miss fact from a distractor turn.

Conversations (history, question, facts, near misses) are data in ``fixtures/recall/``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pytest_qualify.graders import Verdict
from pytest_qualify.graders.text import contains_number, contains_phrase, number_stated, phrase_stated

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


def fact_present(content: str | None, fact: Fact) -> bool:
    """Whether the answer states the fact, in its own form or an accepted one."""
    if fact.kind == "number":
        # The value itself compares as a number ("2,350" = "2350"); only the other forms as words.
        if contains_number(content, fact.value):
            return True
        forms = fact.accept
    else:
        forms = (fact.value, *fact.accept)
    return any(contains_phrase(content, form) for form in forms)


def near_miss_stated(content: str | None, fact: Fact) -> bool:
    """Whether the answer states a near-miss fact as a claim; "B-1907 (not B-1970)" does not."""
    if fact.kind == "number" and number_stated(content, fact.value):
        return True
    forms = fact.accept if fact.kind == "number" else (fact.value, *fact.accept)
    return any(phrase_stated(content, form) for form in forms)


def grade_recall(content: str | None, facts: Sequence[Fact], near_misses: Sequence[Fact] = ()) -> Verdict:
    """All facts present and no near miss stated (a near miss the answer itself negates is fine)."""
    if content is None or not content.strip():
        return Verdict.reject("empty answer")
    shown = content.strip().replace("\n", " ")[:160]
    missing = [f for f in facts if not fact_present(content, f)]
    wrong = [f for f in near_misses if near_miss_stated(content, f)]
    problems = [f"lacks {f.name} {f.value!r}" for f in missing]
    problems += [f"states the near-miss {f.name} {f.value!r}" for f in wrong]
    if problems:
        return Verdict.reject(f"answer {shown!r} " + "; ".join(problems))
    return Verdict.accept(f"all {len(facts)} facts recalled")
