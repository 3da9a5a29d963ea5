"""What a protocol test calls to turn a grader's verdict into a pass or a readable failure."""

from __future__ import annotations

from typing import NoReturn

import pytest

from pytest_qualify.graders import Verdict

REASON_KEY = "reason"


def fail(where: str, reason: str) -> NoReturn:
    """Fail the current test with an operator-readable reason (no traceback)."""
    pytest.fail(f"{where}: {reason}" if where else reason, pytrace=False)


def require(verdict: Verdict, where: str = "") -> None:
    """Fail the current test with ``where: reason`` unless the verdict accepts."""
    if not verdict.ok:
        fail(where, verdict.reason)
