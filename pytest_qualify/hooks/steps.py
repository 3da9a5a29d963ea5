"""The order of the run's steps on the controller, written once. Every other concern of the
plugin offers its steps; this is the one place that says when each runs.

Start: the usage errors only the collection can show (a waiver naming a hard module or a whole
module, a rerun marker), then start the server — at the end of collection (under xdist: once the
first worker has collected, before any item is scheduled), so a usage error starts nothing and
writes no bundle; an attached endpoint is read at session start instead (nothing is started, and
the header can say what it declares itself). Then the first step (health, key, identity: a run
that cannot be judged stops INCOMPLETE, a served identity that is not the profile's stops FAIL);
the served identity's first reading; tell user plugins; the first /metrics scrape.
End (session finish): the run-level problems (failing or leaving the run incomplete); the
server's death; the served identity read again; the last scrape; the server told to stop (a
launched one shuts down while the rest is written); the verdict of the run's stage
(SLO rows included) and the bundle; tell user plugins; suite properties for --junitxml; the exit
status (0 PASS, 1 FAIL, 2 INCOMPLETE). Then the terminal summary; and at unconfigure, wait for the
server's stop, then the CI job summary and the provenance statement, then seal the bundle (its
``SHA256SUMS`` covers the server log, which grows until the server stops, and the statement);
last, the verdict as the run's last terminal line.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from pytest_qualify.evidence.session import EvidenceState
from pytest_qualify.gate.decide import GATE_CLASSNAME, GateCase
from pytest_qualify.hooks.evidence import EvidenceHooks
from pytest_qualify.hooks import stage
from pytest_qualify.hooks.collection import retried_items
from pytest_qualify.hooks.results import exit_status, run_problems, steering_void, write_gate_table
from pytest_qualify.hooks.server_session import ServerSession, first_step
from pytest_qualify.hooks.xdist import is_xdist_controller, report_usage_error, workers_usage_error, write_handover
from pytest_qualify.profiles import module_registry
from pytest_qualify.run import RunState
from pytest_qualify.settings import Mode


def discard_run_dir(state: RunState) -> None:
    """After a usage error: the run's own folder (made at configure, named by its run id) goes, so
    no evidence is left of a run that never started."""
    import shutil

    shutil.rmtree(state.run_dir, ignore_errors=True)
    if state.made_evidence_dir:
        try:
            state.run_dir.parent.rmdir()  # only while empty: another run's bundle is never touched
        except OSError:
            pass


def collection_usage_error(config: pytest.Config, state: RunState, evidence: EvidenceHooks,
                           items: list[pytest.Item]) -> str | None:
    """The usage errors only the collected items show: a rerun or repetition marker, a waiver that
    names a hard module's test or matches other than the items it expects."""
    return retried_items(config, items) or evidence.waiver_usage_error(items)


