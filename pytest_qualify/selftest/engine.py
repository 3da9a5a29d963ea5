"""The gate self-test: the installed plugin, on this machine with these versions, runs the profile's
protocol against the reference server once conforming and once per fault class the profile's
modules can see, and must PASS the first and FAIL each fault in the module it belongs to, with the
reference server's record showing that fault engaged.

An operator who signs a promotion trusts that the gate fails a broken deployment; this shows it,
with their python, pytest and openai. The fault table (``selftest.toml``) is data: each fault
switch of the reference server names the module that must catch it, or why it is not run. Each
run is its own ``python -m pytest`` subprocess (one reference server each), two at a time.

``selftest.json`` goes into an evidence bundle of its own (``SHA256SUMS``, an in-toto statement),
and a qualification can require one (``--qualify-require-selftest``). No pytest here.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from pytest_qualify.bundle_format.earlier import EarlierRunError, read_earlier, verify_bundle
from pytest_qualify.bundle_format.manifest import SELFTEST_FILE
from pytest_qualify.bundle_format.schema import SELFTEST_SCHEMA_ID
from pytest_qualify.gate.decide import Result
from pytest_qualify.settings import SelftestRequirement

CONFORMING = "(conforming)"
WHOLE_PROTOCOL = "(every module)"
# Two runs at a time: the machine this runs on may have only two cores, and each run is a pytest
# process plus a reference server.
DEFAULT_JOBS = 2
# A faulted run that does not end in this time is a finding of its own, not a hang of the self-test.
RUN_TIMEOUT_S = 900.0
# The reference server is ready in about a second; a fault that keeps it from becoming ready must
# not hold the self-test for the profile's production startup timeout.
STARTUP_TIMEOUT_S = 60.0


class SelftestError(ValueError):
    """A self-test table or requirement that cannot be used; the message names it."""


@dataclass(frozen=True)
class FaultRow:
    """One row of ``selftest.toml``."""

    name: str
    module: str | None  # the module whose gate must catch it; None: not run (see skip)
    arg: str = ""
    reason: str = ""  # text the run's verdict reasons must hold, for a run-level failure
    skip: str = ""

    @property
    def spec(self) -> str:
        return f"{self.name}={self.arg}" if self.arg else self.name


@dataclass(frozen=True)
class Case:
    """One run of the self-test: conforming (``fault`` None, the whole protocol) or one fault."""

    fault: FaultRow | None

    @property
    def label(self) -> str:
        return self.fault.spec if self.fault else CONFORMING

    @property
    def module(self) -> str:
        return self.fault.module or "" if self.fault else WHOLE_PROTOCOL


@dataclass(frozen=True)
class CaseOutcome:
    case: Case
    ok: bool
    verdict: str  # the run's verdict: PASS, FAIL, INCOMPLETE, or ERROR when it wrote none
    exit_code: int
    reason: str
    time_s: float

    def as_dict(self) -> dict[str, Any]:
        return {"fault": self.case.fault.name if self.case.fault else None, "spec": self.case.label,
                "expected_module": self.case.module, "ok": self.ok, "verdict": self.verdict,
                "exit_code": self.exit_code, "reason": self.reason, "time_s": round(self.time_s, 2)}


@cache
def fault_table() -> dict[str, FaultRow]:
    """``selftest.toml``: every fault switch's module (or why it is not run)."""
    raw = tomllib.loads(resources.files("pytest_qualify.selftest").joinpath("selftest.toml").read_text())
    rows = {}
    for name, row in raw["faults"].items():
        if bool(row.get("module")) == bool(row.get("skip")):
            raise SelftestError(f"selftest.toml: fault {name!r} needs exactly one of 'module' and 'skip'")
        rows[name] = FaultRow(name, row.get("module"), str(row.get("arg", "")), str(row.get("reason", "")),
                              str(row.get("skip", "")))
    return rows


