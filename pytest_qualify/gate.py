"""The gate: pass^k over every protocol item in every repetition. No pytest imports.

The verdict is PASS only when every required module ran, every item of it passed in every
repetition (a waived item is listed, never hidden), and nothing ended the run early: a dead
server, an interruption, a rerun. Everything else is FAIL, and each failure carries its reason.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_qualify.profiles import ModuleInfo
from pytest_qualify.stages import Stage

PASS = "PASS"
FAIL = "FAIL"


@dataclass
class ItemResult:
    """One protocol test item (one repetition of one test), accumulated over its phases."""

    nodeid: str
    module: str
    item: str  # the test id without the repetition part: what a waiver names
    repetition: int
    repetitions: int
    lane: str | None = None
    outcome: str = "passed"  # passed | failed | skipped | rerun
    reason: str = ""
    properties: dict[str, Any] = field(default_factory=dict)
    waiver: str | None = None

    def record(self, when: str, outcome: str, reason: str) -> None:
        """Fold one phase's outcome in: any failing phase fails the item, for good."""
        if outcome == "passed":
            return
        if self.outcome == "passed" or (self.outcome == "skipped" and outcome != "skipped"):
            self.outcome = outcome
            prefix = "" if when == "call" else f"[{when}] "
            self.reason = prefix + reason
        elif outcome == "rerun":
            self.outcome = "rerun"
            self.reason = f"rerun after failure: {self.reason}"

    @property
    def passed(self) -> bool:
        return self.outcome == "passed"

    @property
    def where(self) -> str:
        parts = [self.item]
        if self.lane and self.lane not in self.item:
            parts.append(f"lane {self.lane}")
        parts.append(f"repetition {self.repetition}")
        return ", ".join(parts)


@dataclass(frozen=True)
class GateRow:
    module: str
    title: str
    items: int
    passed: int
    waived: int
    repetitions: int
    repetitions_passed: int

    @property
    def ok(self) -> bool:
        return self.items > 0 and self.passed + self.waived == self.items

    @property
    def result(self) -> str:
        if self.items == 0:
            return "not run"
        text = f"{self.passed + self.waived}/{self.items}"
        if self.waived:
            text = f"{self.passed}/{self.items} ({self.waived} waived)"
        if self.repetitions > 1:
            text += f", {self.repetitions_passed}/{self.repetitions} repetitions"
        return text


@dataclass(frozen=True)
class GateVerdict:
    verdict: str
    rows: tuple[GateRow, ...]
    failures: tuple[ItemResult, ...]
    waived: tuple[ItemResult, ...]
    reasons: tuple[str, ...]  # run-level reasons: a missing module, a dead server, ...
    stage: Stage | None = None  # None: the whole protocol (the full stage)

    @property
    def passed(self) -> bool:
        return self.verdict == PASS

    @property
    def headline(self) -> str:
        """The verdict line; only the full stage's reads ``QUALIFICATION: PASS``."""
        return self.stage.verdict_line(self.verdict) if self.stage is not None else f"QUALIFICATION: {self.verdict}"

    def summary_lines(self) -> list[str]:
        lines = [self.headline]
        lines += [f"  - {r}" for r in self.reasons]
        lines += [f"  - {f.module}: {f.where}: {f.reason}" for f in self.failures]
        return lines


def evaluate(
    results: Iterable[ItemResult],
    modules: Mapping[str, ModuleInfo],
    required: Sequence[str],
    *,
    waiver_for: Callable[[ItemResult], str | None] | None = None,
    run_problems: Sequence[str] = (),
    stage: Stage | None = None,
) -> GateVerdict:
    """Apply the hard 100% gate. ``waiver_for`` returns a waiver reason for a failed item of a
    waivable module, or None; ``run_problems`` are run-level failures (dead server, interrupt).
    With a ``stage``, ``required`` is that stage's modules and the verdict line names the stage."""
    results = list(results)
    by_module: dict[str, list[ItemResult]] = {}
    for r in results:
        by_module.setdefault(r.module, []).append(r)

    failures: list[ItemResult] = []
    waived: list[ItemResult] = []
    for r in results:
        if r.passed:
            continue
        reason = waiver_for(r) if waiver_for and modules.get(r.module, None) and modules[r.module].waivable else None
        if reason and r.outcome == "failed":
            r.waiver = reason
            waived.append(r)
        else:
            failures.append(r)

    rows = []
    reasons = list(run_problems)
    order = [m for m in modules if m in required] + [m for m in by_module if m not in required]
    for mod in order:
        items = by_module.get(mod, [])
        reps = sorted({r.repetition for r in items})
        reps_passed = sum(
            1 for rep in reps if all(r.passed or r.waiver for r in items if r.repetition == rep)
        )
        row = GateRow(
            module=mod,
            title=modules[mod].title if mod in modules else mod,
            items=len(items),
            passed=sum(1 for r in items if r.passed),
            waived=sum(1 for r in items if r.waiver),
            repetitions=max((r.repetitions for r in items), default=0),
            repetitions_passed=reps_passed,
        )
        rows.append(row)
        if mod in required and not items:
            needs = "every required module" if stage is None or stage.qualifies else f"every module of stage {stage.name}"
            reasons.append(f"module '{mod}' ({row.title}) did not run: the gate needs {needs}")

    if not results:
        reasons.append("no protocol test ran")
    verdict = PASS if not failures and not reasons else FAIL
    return GateVerdict(verdict, tuple(rows), tuple(failures), tuple(waived), tuple(reasons), stage=stage)


def render_table(verdict: GateVerdict) -> list[str]:
    """``Gate | Result`` as aligned text lines for the terminal."""
    header = ("Gate", "Result")
    body = [(row.title, row.result + ("" if row.ok else "  FAIL")) for row in verdict.rows]
    width = max(len(header[0]), *(len(b[0]) for b in body)) if body else len(header[0])
    lines = [f"{header[0]:<{width}} | {header[1]}", f"{'-' * width}-+-{'-' * 24}"]
    lines += [f"{a:<{width}} | {b}" for a, b in body]
    return lines
