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

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, Literal

from pytest_qualify.gate.baseline import DEFAULT_THRESHOLD_PCT, compare, simulated_mismatch
from pytest_qualify.gate.claims import ClaimRow, check_rows as claim_check_rows, evaluate_claims
from pytest_qualify.gate.run_facts import RunFacts
from pytest_qualify.gate.slo import CheckRow, SloRow, check_rows, evaluate_slo
from pytest_qualify.stats import flips
from pytest_qualify.gate.waivers import WaiverSet, candidates, hard_module_conflicts
from pytest_qualify.profiles import ModuleInfo
from pytest_qualify.promotion.stages import Stage
from pytest_qualify.properties import CREDENTIALS_REFUSED, FAILURE_KIND, FAILURE_KINDS, HARNESS_FAILURE, OTHER, Outcome

class Result(StrEnum):
    """A run's verdict."""

    PASS = "PASS"
    FAIL = "FAIL"
    INCOMPLETE = "INCOMPLETE"


PASS, FAIL, INCOMPLETE = Result.PASS, Result.FAIL, Result.INCOMPLETE


class FindingKind(StrEnum):
    """Which sort of gate row a run-level finding is."""

    CHECK = "check"  # a limit check: an SLO row, a claim
    MODULE = "module"  # a required module that did not run
    REGRESSION = "regression"  # beyond the baseline's threshold
    WAIVER = "waiver"  # a waiver file that cannot be applied
    SELECTION = "selection"  # a selection left part of the protocol out
    RUN = "run"  # anything else about the run
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
    outcome: Outcome = Outcome.PASSED  # phases folded in by record()
    reason: str = ""
    properties: dict[str, Any] = field(default_factory=dict)
    waiver: str | None = None
    called: bool = False  # its call phase reported (``--setup-only`` and a hook that skips the body report none)

    def record(self, when: str, outcome: Outcome | str, reason: str) -> None:
        """Fold one phase's outcome in: any failing phase fails the item, for good."""
        outcome = Outcome(outcome)
        if when == "call":
            self.called = True
        if outcome is Outcome.PASSED:
            return
        if self.outcome == Outcome.PASSED or (self.outcome == Outcome.SKIPPED and outcome is not Outcome.SKIPPED):
            self.outcome = outcome
            prefix = "" if when == "call" else f"[{when}] "
            self.reason = prefix + reason
        elif outcome is Outcome.RERUN:
            self.outcome = Outcome.RERUN
            self.reason = f"rerun after failure: {self.reason}"

    @property
    def passed(self) -> bool:
        return self.outcome == Outcome.PASSED

    @property
    def failure_kind(self) -> str | None:
        """``format`` (the answer did not follow its contract), ``fact`` (it did, wrongly) or
        ``other`` (no verdict judged it: a timeout, a dead server ...); None when it did not fail."""
        if self.outcome not in (Outcome.FAILED, Outcome.RERUN):
            return None
        return str(self.properties.get(FAILURE_KIND) or OTHER)

    @property
    def where(self) -> str:
        parts = [self.item]
        if self.lane and self.lane not in self.item:
            parts.append(f"lane {self.lane}")
        parts.append(f"repetition {self.repetition}")
        return ", ".join(parts)


UNGRADED = Outcome.UNGRADED
NOT_GRADED = "not graded"


def proof_of_grading(results: Iterable[ItemResult], graded: Iterable[str],
                     journaled: Callable[[ItemResult], bool] = lambda r: True) -> tuple[ItemResult, ...]:
    """The results with every pass that has no proof of grading turned ``ungraded`` (a copy; the
    results handed in are never changed). A report of "passed" proves only that nothing raised: an
    item counts as passed when its call phase ran and, where its grader journals its verdicts
    (``journaled``: the protocol's own suites, ``checks.require``), the answer journal holds a
    verdict of its own (``graded``: the node ids with one). An ungraded item is neither passed nor
    failed: the run is INCOMPLETE (``decide``), never PASS."""
    graded = set(graded)
    out = []
    for r in results:
        refused = r.properties.get(CREDENTIALS_REFUSED)
        if refused and not r.passed:
            # Our key was refused: the request was never judged, so neither is the item (the run's
            # "credentials refused" reason names them all; hooks/results.run_problems).
            why = f"not judged: the endpoint refused the API key (HTTP {refused})"
            out.append(replace(r, properties=dict(r.properties), outcome=UNGRADED, reason=why))
            continue
        harness = r.properties.get(HARNESS_FAILURE)
        if harness and not r.passed:
            # The harness could not build the request: the deployment was never asked, so the item
            # says nothing of it (not a FAIL of the deployment).
            out.append(replace(r, properties=dict(r.properties), outcome=UNGRADED, reason=f"not judged: {harness}"))
            continue
        if r.passed and not r.called:
            why = "reported passed, but its call phase did not run (no test body ran)"
        elif r.passed and journaled(r) and r.nodeid not in graded:
            why = "reported passed, but its grader recorded no verdict in the answer journal"
        else:
            out.append(r)
            continue
        out.append(replace(r, properties=dict(r.properties), outcome=UNGRADED, reason=why))
    return tuple(out)