def plan(required_modules: Sequence[str], known_faults: Sequence[str]) -> tuple[list[Case], list[tuple[FaultRow, str]]]:
    """The runs for a profile that runs ``required_modules``, and the faults left out with why.

    A fault switch the table does not know is an error: it would otherwise be skipped unseen."""
    table = fault_table()
    unknown = [name for name in known_faults if name not in table]
    if unknown:
        raise SelftestError(f"selftest.toml has no row for the reference server's fault(s) {', '.join(unknown)}")
    cases = [Case(None)]
    left_out: list[tuple[FaultRow, str]] = []
    for name in known_faults:
        row = table[name]
        if row.skip:
            left_out.append((row, row.skip))
        elif row.module not in required_modules:
            left_out.append((row, f"not visible to this profile: module {row.module!r} is not in its modules.required"))
        else:
            cases.append(Case(row))
    return cases, left_out


def command(case: Case, profile: str, evidence_dir: Path, suites: Path, python: str = sys.executable) -> list[str]:
    """The run's ``python -m pytest`` command: one repetition, the full stage, the reference server.
    A faulted run runs only its module's suite: a judged failure outranks the selection's
    incompleteness, so it exits 1 when the module catches the fault and 2 when it does not."""
    cmd = [python, "-m", "pytest", "-p", "no:cacheprovider", "-q", f"--qualify={profile}",
           "--qualify-endpoint", "reference", "--repeat", "1", "--qualify-stage", "full",
           "--qualify-evidence", str(evidence_dir), "--qualify-startup-timeout", f"{STARTUP_TIMEOUT_S:g}"]
    if case.fault is not None:
        cmd += ["--qualify-reference-fault", case.fault.spec, str(suites / f"test_{case.fault.module}.py")]
    return cmd


def child_env(env: Mapping[str, str], option_envs: Sequence[str]) -> dict[str, str]:
    """The parent's environment without the plugin's own settings and PYTEST_ADDOPTS: a child must
    not inherit a waiver, a baseline, a stage, an endpoint or the self-test switch itself."""
    drop = set(option_envs) | {"PYTEST_ADDOPTS"}
    return {k: v for k, v in env.items() if k not in drop}


def judge(case: Case, exit_code: int, summary: Mapping[str, Any] | None) -> tuple[bool, str, str]:
    """(ok, verdict, reason) of one run, from its exit status and ``summary.json``."""
    if summary is None:
        return False, "ERROR", f"the run wrote no summary.json (exit {exit_code})"
    verdict = summary["verdict"]
    result = str(verdict["result"])
    failures = verdict.get("failures") or []
    reasons = [str(r) for r in verdict.get("reasons") or []]
    if case.fault is None:
        if exit_code == 0 and result == Result.PASS:
            return True, result, "every module passed"
        first = (failures[0]["module"] + ": " + str(failures[0]["reason"])) if failures else "; ".join(reasons)
        return False, result, f"the conforming server did not pass (exit {exit_code}): {first}"
    module = case.fault.module
    if case.fault.reason:
        # A run-level fault (the identity changed under the run): the verdict's reasons name it.
        named = [r for r in reasons if case.fault.reason in r]
        if exit_code == 1 and result == Result.FAIL and named:
            return _engaged(case, summary, result, _short(named[0]))
        return False, result, (f"not caught: the run ended {result} (exit {exit_code}) and no reason says "
                               f"{case.fault.reason!r}")
    mine = [f for f in failures if f.get("module") == module]
    if exit_code != 1 or result != Result.FAIL or not mine:
        seen = sorted({str(f.get("module")) for f in failures})
        return False, result, (f"not caught: the run ended {result} (exit {exit_code}) with "
                               + (f"failures in {', '.join(seen)}" if seen else "no failed item")
                               + f", not a failure of module {module!r}")
    first = mine[0]
    where = first.get("item") or first.get("nodeid")
    return _engaged(case, summary, result, _short(f"{where}: {first.get('reason') or first.get('outcome')}"))


