"""What the evidence writers collect while the run goes on (on the controller). No pytest here."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from pytest_qualify.evidence.metrics import Snapshot
from pytest_qualify.gate.waivers import WaiverSet
from pytest_qualify import properties

LONGREPR_CHARS = 4000  # enough for an operator to read, small enough for a JUnit file


@dataclass
class CaseRecord:
    """One test item's phases as pytest reported them: duration and the first failure's text."""

    nodeid: str
    duration_s: float = 0.0
    failed_when: str = ""
    failed_reports: int = 0  # as pytest counts them in session.testsfailed
    longrepr: str = ""
    skipped_message: str = ""


@dataclass
class EvidenceState:
    started_at: float = field(default_factory=time.time)
    t0: float = field(default_factory=time.perf_counter)
    cases: dict[str, CaseRecord] = field(default_factory=dict)
    snapshots: dict[str, Snapshot] = field(default_factory=dict)  # "start", "end"
    metrics_errors: dict[str, str] = field(default_factory=dict)
    waivers: WaiverSet | None = None
    baseline: dict[str, Any] | None = None
    baseline_path: str = ""
    regression_threshold_pct: float = 10.0
    fail_on_regression: bool = False
    workers: int = 0
    bundle_dir: str = ""
    bundle_error: str = ""
    summary: dict[str, Any] | None = None
    exit_code: int | None = None  # what the verdict asks of pytest's exit status (gate.EXIT_CODES)
    job_summary: str | None = None  # the GITHUB_STEP_SUMMARY file appended to
    job_summary_error: str = ""


class EvidenceCollector:
    """A pytest plugin object (duck-typed hooks): keeps each protocol item's duration and the text
    of its failure for the JUnit file. Registered on the controller, so it sees xdist workers'
    reports too."""

    def __init__(self, state: EvidenceState) -> None:
        self.state = state

    def pytest_runtest_logreport(self, report: Any) -> None:
        if not any(k == properties.MODULE for k, _ in report.user_properties):
            return
        case = self.state.cases.setdefault(report.nodeid, CaseRecord(report.nodeid))
        case.duration_s += float(getattr(report, "duration", 0.0) or 0.0)
        if report.failed and not hasattr(report, "wasxfail"):
            case.failed_reports += 1
        if report.failed and not case.failed_when:
            case.failed_when = report.when
            case.longrepr = str(report.longrepr or "")[-LONGREPR_CHARS:]
        elif report.skipped and not case.skipped_message:
            longrepr = report.longrepr
            case.skipped_message = str(longrepr[2]) if isinstance(longrepr, tuple) else str(longrepr or "")