def _not_graded(items: Sequence[ItemResult]) -> list[str]:
    """One line for every ungraded item together, naming the first."""
    # Items whose key was refused are named by the run's one "credentials refused" reason instead.
    ungraded = [r for r in items if r.outcome == UNGRADED and not r.properties.get(CREDENTIALS_REFUSED)]
    if not ungraded:
        return []
    first = ungraded[0]
    more = f" (and {len(ungraded) - 1} more item(s))" if len(ungraded) > 1 else ""
    return [f"{NOT_GRADED}: {first.module}: {first.where}: {first.reason}{more}"]


@dataclass(frozen=True)
class GateRow:
    module: str
    title: str
    items: int
    passed: int
    waived: int
    repetitions: int
    repetitions_passed: int
    failed: int = 0  # items that failed as a judged failure: neither waived nor left unjudged
    not_judged: int = 0  # items the gate could not count either way (not graded, a refused key, a void run)

    @property
    def ok(self) -> bool:
        return self.items > 0 and self.passed + self.waived == self.items

    @property
    def verdict(self) -> Result:
        """The row's own verdict, decided here once so every reader shows the same: FAIL only when
        an item of it was judged failed; INCOMPLETE when it did not run or an item of it was not
        judged (and none failed); PASS when every item passed or was waived."""
        if self.failed:
            return FAIL
        return PASS if self.ok else INCOMPLETE

    def as_dict(self) -> dict[str, Any]:
        """The row as ``summary.json``'s ``gate`` section holds it."""
        return {"module": self.module, "title": self.title, "items": self.items, "passed": self.passed,
                "waived": self.waived, "repetitions": self.repetitions,
                "repetitions_passed": self.repetitions_passed, "ok": self.ok, "result": self.result,
                "verdict": str(self.verdict), "not_judged": self.not_judged}

    @property
    def result(self) -> str:
        if self.items == 0:
            return "not run"
        notes = [f"{n} {what}" for n, what in ((self.waived, "waived"), (self.not_judged, "not judged")) if n]
        text = f"{self.passed}/{self.items}" + (f" ({', '.join(notes)})" if notes else "")
        if self.repetitions > 1:
            text += f", {self.repetitions_passed}/{self.repetitions} repetitions"
        return text


@dataclass(frozen=True)
class Finding:
    """One run-level reason the verdict is not PASS, as the gate row it belongs to: what JUnit shows
    as a failing (``judged``) or erroring (not judged) test case of its own, so the counts are red
    exactly when the verdict is not PASS. ``row`` is a stable name (``slo_32k_lane_ttft``,
    ``module_smoke_not_run``, ``regression``); ``kind`` says which sort of row it is."""

    row: str
    reason: str
    kind: FindingKind
    judged: bool  # False: the reason left the deployment unjudged (INCOMPLETE)

    def as_dict(self) -> dict[str, Any]:
        return {"row": self.row, "kind": self.kind, "judged": self.judged, "reason": self.reason}