def _engaged(case: Case, summary: Mapping[str, Any], result: str, caught: str) -> tuple[bool, str, str]:
    """A caught fault counts only where the reference server recorded it engaged (``summary.json``
    ``faults``): a failure the fault did not cause proves nothing about the gate catching it."""
    assert case.fault is not None
    armed = [f for f in (summary.get("faults") or {}).get("armed") or [] if f.get("name") == case.fault.name]
    if armed and armed[0].get("engaged") is True:
        return True, result, caught
    return False, result, (f"not shown to engage: the run's summary.json does not record {case.fault.spec} as engaged "
                           f"by the reference server, so its failure ({caught}) proves nothing about the fault")


def _short(text: str, limit: int = 160) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def run_case(case: Case, profile: str, suites: Path, env: Mapping[str, str], workdir: Path) -> CaseOutcome:
    """Run one case in its own folder and judge it."""
    folder = Path(tempfile.mkdtemp(prefix="case-", dir=workdir))
    evidence = folder / "ev"
    start = time.monotonic()
    try:
        proc = subprocess.run(command(case, profile, evidence, suites), cwd=folder, env=dict(env),
                              capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
        code = proc.returncode
    except subprocess.TimeoutExpired:
        return CaseOutcome(case, False, "ERROR", -1, f"the run did not end within {RUN_TIMEOUT_S:g} s", time.monotonic() - start)
    elapsed = time.monotonic() - start
    summaries = sorted(evidence.glob("*/summary.json"))
    summary = json.loads(summaries[-1].read_text()) if summaries else None
    ok, verdict, reason = judge(case, code, summary)
    if summary is None:
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-1:] or [""]
        reason = _short(f"{reason}: {tail[0]}")
    return CaseOutcome(case, ok, verdict, code, reason, elapsed)


def run_all(cases: Sequence[Case], runner: Callable[[Case], CaseOutcome], jobs: int = DEFAULT_JOBS,
            progress: Callable[[CaseOutcome], None] | None = None) -> list[CaseOutcome]:
    """Every case, ``jobs`` at a time, in the table's order."""
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = [pool.submit(runner, case) for case in cases]
        out = []
        for future in futures:
            outcome = future.result()
            if progress is not None:
                progress(outcome)
            out.append(outcome)
    return out


def versions() -> dict[str, str]:
    """The plugin's version and those of what a verdict depends on, on this machine: the run
    provenance's reading (``evidence/provenance.py``), in selftest.json's own keys."""
    from pytest_qualify.evidence.provenance import versions as run_versions

    found = run_versions()
    return {key: found[key] for key in ("pytest-qualify", "python", "pytest", "openai")}


def record(profile: Mapping[str, Any], outcomes: Sequence[CaseOutcome], left_out: Sequence[tuple[FaultRow, str]],
           started: float, finished: float, run_id: str, jobs: int) -> dict[str, Any]:
    """``selftest.json``."""
    caught_modules = sorted({o.case.module for o in outcomes if o.ok and o.case.fault is not None})
    passed = bool(outcomes) and all(o.ok for o in outcomes)
    return {
        "schema": SELFTEST_SCHEMA_ID,
        "schema_version": 1,
        "run_id": run_id,
        "verdict": Result.PASS if passed else Result.FAIL,
        "versions": versions(),
        "profile": dict(profile),
        "started_at": _iso(started),
        "finished_at": _iso(finished),
        "wall_s": round(finished - started, 2),
        "jobs": jobs,
        "modules_proven": caught_modules,
        "runs": [o.as_dict() for o in outcomes],
        "not_run": [{"fault": row.name, "expected_module": row.module, "why": why} for row, why in left_out],
    }


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def render_table(outcomes: Sequence[CaseOutcome], left_out: Sequence[tuple[FaultRow, str]]) -> list[str]:
    """fault | expected module | verdict | reason | time, aligned for the terminal."""
    rows = [("fault", "expected module", "verdict", "time", "reason")]
    for o in outcomes:
        mark = "ok" if o.ok else "WRONG"
        rows.append((o.case.label, o.case.module, f"{o.verdict} ({mark})", f"{o.time_s:.1f} s", o.reason))
    for row, why in left_out:
        rows.append((row.spec if row.arg else row.name, row.module or "-", "not run", "-", _short(why, 120)))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = []
    for i, r in enumerate(rows):
        lines.append(" | ".join(r[j].ljust(widths[j]) for j in range(4)) + " | " + r[4])
        if i == 0:
            lines.append("-+-".join("-" * w for w in widths) + "-+-" + "-" * 6)
    return lines


