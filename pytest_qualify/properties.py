"""The user-property keys an item carries (pytest's ``user_properties``, JUnit's ``<property>``)
and the words of an item's outcome and a failure's kind, spelled once. The pytest side writes them, the gate and the evidence
read them. On the ground floor: plain names, no imports."""

from __future__ import annotations

from enum import StrEnum

MODULE = "qualify_module"  # the protocol module
JUNIT_MODULE = "module"  # the same, as JUnit's readers see it
ITEM = "item"  # the item's label without its repetition
REPETITION = "repetition"  # this item's repetition, 1-based
REPETITIONS = "repetitions"  # how many the item has
LANE = "lane"  # the context lane a lane item measured
REASON = "reason"  # a failed item's reason, one line
FAILURE_KIND = "failure_kind"  # a failed item's kind, one of FAILURE_KINDS
CORPUS_KIND = "corpus_kind"  # a multimodal item's kind of media
# An item of the protocol's own suites: its grader journals every verdict (``checks.require``), so
# a pass with no verdict in the answer journal was not graded (``gate.decide.proof_of_grading``).
JOURNALED = "qualify_journaled"
# A failed item whose request the endpoint refused with HTTP 401 or 403: its credentials, not the
# deployment, decided it (most items so: the run is not judged).
CREDENTIALS_REFUSED = "credentials_refused"
# A failed item whose request the harness could not build (a prompt it could not size) or could not
# make measure the deployment (no threshold, a forced text not generated as the model's own marker
# tokens): the deployment was not judged, so neither is the item (the run INCOMPLETE, naming why).
HARNESS_FAILURE = "harness_failure"

# A failure's kind. FORMAT: the answer did not follow its contract (its slot is missing or
# malformed). FACT: it did, and the slot is wrong. OTHER: no verdict judged it (a timeout, a
# sizing failure, a dead server).
class FailureKind(StrEnum):
    FORMAT = "format"
    FACT = "fact"
    OTHER = "other"


FORMAT, FACT, OTHER = FailureKind.FORMAT, FailureKind.FACT, FailureKind.OTHER
FAILURE_KINDS = tuple(FailureKind)


class Outcome(StrEnum):
    """An item's outcome, its phases folded in (pytest's words, and the gate's own ``ungraded``:
    see ``gate.decide.proof_of_grading``). Here, on the ground floor, so that the statistics
    (``stats.py``) and the gate share it; ``gate.decide`` re-exports it."""

    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"
    RERUN = "rerun"
    UNGRADED = "ungraded"


class TimingSource(StrEnum):
    """Where a streamed request's TTFT figure came from (the ``ttft_source`` property)."""

    CLIENT = "client chunks"
    # The whole answer came in one chunk with its finish and no engine timing stood in: the figure
    # is the client's first chunk, which read the parser (it held the content), not the engine.
    CLIENT_HELD = "client chunks, held"
    ENGINE = "engine /metrics"