def row_name(text: str, *, whole: bool = False) -> str:
    """A reason's or a row title's stable name: lower-case words joined by ``_``. A row title is
    named whole ("SLO 1K lane TTFT" is ``slo_1k_lane_ttft``); a reason by its leading plain words,
    up to its first colon or the first word that is a path, an id or a figure ("server died during
    suites/test_smoke.py::...: ..." is ``server_died_during``), so the name stays what the reason is,
    not which item or figure it met."""
    if whole:
        words = re.findall(r"[a-z0-9]+", text.lower().replace("/", " per "))
    else:
        words = []
        for word in text.split(":", 1)[0].split():
            if not re.fullmatch(r"[A-Za-z][A-Za-z0-9-]*,?", word):
                break
            words.append(word.rstrip(",").lower().replace("-", "_"))
    return "_".join(words)[:60].strip("_") or "run"


def _finding(reason: str, judged: bool, named: Mapping[str, tuple[str, FindingKind]]) -> Finding:
    if reason in named:
        row, kind = named[reason]
    else:
        row, kind = row_name(reason), FindingKind.RUN
    return Finding(row, reason, kind, judged)


# pytest 9.2 shortens a failure's ``message`` attribute to 500 characters (whole lines); one line
# below that is left as it is, so every reader of a JUnit file sees the same message.
MESSAGE_MAX = 480
GATE_CLASSNAME = "qualify.gate"  # the JUnit classname of the gate's run-level test cases


def message(text: str) -> str:
    """A failure's one-line ``message``: its first line, within :data:`MESSAGE_MAX` characters."""
    first = (text.strip().splitlines() or [""])[0]
    return first if len(first) <= MESSAGE_MAX else first[: MESSAGE_MAX - 1] + "…"


@dataclass(frozen=True)
class GateCase:
    """One run-level reason of the verdict as the test case CI counts (classname
    :data:`GATE_CLASSNAME`): a ``failure`` when the deployment was judged, an ``error`` when it was
    not. Built once per decision (:func:`gate_cases`); the bundle's junit.xml, pytest's own
    ``--junitxml`` and pytest's terminal counts all render these, so they cannot disagree."""

    name: str  # the gate row: ``slo_1k_lane_ttft``, ``modules_not_run``, ``verdict``
    tag: Literal["failure", "error"]
    type: str  # ``qualify.<finding kind>`` when judged, ``qualify.not_judged`` when not
    message: str  # one line (:func:`message`)
    text: str  # the whole reason, its row and the verdict

    @property
    def nodeid(self) -> str:
        return f"{GATE_CLASSNAME}::{self.name}"


def gate_cases(verdict: GateVerdict) -> tuple[GateCase, ...]:
    """The run-level test cases of a verdict: one per reason the gate gave (``findings``), and,
    should a verdict other than PASS have no failing case at all (no finding, no failed item), one
    for the verdict itself, so the counts are red exactly when the verdict is not PASS."""
    out = [GateCase(name=f.row, tag="failure" if f.judged else "error",
                    type=f"qualify.{f.kind}" if f.judged else "qualify.not_judged", message=message(f.reason),
                    text=f"{f.reason}\n\ngate row: {f.row} ({f.kind}); verdict {verdict.verdict}")
           for f in verdict.findings]
    if verdict.verdict != PASS and not out and not verdict.failures:
        judged = verdict.verdict == FAIL
        out.append(GateCase(name="verdict", tag="failure" if judged else "error",
                            type="qualify.verdict" if judged else "qualify.not_judged",
                            message=f"verdict {verdict.verdict}",
                            text="; ".join(verdict.reasons) or f"verdict {verdict.verdict}"))
    return tuple(out)


@dataclass(frozen=True)
class GateVerdict:
    verdict: Result
    rows: tuple[GateRow, ...]
    failures: tuple[ItemResult, ...]
    waived: tuple[ItemResult, ...]
    reasons: tuple[str, ...]  # run-level reasons: a missing module, a dead server, ...
    checks: tuple[CheckRow, ...] = ()
    incomplete: tuple[str, ...] = ()  # the reasons (among ``reasons``) that left the run unjudged
    stage: Stage | None = None  # None: the whole protocol (the full stage)
    items: tuple[ItemResult, ...] = ()  # every item judged, a waived one carrying its waiver
    findings: tuple[Finding, ...] = ()  # every reason as its gate row, in the order of ``reasons``
    # (node id, why) of each item the gate did not judge, which every reader shows skipped "not judged: …"
    # (:func:`items_not_judged`): never a passed test case, never a failure.
    not_judged: tuple[tuple[str, str], ...] = ()

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


