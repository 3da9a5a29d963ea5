"""Graders: pure functions, text (or parsed data) in, :class:`Verdict` out. No sockets, no pytest."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Verdict:
    ok: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.ok

    @classmethod
    def accept(cls, reason: str = "ok") -> "Verdict":
        return cls(True, reason)

    @classmethod
    def reject(cls, reason: str) -> "Verdict":
        return cls(False, reason)
