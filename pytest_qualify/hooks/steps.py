"""The order of the run's steps on the controller, written once. Every other concern of the
plugin offers its steps; this is the one place that says when each runs.

Start (session start): start the server; the served identity's first reading; tell user
plugins; the first /metrics scrape.
End (session finish): the run-level problems (failing or leaving the run incomplete); the
server's death; the served identity read again; the last scrape; the verdict of the run's stage
(SLO rows included) and the bundle; tell user plugins; suite properties for --junitxml; the exit
status (0 PASS, 1 FAIL, 2 INCOMPLETE). Then the terminal summary; and at unconfigure, stop the
server, then the CI job summary and the provenance statement, then seal the bundle (its
``SHA256SUMS`` covers the server log, which grows until the server stops, and the statement);
last, the verdict as the run's last terminal line.
"""

from __future__ import annotations

from typing import Any

import pytest

from pytest_qualify.evidence.session import EvidenceState
from pytest_qualify.hooks.evidence import EvidenceHooks
from pytest_qualify.hooks import stage
from pytest_qualify.hooks.results import exit_status, run_problems, steering_void, write_gate_table
from pytest_qualify.hooks.server_session import ServerSession
from pytest_qualify.profiles import module_registry
from pytest_qualify.run import RunState


class RunSteps:
    """Registered on the controller only."""

    def __init__(self, config: pytest.Config, state: RunState, ev: EvidenceState,
                 server: ServerSession, evidence: EvidenceHooks) -> None:
        self.config = config
        self.state = state
        self.ev = ev
        self.server = server
        self.evidence = evidence

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        if session.config.option.collectonly:
            return
        if not self.server.start():
            return
        state = self.state
        stage.read_start(state)
        self.config.hook.pytest_qualify_target_started(
            config=self.config, base_url=state.base_url or "", server_info=dict(state.server_info)
        )
        self.evidence.scrape_start()

    # First among sessionfinish hooks: pytest's junitxml writes its file, and the terminal reporter
    # prints the summary, in theirs; both need the verdict and the exit status set here.
    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if session.config.option.collectonly:
            return
        from pytest_qualify.evidence.verdict import conclude, run_record

        state, ev, hook = self.state, self.ev, self.config.hook
        problems, incomplete = run_problems(session, state, exitstatus)
        died = None
        if not state.dead and state.target is not None:
            died = state.target.death()
            if died:
                problems.append(f"server died during the run: {died}")
        problems += stage.end_problems(state, died)
        self.evidence.scrape_end()
        stage_run = stage.stage_of(state)
        record = run_record(state, ev, modules=module_registry(), required=stage_run.stage.modules, problems=problems,
                            incomplete=incomplete, died=died, stage_run=stage_run, secrets=state.secrets,
                            answers_void=steering_void(state))
        verdict = conclude(
            record, state, ev, secrets=state.secrets, stage_run=stage_run,
            extra_fields=lambda summary: hook.pytest_qualify_summary(config=self.config, summary=summary),
        )
        state.verdict = verdict
        if ev.summary is not None:
            hook.pytest_qualify_summary_written(config=self.config, summary=ev.summary, bundle_dir=ev.bundle_dir)
        hook.pytest_qualify_verdict_reached(config=self.config, verdict=verdict)
        self.evidence.add_junit_suite_properties(self.config)
        waived_reports = sum(ev.cases[r.nodeid].failed_reports for r in verdict.waived if r.nodeid in ev.cases)
        session.exitstatus = exit_status(
            session.exitstatus, verdict,
            usage_error=bool(verdict.waiver_errors),
            testsfailed=session.testsfailed, waived_failed_reports=waived_reports,
        )
        ev.exit_code = int(session.exitstatus)  # the provenance and the job summary record it

    def pytest_terminal_summary(self, terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
        if self.state.verdict is None:
            return
        from pytest_qualify.evidence.terminal import terminal_lines

        tr = terminalreporter
        write_gate_table(tr, self.state)
        tr.write_line("")
        for line in terminal_lines(self.ev):
            tr.write_line(line)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self.server.stop()
        if config.option.collectonly:
            return
        from pytest_qualify.evidence.bundle import seal
        from pytest_qualify.evidence.terminal import verdict_line
        from pytest_qualify.evidence.verdict import finish_bundle

        # The job summary and the provenance statement over the final files, then the manifest
        # over everything (the statement included).
        errors = finish_bundle(self.state, self.ev)
        error = seal(self.state.run_dir, self.state.secrets)
        errors += [error] if error else []
        tr = config.pluginmanager.get_plugin("terminalreporter")
        if tr is None:
            return
        for error in errors:
            tr.write_line(f"qualify: {error}", red=True)
        verdict = self.state.verdict
        if verdict is not None:
            # After pytest's own "N passed" line: the verdict is the run's last line, for CI logs.
            tr.write_line(verdict_line(verdict, self.ev), bold=True, green=verdict.passed, red=not verdict.passed)