def _apply_waivers(
    results: Iterable[ItemResult], modules: Mapping[str, ModuleInfo], waiver_for: Callable[[ItemResult], str | None] | None,
) -> tuple[list[ItemResult], list[ItemResult], list[ItemResult]]:
    """(every item, the failures, the waived), a waived item as a copy carrying its waiver: the
    results handed in are never changed."""
    items: list[ItemResult] = []
    failures: list[ItemResult] = []
    waived: list[ItemResult] = []
    for r in results:
        if r.outcome == UNGRADED:  # not judged: neither a pass nor a failure, and never waived
            items.append(r)
            continue
        if not r.passed:
            reason = waiver_for(r) if waiver_for and modules.get(r.module, None) and modules[r.module].waivable else None
            if reason and r.outcome == Outcome.FAILED:
                r = replace(r, properties=dict(r.properties), waiver=reason)
                waived.append(r)
            else:
                failures.append(r)
        items.append(r)
    return items, failures, waived


def _unique_rows(findings: Sequence[Finding]) -> list[Finding]:
    """Two reasons of one row (two partial selections) are ``row`` and ``row_2``: one test case each."""
    seen: dict[str, int] = {}
    out = []
    for f in findings:
        n = seen[f.row] = seen.get(f.row, 0) + 1
        out.append(f if n == 1 else replace(f, row=f"{f.row}_{n}"))
    return out


def _module_names(missing: Sequence[str]) -> dict[str, tuple[str, FindingKind]]:
    # The required modules that did not run are one reason, one gate row (``modules_not_run``): a
    # run stopped for one cause shows that cause once, not once per module it kept from running.
    return {reason: ("modules_not_run", FindingKind.MODULE) for reason in missing}


def items_not_judged(items: Iterable[ItemResult], answers_void: Sequence[str] = ()) -> tuple[tuple[str, str], ...]:
    """(node id, why) of each item the gate did not judge, decided here once so that both JUnit
    files and report.html show it the same, skipped "not judged: …": an item whose request the
    endpoint refused our key for (``proof_of_grading`` made it ungraded, its reason says so), and,
    in a steered run whose forced answers did not come back (``answers_void``), an item that failed:
    its answer judged nothing, so its failure is no judged one (as its gate row counts it)."""
    void = ""
    if answers_void:
        more = f" (and {len(answers_void) - 1} more)" if len(answers_void) > 1 else ""
        void = f"not judged: {answers_void[0]}{more}"
    out = []
    for r in items:
        if r.outcome == UNGRADED and r.properties.get(CREDENTIALS_REFUSED):
            out.append((r.nodeid, r.reason))
        elif void and r.outcome in (Outcome.FAILED, Outcome.RERUN) and not r.waiver:
            out.append((r.nodeid, void))
    return tuple(out)


def _failures_judged(answers_void: Sequence[str], target_unavailable: bool) -> bool:
    """Whether a failed item is a judged failure: not when the answers themselves judged nothing (a
    steered run's void answers) nor when the target never became available."""
    return not answers_void and not target_unavailable


def _rows(items: Sequence[ItemResult], modules: Mapping[str, ModuleInfo], required: Sequence[str],
          stage: Stage | None, failures_judged: bool = True) -> tuple[list[GateRow], list[str]]:
    """One row per module (required ones in the registry's order, then any other that ran), and
    why a required module that did not run leaves the run unjudged. ``failures_judged``: whether
    the run's failed items are judged failures (:func:`_failures_judged`); where they are not, they
    count in their row as not judged, as an ungraded item does, so no row says FAIL of a run that
    judged nothing."""
    by_module: dict[str, list[ItemResult]] = {}
    for r in items:
        by_module.setdefault(r.module, []).append(r)
    rows: list[GateRow] = []
    not_run: list[str] = []
    order = [m for m in modules if m in required] + [m for m in by_module if m not in required]
    for mod in order:
        ran = by_module.get(mod, [])
        ungraded = sum(1 for r in ran if r.outcome == UNGRADED)
        failed = sum(1 for r in ran if not r.passed and not r.waiver and r.outcome != UNGRADED)
        reps = sorted({r.repetition for r in ran})
        reps_passed = sum(1 for rep in reps if all(r.passed or r.waiver for r in ran if r.repetition == rep))
        row = GateRow(
            module=mod,
            title=modules[mod].title if mod in modules else mod,
            items=len(ran),
            passed=sum(1 for r in ran if r.passed),
            waived=sum(1 for r in ran if r.waiver),
            repetitions=max((r.repetitions for r in ran), default=0),
            repetitions_passed=reps_passed,
            failed=failed if failures_judged else 0,
            not_judged=ungraded + (0 if failures_judged else failed),
        )
        rows.append(row)
        if mod in required and not ran:
            not_run.append(f"'{mod}' ({row.title})")
    if not not_run:
        return rows, []
    needs = "every required module" if stage is None or stage.qualifies else f"every module of stage {stage.name}"
    what = f"module {not_run[0]} did not run" if len(not_run) == 1 else (
        f"{len(not_run)} modules did not run: {', '.join(not_run)}")
    return rows, [f"{what}: the gate needs {needs}"]


