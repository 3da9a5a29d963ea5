"""The gate: pass^k over every protocol item in every repetition. No pytest imports.

The verdict is PASS only when every required module ran, every item of it passed in every
repetition (a waived item is listed, never hidden), every limit check (a latency SLO) held, and
nothing ended the run early. Otherwise it is one of two verdicts, each with its reasons:

- FAIL: the deployment was judged and failed — an item, a limit check, a dead server, a
  performance regression.
- INCOMPLETE: the deployment was not (fully) judged — the target never became available, the run
  was interrupted, a selection left part of the protocol out, a limit had nothing to measure.
  Neither promotes; CI retries an INCOMPLETE run and rejects a FAILed deployment. A judged
  failure outranks incompleteness: a deployment that failed an item has failed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_qualify.profiles import ModuleInfo
from pytest_qualify.stages import Stage

PASS = "PASS"
FAIL = "FAIL"
INCOMPLETE = "INCOMPLETE"
# The exit status each verdict asks for: pytest's own 1 ("tests failed") for a deployment that
# failed, and its 2 ("interrupted") for a run that did not judge it fully — a code CI already
# reads as "not a test failure", so a job can retry on 2 and reject on 1.
EXIT_CODES = {PASS: 0, FAIL: 1, INCOMPLETE: 2}


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
class CheckRow:
    """A gate row that is a limit, not a module: a measured figure against the profile's limit
    (a latency SLO). ``measured`` None means there was nothing to measure: the run is incomplete."""

    title: str
    measured: str | None  # as the operator reads it, with its unit ("1.234 s (max of 3)")
    limit: str  # "<= 2.000 s"
    ok: bool
    reason: str = ""  # why it failed, naming the figure and the limit

    @property
    def result(self) -> str:
        return f"{self.measured or 'not measured'} (limit {self.limit})"


@dataclass(frozen=True)
class GateVerdict:
    verdict: str
    rows: tuple[GateRow, ...]
    failures: tuple[ItemResult, ...]
    waived: tuple[ItemResult, ...]
    reasons: tuple[str, ...]  # run-level reasons: a missing module, a dead server, ...
    checks: tuple[CheckRow, ...] = ()
    incomplete: tuple[str, ...] = ()  # the reasons (among ``reasons``) that left the run unjudged
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
    incomplete: Sequence[str] = (),
    checks: Sequence[CheckRow] = (),
    target_unavailable: bool = False,
    stage: Stage | None = None,
    answers_void: Sequence[str] = (),
) -> GateVerdict:
    """Apply the hard 100% gate. ``waiver_for`` returns a waiver reason for a failed item of a
    waivable module, or None; ``run_problems`` are run-level failures of the deployment (a dead
    server, a regression); ``incomplete`` are reasons the run did not judge all of it (an
    interruption, a partial selection); ``checks`` are limit rows (SLOs). ``target_unavailable``:
    the endpoint never answered, so failed items judged nothing and the verdict is INCOMPLETE.
    With a ``stage``, ``required`` is that stage's modules and the verdict line names the stage.
    ``answers_void``: why the answers themselves judged nothing (a steered run whose forced answers
    did not come back): INCOMPLETE, and a failed item is no judged failure."""
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
    unjudged = list(incomplete) + list(answers_void)
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
            unjudged.append(f"module '{mod}' ({row.title}) did not run: the gate needs {needs}")

    if not results:
        unjudged.append("no protocol test ran")
    for check in checks:
        if check.ok:
            continue
        if check.measured is None:
            unjudged.append(check.reason or f"{check.title}: not measured")
        else:
            reasons.append(check.reason or f"{check.title}: {check.result}")
    judged_failure = bool(reasons or (failures and not answers_void)) and not target_unavailable
    if judged_failure:
        verdict = FAIL
    elif unjudged or failures or reasons:
        verdict = INCOMPLETE
    else:
        verdict = PASS
    return GateVerdict(verdict, tuple(rows), tuple(failures), tuple(waived), tuple(reasons + unjudged),
                       tuple(checks), tuple(unjudged), stage=stage)


def render_table(verdict: GateVerdict) -> list[str]:
    """``Gate | Result`` as aligned text lines for the terminal."""
    header = ("Gate", "Result")
    body = [(row.title, row.result + ("" if row.ok else "  FAIL")) for row in verdict.rows]
    body += [(c.title, c.result + ("" if c.ok else "  FAIL")) for c in verdict.checks]
    width = max(len(header[0]), *(len(b[0]) for b in body)) if body else len(header[0])
    lines = [f"{header[0]:<{width}} | {header[1]}", f"{'-' * width}-+-{'-' * 24}"]
    lines += [f"{a:<{width}} | {b}" for a, b in body]
    return lines
