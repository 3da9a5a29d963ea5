"""What a protocol test calls to turn a grader's verdict into a pass or a readable failure."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import NoReturn

import pytest

from pytest_qualify.client.errors import EndpointError, error_message
from pytest_qualify.graders import Verdict
from pytest_qualify.tasks.haystack import SizingError

# Where the running item's verdicts go: the answer journal (and the slots each read, the
# transcripts), set around each protocol item's call phase (hooks/evidence.py). A pass is counted
# only with a verdict there (gate.decide.proof_of_grading).
VERDICT_SINK: ContextVar[Callable[[Verdict], None] | None] = ContextVar("qualify_verdict_sink", default=None)


def _journal(verdict: Verdict) -> None:
    sink = VERDICT_SINK.get()
    if sink is not None:
        sink(verdict)


def fail(where: str, reason: str) -> NoReturn:
    """Fail the current test with an operator-readable reason (no traceback)."""
    _journal(Verdict.reject(reason))
    pytest.fail(f"{where}: {reason}" if where else reason, pytrace=False)


def require(verdict: Verdict, where: str = "") -> None:
    """Fail the current test with ``where: reason`` unless the verdict accepts; the failure carries
    its kind, the verdict's ``kind`` field (format or fact). Every verdict is journaled: the proof
    that the item was graded, with the slots its contract read."""
    _journal(verdict)
    if not verdict.ok:
        # pytest's own failure, as fail() raises it, with the kind on it for hooks/evidence.py.
        failure = pytest.fail.Exception(f"{where}: {verdict.reason}" if where else verdict.reason, pytrace=False)
        failure.failure_kind = verdict.kind  # type: ignore[attr-defined]
        raise failure


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


def held(where: str, what: str) -> None:
    """The verdict of an item whose checks fail it one by one (``fail``): every one of them held.
    Called last, so an item that stopped early without failing is never counted as graded."""
    require(Verdict.accept(what), where)