def _verdict(items: Sequence[ItemResult], rows: Sequence[GateRow], failures: Sequence[ItemResult],
             waived: Sequence[ItemResult], reasons: list[str], unjudged: list[str], checks: Sequence[CheckRow],
             target_unavailable: bool, stage: Stage | None, answers_void: Sequence[str] = (),
             named: Mapping[str, tuple[str, FindingKind]] | None = None) -> GateVerdict:
    # ``answers_void``: why the answers themselves judged nothing (a steered run whose forced answers
    # did not come back): the run is INCOMPLETE, and a failed item is no judged failure.
    # ``named``: the gate row of a reason the caller knows (a module that did not run, a regression).
    named = dict(named or {})
    unjudged += answers_void
    named.update({r: ("answers_void", FindingKind.RUN) for r in answers_void})
    if not items:
        unjudged.append("no protocol test ran")
    for check in checks:
        if check.ok:
            continue
        if check.measured is None:
            reason = check.reason or f"{check.title}: not measured"
            unjudged.append(reason)
        else:
            reason = check.reason or f"{check.title}: {check.result}"
            reasons.append(reason)
        named[reason] = (row_name(check.title, whole=True), FindingKind.CHECK)
    if not (unjudged or failures or reasons):
        # A row not (fully) judged is never part of a PASS, even where no reason of the run names
        # its items (the run's own reason for a refused key is the caller's).
        unjudged += [f"not judged: module {row.module} ({row.title}): {row.not_judged} of {row.items} items"
                     for row in rows if row.verdict == INCOMPLETE]
    judged_failure = bool(reasons or (failures and not answers_void)) and not target_unavailable
    if judged_failure:
        verdict = FAIL
    elif unjudged or failures or reasons:
        verdict = INCOMPLETE
    else:
        verdict = PASS
    findings = [_finding(r, True, named) for r in reasons] + [_finding(r, False, named) for r in unjudged]
    if target_unavailable:  # nothing was judged: no reason is a judged failure
        findings = [replace(f, judged=False) for f in findings]
    findings = _unique_rows(findings)
    return GateVerdict(verdict, tuple(rows), tuple(failures), tuple(waived), tuple(reasons + unjudged),
                       tuple(checks), tuple(unjudged), stage=stage, items=tuple(items), findings=tuple(findings),
                       not_judged=items_not_judged(items, answers_void))


# -- the end of a run: one record in, one decision out ------------------------------------------------

WAIVER_USAGE_ERROR = "usage error in --qualify-waivers"
BASELINE_USAGE_ERROR = "usage error in --qualify-baseline"


@dataclass(frozen=True)
class BaselineInput:
    """An earlier run's ``summary.json`` to compare with, and whether a regression fails the gate."""

    summary: Mapping[str, Any]
    path: str = ""
    threshold_pct: float = DEFAULT_THRESHOLD_PCT
    fail_on_regression: bool = False


