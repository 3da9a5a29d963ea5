"""The self-test's run, from start to exit status: the plan over the profile's modules, one
reference-server run per case (two at a time), ``selftest.json`` written, the table and the last
line printed. No pytest here: ``hooks/selftest_mode.py`` calls it from ``pytest_cmdline_main``,
before the terminal reporter exists, so the output is plain lines through ``say``."""

from __future__ import annotations

import os
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from pytest_qualify.selftest import engine
from pytest_qualify.selftest.bundle import write_selftest_bundle
from pytest_qualify.settings import OPTIONS, Mode, Settings


def run_selftest(settings: Settings, suites_dir: Path, say: Callable[[str], None] = print) -> int:
    """Run the self-test; 0 when the gate passed the conforming server and caught every fault its
    profile can see, 1 otherwise. A profile or fault table that cannot be used raises
    ``engine.SelftestError``, its message naming the option (a usage error on the pytest side)."""
    from pytest_qualify.profiles import ProfileError, load_profile
    from pytest_qualify.reference.faults import SERVER_FAULTS
    from pytest_qualify.reference.oracle import known_faults

    try:
        profile = load_profile(settings.profile or "")
    except ProfileError as exc:
        raise engine.SelftestError(f"--qualify: {exc}") from None
    # The children run in folders of their own: a profile file is handed to them by its full path.
    spec = settings.profile or ""
    if Path(spec).expanduser().is_file():
        spec = str(Path(spec).expanduser().resolve())
    try:
        cases, left_out = engine.plan(profile.required_modules, [*SERVER_FAULTS, *known_faults()])
    except engine.SelftestError as exc:
        raise engine.SelftestError(f"--qualify-selftest: {exc}") from None
    run_id = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + uuid.uuid4().hex[:6]
    run_dir = settings.evidence_dir / run_id
    env = engine.child_env(os.environ, [opt.env for opt in OPTIONS])
    jobs = engine.DEFAULT_JOBS
    if settings.mode == Mode.ATTACH or settings.stage != "full" or settings.waivers or settings.baseline:
        # Every run of the self-test is its own: the reference server, the full stage, no waiver.
        say("qualify self-test: the endpoint, stage, waiver and baseline settings do not apply: every run "
            "is against the reference server, the full stage, with no waiver or baseline")
    say(f"qualify self-test: profile {profile.name}; {len(cases)} runs against the reference server "
        f"(1 conforming, {len(cases) - 1} faults), {jobs} at a time; {len(left_out)} fault(s) not run")

    def progress(o: engine.CaseOutcome) -> None:
        say(f"  {o.case.label:<32} {o.case.module:<16} {o.verdict:<10} {'ok' if o.ok else 'WRONG'}"
            f"  {o.time_s:.1f} s")

    started = time.time()
    with tempfile.TemporaryDirectory(prefix="qualify-selftest-") as work:
        outcomes = engine.run_all(
            cases, lambda case: engine.run_case(case, spec, suites_dir, env, Path(work)), jobs, progress)
    finished = time.time()
    data = engine.record({"name": profile.name, "source": profile.source, "modules": list(profile.required_modules)},
                         outcomes, left_out, started, finished, run_id, jobs)
    write_selftest_bundle(run_dir, data)
    say("")
    for line in engine.render_table(outcomes, left_out):
        say(line)
    wrong = [o for o in outcomes if not o.ok]
    say("")
    code = 0 if not wrong else 1
    head = f"SELF-TEST: {data['verdict']} (exit {code})"
    if wrong:
        head += ": " + "; ".join(f"{o.case.label}: {o.reason}" for o in wrong[:3]) + (" …" if len(wrong) > 3 else "")
    say(f"{head} · {data['wall_s']:.0f} s · evidence {run_dir}")
    return code