class RunSteps:
    """Registered on the controller only."""

    def __init__(self, config: pytest.Config, state: RunState, ev: EvidenceState,
                 server: ServerSession, evidence: EvidenceHooks) -> None:
        self.config = config
        self.state = state
        self.ev = ev
        self.server = server
        self.evidence = evidence
        self.started = False

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        # Before the terminal reporter's header (trylast): an attached endpoint is only read, and
        # what it says it is (SIMULATED) belongs in the header. Not with waivers: the collection may
        # refuse them (a usage error), and a refused run asks the endpoint nothing.
        if not session.config.option.collectonly and self.state.settings.mode == Mode.ATTACH \
                and self.ev.waivers is None:
            self._start()

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        if session.config.option.collectonly:
            return
        problem = collection_usage_error(self.config, self.state, self.evidence, session.items)
        if problem:
            raise pytest.UsageError(problem)
        if session.testsfailed and not session.config.option.continue_on_collection_errors:
            return  # collection errors: nothing will run, so nothing is started
        self._start()

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: Any) -> None:
        """Under -n: the first worker to finish collecting has run the collection's usage checks
        (xdist.report_usage_error); then the server starts, before xdist schedules any item."""
        if self.started:
            return
        problem = workers_usage_error(self.state)
        if problem:
            raise pytest.UsageError(problem)
        self._start()

    def _start(self) -> None:
        if self.started:
            return
        self.started = True
        state = self.state
        up = self.server.start()
        stop = state.stop = first_step(state)
        if stop is not None:
            self.server.progress(f"run stopped at its first step: {stop.reason}")
        if is_xdist_controller(self.config):
            write_handover(state)
        if not up or (stop is not None and not stop.judged):
            return
        stage.read_start(state)
        self.config.hook.pytest_qualify_target_started(
            config=self.config, base_url=state.base_url or "", server_info=state.server_info.as_dict() if state.server_info else {}
        )
        self.evidence.scrape_start()

    # First among sessionfinish hooks: pytest's junitxml writes its file, and the terminal reporter
    # prints the summary, in theirs; both need the verdict and the exit status set here.
    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if session.config.option.collectonly:
            return
        if exitstatus == pytest.ExitCode.USAGE_ERROR and self.state.target is None and not self.state.base_url:
            # A usage error before anything started (collection found it): no verdict, no bundle.
            self.state.usage_error = True
            return
        from pytest_qualify.evidence.end_of_run import conclude, run_record

        state, ev, hook = self.state, self.ev, self.config.hook
        problems, incomplete, selection = run_problems(session, state, exitstatus)
        died = None
        if not state.dead and state.target is not None:
            died = state.target.death()
            if died:
                problems.append(f"server died during the run: {died}")
        problems += stage.end_problems(state, died)
        self.evidence.scrape_end()
        # Nothing after this reads the server: it shuts down while the bundle is written, and
        # unconfigure only waits for it. Not in an interrupted run: a second Ctrl-C is for the wait
        # at unconfigure, never for the bundle.
        if exitstatus != pytest.ExitCode.INTERRUPTED:
            self.server.begin_stop()
        stage_run = stage.stage_of(state)
        end = run_record(state, ev, modules=module_registry(), required=stage_run.stage.modules, problems=problems,
                            incomplete=incomplete, selection=selection, died=died, stage_run=stage_run, secrets=state.secrets,
                            answers_void=steering_void(state))
        verdict = conclude(
            end, state, ev, secrets=state.secrets, stage_run=stage_run,
            extra_fields=lambda summary: hook.pytest_qualify_summary(config=self.config, summary=summary),
        )
        state.verdict = verdict
        if ev.summary is not None:
            hook.pytest_qualify_summary_written(config=self.config, summary=ev.summary, bundle_dir=ev.bundle_dir)
        hook.pytest_qualify_verdict_reached(config=self.config, verdict=verdict)
        self.evidence.add_junit_suite_properties(self.config, verdict)
        waived_reports = sum(ev.cases[r.nodeid].failed_reports for r in verdict.waived if r.nodeid in ev.cases)
        session.exitstatus = exit_status(
            session.exitstatus, verdict,
            usage_error=bool(verdict.waiver_errors or verdict.baseline_errors),
            testsfailed=session.testsfailed, waived_failed_reports=waived_reports,
        )
        ev.exit_code = int(session.exitstatus)  # the provenance and the job summary record it

    def pytest_terminal_summary(self, terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
        if self.state.verdict is None:
            return
        from pytest_qualify.evidence.terminal import terminal_lines

        tr = terminalreporter
        add_gate_reports(tr, self.state.verdict.gate_cases)
        write_gate_table(tr, self.state)
        tr.write_line("")
        for line in terminal_lines(self.ev):
            tr.write_line(line)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self.server.stop()
        if self.state.usage_error:
            discard_run_dir(self.state)
            return
        if config.option.collectonly:
            return
        from pytest_qualify.evidence.bundle import seal
        from pytest_qualify.evidence.terminal import verdict_line
        from pytest_qualify.evidence.end_of_run import finish_bundle

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


def add_gate_reports(tr: Any, cases: Sequence[GateCase]) -> None:
    """The decision's run-level test cases (``Decision.gate_cases``: the ones both JUnit files hold)
    in the terminal reporter's counts too, so pytest's own closing line and its short summary say
    what junit.xml and the verdict say ("384 passed, 1 failed" for an SLO row alone, "1 error" for a
    run not judged). Called inside pytest's terminal-summary wrapper: its sections per failure are
    already written, the short summary and the counts line come after."""
    for case in cases:
        failed = case.tag == "failure"
        report = pytest.TestReport(
            nodeid=case.nodeid, location=(GATE_CLASSNAME, None, case.name),
            keywords={}, outcome="failed", longrepr=case.message, when="call" if failed else "setup",
        )
        tr.stats.setdefault("failed" if failed else "error", []).append(report)


class WorkerSteps:
    """Registered on xdist workers: the collection's usage checks (the controller collects nothing
    under -n; it raises what the first worker found before starting anything)."""

    def __init__(self, config: pytest.Config, state: RunState, evidence: EvidenceHooks) -> None:
        self.config = config
        self.state = state
        self.evidence = evidence

    # Before xdist's own collection_finish hook tells the controller that collection is done.
    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        problem = collection_usage_error(self.config, self.state, self.evidence, session.items)
        if problem:
            report_usage_error(self.state, problem)