@dataclass(frozen=True)
class RunRecord:
    """Everything the gate judges at the end of a run, built once (``evidence/end_of_run.py``
    ``run_record``) and never changed. No pytest: a test builds one by hand.

    ``problems`` fail the deployment (a dead server, a changed identity); ``incomplete`` leave it
    unjudged (an interruption, a partial selection); ``target_unavailable``: the endpoint never
    answered. ``checks`` are gate rows decided before the gate (a limit, an integrity check): a
    new kind of row is a new producer of :class:`CheckRow`, not a change here. ``facts`` are the
    run's measurements the gate reads (:class:`RunFacts`: the items, the timing, SIMULATED or not,
    the serving facts): the SLOs, the claims and the baseline are computed from them."""

    results: tuple[ItemResult, ...]
    modules: Mapping[str, ModuleInfo]
    required: tuple[str, ...]
    stage: Stage | None = None
    problems: tuple[str, ...] = ()
    incomplete: tuple[str, ...] = ()
    # Those of ``incomplete`` that a selection caused (a partial run, a run stopped early): their
    # findings are of kind SELECTION, told by this field, never by the reason's words.
    selection: tuple[str, ...] = ()
    target_unavailable: bool = False
    checks: tuple[CheckRow, ...] = ()
    waivers: WaiverSet | None = None
    slo: Any = None  # the profile's Slo, or None
    claims: Any = None  # the profile's Claims, or None (gate/claims.py)
    facts: RunFacts = field(default_factory=RunFacts)
    baseline: BaselineInput | None = None
    answers_void: tuple[str, ...] = ()  # a steered run's forced answers that did not hold


@dataclass(frozen=True)
class Decision(GateVerdict):
    """The gate's one decision on a run: a :class:`GateVerdict` (verdict, rows, failures, waived,
    reasons) and what the gate read to reach it, as fields the writers render and never re-judge:

    - ``waiver_errors``: waivers naming an item of a hard module (a usage error: exit 4);
    - ``waivers``: the waiver file as applied (``summary.json``'s ``waivers`` section);
    - ``slo``: the SLO rows (``summary.json``'s ``slo`` section; their gate rows are ``checks``);
    - ``claims``: the recipe's claims held to the run's figures (``summary.json``'s ``claims``; their
      gate rows are ``checks`` too);
    - ``baseline``: the comparison with the earlier run, flips included; ``regressions`` the ones
      beyond the threshold (failing the gate with ``--qualify-fail-on-regression``);
    - ``gate_cases``: the findings as the test cases CI counts, built once with the decision (and
      again for any decision made from it, ``with_unjudged``): every JUnit file and the terminal
      render this one list.

    New inputs extend it with a defaulted field, so every writer keeps working."""

    waiver_errors: tuple[str, ...] = ()
    # A baseline SIMULATED beside a real run (or the reverse), found once the endpoint said which it
    # is: no comparison was made, and the run exits as a usage error (4), as a bad waiver does.
    baseline_errors: tuple[str, ...] = ()
    waivers: Mapping[str, Any] | None = None
    slo: tuple[SloRow, ...] = ()
    claims: tuple[ClaimRow, ...] = ()
    baseline: Mapping[str, Any] | None = None
    regressions: tuple[str, ...] = ()
    gate_cases: tuple[GateCase, ...] = field(init=False, default=())

    def __post_init__(self) -> None:
        # Derived, never handed in: a decision cannot carry cases of another verdict.
        object.__setattr__(self, "gate_cases", gate_cases(self))


