"""The gate self-test's pytest side: ``--qualify-selftest`` runs it instead of a qualification
(from ``pytest_cmdline_main``: no server of its own, no collection), and
``--qualify-require-selftest`` finds the self-test a qualification needs before any server starts
and names it in ``summary.json`` (under ``extra``) and ``report.md``. The logic is in the
``selftest/`` room (no pytest there)."""

from __future__ import annotations

import os
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from pytest_qualify.run import RunState
from pytest_qualify.settings import OPTIONS, Mode, SelftestRequirement, Settings
from pytest_qualify.selftest.bundle import write_selftest_bundle


def run_selftest(config: pytest.Config, settings: Settings) -> int:
    """Run the self-test; exit 0 when the gate passed the conforming server and caught every fault
    its profile can see, 1 otherwise. Plain output: the terminal reporter does not exist yet."""
    from pytest_qualify.selftest import engine
    from pytest_qualify.hooks.collection import suites_dir
    from pytest_qualify.profiles import ProfileError, load_profile
    from pytest_qualify.reference.faults import SERVER_FAULTS
    from pytest_qualify.reference.oracle import known_faults

    try:
        profile = load_profile(settings.profile or "")
    except ProfileError as exc:
        raise pytest.UsageError(f"--qualify: {exc}") from None
    # The children run in folders of their own: a profile file is handed to them by its full path.
    spec = settings.profile or ""
    if Path(spec).expanduser().is_file():
        spec = str(Path(spec).expanduser().resolve())
    try:
        cases, left_out = engine.plan(profile.required_modules, [*SERVER_FAULTS, *known_faults()])
    except engine.SelftestError as exc:
        raise pytest.UsageError(f"--qualify-selftest: {exc}") from None
    run_id = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + uuid.uuid4().hex[:6]
    run_dir = settings.evidence_dir / run_id
    env = engine.child_env(os.environ, [opt.env for opt in OPTIONS])
    jobs = engine.DEFAULT_JOBS
    if settings.mode == Mode.ATTACH or settings.stage != "full" or settings.waivers or settings.baseline:
        # Every run of the self-test is its own: the reference server, the full stage, no waiver.
        print("qualify self-test: the endpoint, stage, waiver and baseline settings do not apply: every run "
              "is against the reference server, the full stage, with no waiver or baseline", flush=True)
    print(f"qualify self-test: profile {profile.name}; {len(cases)} runs against the reference server "
          f"(1 conforming, {len(cases) - 1} faults), {jobs} at a time; {len(left_out)} fault(s) not run", flush=True)

    def progress(o: engine.CaseOutcome) -> None:
        print(f"  {o.case.label:<32} {o.case.module:<16} {o.verdict:<10} {'ok' if o.ok else 'WRONG'}"
              f"  {o.time_s:.1f} s", flush=True)

    started = time.time()
    with tempfile.TemporaryDirectory(prefix="qualify-selftest-") as work:
        outcomes = engine.run_all(
            cases, lambda case: engine.run_case(case, spec, suites_dir(), env, Path(work)), jobs, progress)
    finished = time.time()
    data = engine.record({"name": profile.name, "source": profile.source, "modules": list(profile.required_modules)},
                           outcomes, left_out, started, finished, run_id, jobs)
    write_selftest_bundle(run_dir, data)
    print()
    for line in engine.render_table(outcomes, left_out):
        print(line)
    wrong = [o for o in outcomes if not o.ok]
    print()
    code = 0 if not wrong else 1
    head = f"SELF-TEST: {data['verdict']} (exit {code})"
    if wrong:
        head += ": " + "; ".join(f"{o.case.label}: {o.reason}" for o in wrong[:3]) + (" …" if len(wrong) > 3 else "")
    print(f"{head} · {data['wall_s']:.0f} s · evidence {run_dir}", flush=True)
    return code


class RequiredSelftest:
    """The self-test a qualification requires: found at configure (a usage error when there is
    none, so no server starts and no GPU time is spent on a run that could not be signed), named
    in the header, ``summary.json`` (``extra.selftest``) and ``report.md``."""

    def __init__(self, accepted: Any) -> None:
        self.accepted = accepted

    @classmethod
    def find(cls, state: RunState) -> "RequiredSelftest":
        from pytest_qualify.selftest import engine
        from pytest_qualify.evidence.summary import tool_version

        settings = state.settings
        assert state.stage_run is not None
        try:
            req = SelftestRequirement.parse(settings.require_selftest or "")
            accepted = engine.find(req, settings.evidence_dir, tool_version(), state.stage_run.stage.modules)
        except ValueError as exc:  # a malformed requirement or a SelftestError
            raise pytest.UsageError(f"--qualify-require-selftest: {exc}") from None
        return cls(accepted)

    def header_line(self) -> str:
        a = self.accepted
        return (f"qualify: gate self-test {a.run_id} (pytest-qualify {a.plugin_version}, profile {a.profile}, "
                f"{a.age_days:.1f} days old) required and found")

    def pytest_qualify_summary(self, config: pytest.Config, summary: dict[str, Any]) -> dict[str, Any]:
        return {"selftest": self.accepted.as_dict()}
