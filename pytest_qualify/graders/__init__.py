"""Graders: pure functions, text (or parsed data) in, :class:`Verdict` out. No sockets, no pytest."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from pytest_qualify.properties import FACT, FORMAT, FailureKind

# A failure's kind (properties.py): FORMAT, the reason then says so in words, starting
# ``format:``; FACT otherwise. The kind travels as a field of the verdict: nothing re-reads it
# from the reason.


@dataclass(frozen=True)
class SlotRead:
    """What an answer contract read from a reply (``graders/contract.py`` ``grade``): its slot (the
    string, or the JSON object), or the format error that left nothing to read. Kept as the item's
    evidence (``transcripts.jsonl``, what report.html shows)."""

    name: str
    slot: Any = None
    format_error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "slot": self.slot, "format_error": self.format_error}


@dataclass(frozen=True)
class Verdict:
    ok: bool
    reason: str = ""
    kind: FailureKind | None = None  # a failure's kind (FORMAT or FACT; FACT unless said); None when ok
    # The slots the verdict's contract read, in order: the answer as graded travels with its verdict
    # (as inspect-ai keeps it on its Score). Not part of a verdict's equality.
    slots: tuple[SlotRead, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        if self.ok:
            object.__setattr__(self, "kind", None)
        elif self.kind is None:
            object.__setattr__(self, "kind", FACT)
        elif self.kind not in (FORMAT, FACT):
            raise ValueError(f"a verdict's kind is '{FORMAT}' or '{FACT}', not {self.kind!r}")
        else:
            object.__setattr__(self, "kind", FailureKind(self.kind))

    def __bool__(self) -> bool:
        return self.ok

    @property
    def is_format(self) -> bool:
        return self.kind == FORMAT

    @classmethod
    def accept(cls, reason: str = "ok") -> "Verdict":
        return cls(True, reason)

    @classmethod
    def reject(cls, reason: str, kind: FailureKind = FACT) -> "Verdict":
        return cls(False, reason, kind)

    def with_slots(self, *slots: SlotRead) -> "Verdict":
        """The same verdict, carrying these slot readings after its own."""
        return dataclasses.replace(self, slots=self.slots + slots)

    def reworded(self, reason: str) -> "Verdict":
        """The same verdict (pass or fail, and its kind) with another reason, e.g. one that names
        the case."""
        return dataclasses.replace(self, reason=reason)

    @classmethod
    def all_failed(cls, verdicts: Iterable["Verdict"], separator: str = "; ") -> "Verdict":
        """One failure from several (each must have failed): their reasons joined, a format
        failure when any of them was one."""
        failed = [v for v in verdicts if not v.ok]
        kind = FORMAT if any(v.is_format for v in failed) else FACT
        return cls.reject(separator.join(v.reason for v in failed), kind).with_slots(
            *(s for v in failed for s in v.slots))