def decide(record: RunRecord) -> Decision:
    """Apply the gate once to the run's record. Pure: neither the record, its results nor its
    waiver set change (waivers are matched on a copy; a waived item is a copy carrying its waiver)."""
    reasons = list(record.problems)
    named: dict[str, tuple[str, FindingKind]] = {}
    waiver_errors: list[str] = []
    waiver_for = None
    applied_waivers: WaiverSet | None = None
    if record.waivers is not None:
        ws = record.waivers
        applied_waivers = WaiverSet(ws.waivers, ws.waivable_modules, ws.source)
        seen = candidates(record.results)
        applied_waivers.observe(seen)
        waiver_errors = hard_module_conflicts(ws.waivers, seen, ws.waivable_modules)
        reasons += [f"{WAIVER_USAGE_ERROR}: {e}" for e in waiver_errors]
        named.update({f"{WAIVER_USAGE_ERROR}: {e}": ("waivers", FindingKind.WAIVER) for e in waiver_errors})
        waiver_for = applied_waivers.waiver_for
    items, failures, waived = _apply_waivers(record.results, record.modules, waiver_for)
    rows, missing = _rows(items, record.modules, record.required, record.stage,
                          _failures_judged(record.answers_void, record.target_unavailable))

    facts = record.facts
    slo_rows = evaluate_slo(record.slo, facts.items, facts.timing) if record.slo else []
    lanes = list(record.stage.lanes) if record.stage is not None else None
    claim_rows = evaluate_claims(record.claims, facts, record.required, lanes,
                                 qualifies=record.stage is None or record.stage.qualifies)
    checks = [*record.checks, *check_rows(slo_rows), *claim_check_rows(claim_rows)]

    comparison = None
    regressions: list[str] = []
    baseline_errors: list[str] = []
    mismatch = (simulated_mismatch(record.baseline.summary, simulated=facts.simulated, path=record.baseline.path)
                if record.baseline is not None else None)
    if mismatch:
        baseline_errors.append(mismatch)
        reasons.append(f"{BASELINE_USAGE_ERROR}: {mismatch}")
        named[f"{BASELINE_USAGE_ERROR}: {mismatch}"] = ("baseline", FindingKind.RUN)
    elif record.baseline is not None:
        b = record.baseline
        comparison = compare(facts.summary_sections([row.as_dict() for row in rows]), b.summary, path=b.path,
                             threshold_pct=b.threshold_pct, fail_on_regression=b.fail_on_regression)
        comparison["flips"] = flips(facts.items, b.summary.get("items") or [])
        regressions = list(comparison["regressions"])
        if b.fail_on_regression and regressions:
            reason = (f"performance regression against baseline run {comparison['run_id']} beyond "
                      f"{b.threshold_pct:g}%: " + "; ".join(regressions))
            reasons.append(reason)
            named[reason] = ("regression", FindingKind.REGRESSION)

    verdict = _verdict(items, rows, failures, waived, reasons, [*record.incomplete, *_not_graded(items), *missing], checks,
                       record.target_unavailable, record.stage, record.answers_void,
                       named={**named, **_module_names(missing),
                              **{r: (row_name(r), FindingKind.SELECTION) for r in record.selection}})
    return Decision(**{f: getattr(verdict, f) for f in GateVerdict.__dataclass_fields__},
                    waiver_errors=tuple(waiver_errors), baseline_errors=tuple(baseline_errors),
                    waivers=applied_waivers.as_dict() if applied_waivers is not None else None,
                    slo=tuple(slo_rows), claims=tuple(claim_rows), baseline=comparison, regressions=tuple(regressions))


def with_unjudged(decision: Decision, reason: str) -> Decision:
    """The decision when something after it left the run unjudged (its evidence could not be
    written): a FAIL stays a FAIL, anything else becomes INCOMPLETE, with the reason listed. Not a
    second judgement: nothing the gate read is read again."""
    return replace(decision, verdict=FAIL if decision.verdict == FAIL else INCOMPLETE,
                   reasons=(*decision.reasons, reason), incomplete=(*decision.incomplete, reason),
                   findings=(*decision.findings, Finding("evidence_bundle", reason, FindingKind.RUN, judged=False)))


def render_table(verdict: GateVerdict) -> list[str]:
    """``Gate | Result`` as aligned text lines for the terminal."""
    header = ("Gate", "Result")
    body = [(row.title, row.result + (f"  {row.verdict}" if row.verdict != PASS else "")) for row in verdict.rows]
    body += [(c.title, c.result + (f"  {c.verdict}" if c.verdict != PASS else "")) for c in verdict.checks]
    width = max(len(header[0]), *(len(b[0]) for b in body)) if body else len(header[0])
    lines = [f"{header[0]:<{width}} | {header[1]}", f"{'-' * width}-+-{'-' * 24}"]
    lines += [f"{a:<{width}} | {b}" for a, b in body]
    return lines




def failure_kinds(items: Iterable[ItemResult]) -> dict[str, dict[str, int]]:
    """Failed items per module and kind (``format`` / ``fact`` / ``other``), modules in first-seen
    order: "the model did not follow the answer contract" counted apart from "it got it wrong"."""
    counts: dict[str, dict[str, int]] = {}
    for r in items:
        kind = r.failure_kind
        if kind is not None:
            row = counts.setdefault(r.module, dict.fromkeys(FAILURE_KINDS, 0))
            row[kind if kind in row else "other"] += 1
    return counts