# -- requiring one ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Accepted:
    path: str
    run_id: str
    finished_at: str
    age_days: float
    profile: str
    plugin_version: str
    sha256: str
    modules_proven: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"path": self.path, "run_id": self.run_id, "finished_at": self.finished_at,
                "age_days": round(self.age_days, 3), "profile": self.profile, "plugin_version": self.plugin_version,
                "sha256": self.sha256, "modules_proven": list(self.modules_proven)}


def _check(path: Path, req: SelftestRequirement, plugin_version: str, modules: Sequence[str], now: float) -> Accepted:
    """The self-test at ``path`` if it may back this run, else SelftestError saying why."""
    label = f"self-test {path}"
    try:
        earlier = read_earlier(path, label, SELFTEST_SCHEMA_ID)
    except EarlierRunError as exc:
        raise SelftestError(str(exc)) from None
    data = earlier.data
    if data.get("verdict") != Result.PASS:
        raise SelftestError(f"{label}: its verdict is {data.get('verdict')!r}: the gate did not prove itself")
    version = str((data.get("versions") or {}).get("pytest-qualify"))
    if version != plugin_version:
        raise SelftestError(f"{label}: made by pytest-qualify {version}, this run is {plugin_version}")
    try:
        finished = datetime.strptime(str(data["finished_at"]), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
    except (KeyError, ValueError):
        raise SelftestError(f"{label}: no finished_at time") from None
    age = (now - finished.timestamp()) / 86400.0
    if age > req.max_age_days:
        raise SelftestError(f"{label}: {age:.1f} days old, more than the {req.max_age_days:g} required")
    proven = tuple(data.get("modules_proven") or ())
    missing = [m for m in modules if m not in proven]
    if missing:
        raise SelftestError(f"{label}: it did not show this run's module(s) {', '.join(missing)} catching a fault "
                            f"(it proved {', '.join(proven) or 'none'})")
    try:
        verify_bundle(earlier, label)
    except EarlierRunError as exc:
        raise SelftestError(str(exc)) from None
    return Accepted(str(path), str(data.get("run_id")), str(data["finished_at"]), age,
                    str((data.get("profile") or {}).get("name")), version, earlier.sha256, proven)


def find(req: SelftestRequirement, evidence_dir: Path, plugin_version: str, modules: Sequence[str],
         now: float | None = None) -> Accepted:
    """The self-test backing this run: the named one, or the newest one in ``evidence_dir`` that
    qualifies; SelftestError naming every candidate's problem when none does."""
    now = time.time() if now is None else now
    if req.path is not None:
        path = req.path / SELFTEST_FILE if req.path.is_dir() else req.path
        return _check(path, req, plugin_version, modules, now)
    candidates = sorted(evidence_dir.glob(f"*/{SELFTEST_FILE}"), key=lambda p: p.stat().st_mtime, reverse=True)
    problems = []
    for path in candidates:
        try:
            return _check(path, req, plugin_version, modules, now)
        except SelftestError as exc:
            problems.append(str(exc))
    raise SelftestError(f"no self-test of pytest-qualify {plugin_version} in {evidence_dir} no older than "
                        f"{req.max_age_days:g} days passed for this run's modules; run "
                        "`pytest --qualify=PROFILE --qualify-selftest` first"
                        + (f" ({'; '.join(problems[:3])})" if problems else ""))
