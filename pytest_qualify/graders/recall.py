"""Session recall: the early facts, each in its own field of one JSON object.

Conversations (history, question, answer contract, ground truth, near misses) are data in
``fixtures/recall/``. The contract (graders/contract.py) puts every fact in a named field, so a
fact given to the wrong person or thing — my hotel written as my sister's — is a miss by field,
not a guess about prose. Each graded field is compared exactly with its accepted forms; a field
holding the near-miss value a distractor turn gave is named as such in the reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from pytest_qualify.graders import Verdict
from pytest_qualify.graders.contract import (
    Contract, FormatError, compare, format_failure, grade_fields, json_slot,
)


@dataclass(frozen=True)
class Conversation:
    id: str
    turns: tuple[tuple[str, str], ...]  # (user, assistant) pairs, sent as history
    question: str
    contract: Contract  # form "json": one field per fact
    truth: Mapping[str, Any] = field(default_factory=dict)  # the reference server's answer
    near_misses: Mapping[str, Any] = field(default_factory=dict)  # field -> a distractor turn's value

    @property
    def prompt(self) -> str:
        """The closing question with the contract stated after it (what is sent)."""
        return f"{self.question.rstrip()} {self.contract.instruction()}"

    def messages(self, system: str) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = [{"role": "system", "content": system}]
        for user, assistant in self.turns:
            out += [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]
        out.append({"role": "user", "content": self.prompt})
        return out


@dataclass(frozen=True)
class RecallFixtures:
    system: str
    conversations: tuple[Conversation, ...]


def grade_recall(content: str | None, contract: Contract, near_misses: Mapping[str, Any] | None = None) -> Verdict:
    """Every graded field of the reply's JSON object equals one of its accepted forms. A field that
    holds a near miss (``near_misses``: field -> the value a distractor turn gave) says so."""
    try:
        slot = json_slot(content, contract.schema)
    except FormatError as exc:
        return format_failure(str(exc))
    verdict = grade_fields(slot, contract.fields)
    if verdict.ok or not near_misses:
        return verdict
    noted = []
    for name, value in near_misses.items():
        accept = contract.fields.get(name)
        if accept is None or name not in slot:
            continue
        if compare(slot[name], replace(accept, forms=(str(value),)), name).ok:
            noted.append(f"field {name!r} holds the near-miss value {value!r} from another turn")
    return verdict.reworded(verdict.reason + ("; " + "; ".join(noted) if noted else ""))
