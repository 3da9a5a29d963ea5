"""What a protocol test calls to turn a grader's verdict into a pass or a readable failure."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import NoReturn

import pytest

from pytest_qualify.client import EndpointError, error_message
from pytest_qualify.graders import Verdict
from pytest_qualify.haystack import SizingError

REASON_KEY = "reason"


def fail(where: str, reason: str) -> NoReturn:
    """Fail the current test with an operator-readable reason (no traceback)."""
    pytest.fail(f"{where}: {reason}" if where else reason, pytrace=False)


def require(verdict: Verdict, where: str = "") -> None:
    """Fail the current test with ``where: reason`` unless the verdict accepts."""
    if not verdict.ok:
        fail(where, verdict.reason)


@contextmanager
def sizing(where: str, what: str = "the prompt") -> Iterator[None]:
    """Fail the current test with a readable reason when sizing ``what`` in the server's tokens
    fails: no count landed within the tolerance, or ``POST /tokenize`` itself was refused."""
    try:
        yield
    except SizingError as exc:
        fail(where, str(exc))
    except EndpointError as exc:
        fail(where, f"POST /tokenize failed, so {what} cannot be sized in server tokens: "
                    f"HTTP {exc.status}: {error_message(exc.body)}")
