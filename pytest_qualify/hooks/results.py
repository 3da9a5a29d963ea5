"""The gate's pytest side: every protocol report folded into the run's item results (on the
controller, so xdist workers' reports count), the run-level problems pytest knows of, the exit
status, and the gate's table in the terminal. The decision itself is ``gate/decide.py`` (no pytest)."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_qualify.gate import decide as gate_mod
from pytest_qualify.run import RunState
from pytest_qualify.settings import Mode
from pytest_qualify import properties


def reason_of(report: pytest.TestReport) -> str:
    """One line saying why a protocol test did not pass: the test's own reason when it recorded
    one, else the failure's message."""
    for key, value in report.user_properties:
        if key == properties.REASON:
            return str(value)
    if report.skipped and isinstance(report.longrepr, tuple):
        return f"skipped: {report.longrepr[2]}"
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        message = crash.message.strip().removeprefix("Failed: ")
        return message.splitlines()[0] if message else "failed"
    text = str(report.longrepr or "").strip()
    return text.splitlines()[0] if text else report.outcome


def run_problems(session: pytest.Session, state: RunState,
                 exitstatus: int) -> tuple[list[str], list[str], list[str]]:
    """What makes the whole run unable to pass, whatever its items did, as (problems, incomplete,
    selection): problems fail the deployment (it died); incomplete leave it unjudged (it never
    answered, the run was cut short or left part of the protocol out); selection, the last of
    incomplete, are those a selection caused. ``gate/decide.py`` decides what each makes of it."""
    problems: list[str] = []
    incomplete: list[str] = []
    if state.startup_error:
        # Attach mode starts nothing: its error already says the endpoint could not be reached.
        head = "not judged" if state.settings.mode == Mode.ATTACH else "server startup failed"
        incomplete.append(f"{head}: " + state.startup_error.splitlines()[0])
    if state.dead:
        problems.append(state.dead.splitlines()[0])
    if state.stop is not None and not state.startup_error:
        # The run's first step stopped it (server/info.first_step): a judged FAIL, or not judged.
        (problems if state.stop.judged else incomplete).append(state.stop.reason)
    refused = state.refused_items()
    if refused:
        # Any refusal leaves its items unjudged (gate.proof_of_grading) and stops the rest (ServerWatch);
        # on most items the deployment was not judged at all, whatever the others show.
        state.credentials_refused = 2 * len(refused) > len(state.results)
        statuses = "/".join(sorted({str(r.properties[properties.CREDENTIALS_REFUSED]) for r in refused}))
        incomplete.append(f"not judged: credentials refused on chat: HTTP {statuses} on {len(refused)} of "
                          f"{len(state.results)} protocol items asked (the key is read from ${state.settings.api_key_env}); "
                          "the items after the first refusal were not asked")
    if exitstatus == pytest.ExitCode.INTERRUPTED:
        incomplete.append("run interrupted before the protocol finished")
    selection: list[str] = []  # among incomplete: what a selection left out (the gate's SELECTION findings)
    if session.shouldfail:
        selection.append(f"run stopped early: {session.shouldfail}")
    stage = state.stage_run.stage if state.stage_run is not None else None
    # A stage's verdict needs every item of that stage, as a qualification needs the whole protocol.
    needs = "a promotion needs the whole protocol" if stage is None or stage.qualifies else (
        f"stage {stage.name} needs every one of its items")
    if state.user_deselected:
        selection.append(
            f"partial run: {state.user_deselected} protocol items deselected (-k, -m, --deselect, --lf, ...); {needs}"
        )
    if state.partial_selection:
        selection.append(f"partial run: {state.partial_selection}; {needs}")
    return problems, [*incomplete, *selection], selection


def steering_void(state: RunState) -> list[str]:
    """A steered run (profile ``[steer]``): every answer whose forced text did not come back from
    vLLM, read from the steering proxy's log. Such a run judged nothing: INCOMPLETE, never graded."""
    if state.target is None or state.target.proxy is None:
        return []
    from pytest_qualify.reference.steer_log import STEER_LOG, incomplete_reasons

    return incomplete_reasons(state.run_dir / STEER_LOG, state.settings.reference_faults)


def exit_status(
    status: int, verdict: gate_mod.GateVerdict, *, usage_error: bool, testsfailed: int, waived_failed_reports: int
) -> int:
    """The run's exit status from pytest's and the verdict (gate.EXIT_CODES): 1 for a FAIL, 2 for an
    INCOMPLETE run (pytest's own "interrupted", so CI can retry it and reject a FAIL without
    reading a file), never 0 unless PASS; a bad waiver file found only at the end is a usage
    error; a PASS whose only failed tests are waived corpus items exits 0 (they stay listed as
    failed), and a PASS keeps the status of a failed test outside the protocol."""
    if usage_error:
        return pytest.ExitCode.USAGE_ERROR
    if verdict.passed and verdict.waived and status == pytest.ExitCode.TESTS_FAILED:
        if testsfailed == waived_failed_reports:
            return pytest.ExitCode.OK
    if verdict.passed:
        return status
    return pytest.ExitCode(gate_mod.EXIT_CODES[verdict.verdict])


def write_gate_table(tr: Any, state: RunState) -> None:
    """The gate's table, the corpus per kind and the verdict with its reasons."""
    assert state.verdict is not None
    stage = state.stage_run.stage if state.stage_run is not None else None
    title = f"qualification gate: profile {state.profile.name}"
    if stage is not None and not stage.qualifies:
        title = f"{stage.name} gate (not a qualification): profile {state.profile.name}"
    from pytest_qualify.evidence.summary import protocol_section
    from pytest_qualify.profiles import protocol_modules

    protocol = protocol_section(state.profile.required_modules, protocol_modules())
    if state.settings.mode == Mode.REFERENCE:
        title += " (SIMULATED reference server, not vLLM)"
    elif state.simulated:
        title += " (SIMULATED: the endpoint says so, not vLLM)"
    if protocol["left_out"]:
        title += f" ({protocol['label']})"
    tr.write_sep("=", title)
    for line in gate_mod.render_table(state.verdict):
        tr.write_line(line)
    if state.deselected_modules:
        tr.write_line(f"not in this profile: {', '.join(sorted(state.deselected_modules))}")
    if stage is not None and not stage.qualifies:
        left = [m for m in state.profile.required_modules if m not in stage.modules]
        lanes = [lane.name for lane in state.profile.limits.lanes if lane.name not in stage.lanes]
        tr.write_line(f"not in stage {stage.name}: {', '.join(left) or '-'}"
                      + (f"; context lanes {', '.join(lanes)}" if lanes and "context" in stage.modules else ""))
    _write_corpus_table(tr, state)
    tr.write_line("")
    verdict_lines = state.verdict.summary_lines()
    tr.write_line(verdict_lines[0], bold=True, green=state.verdict.passed, red=not state.verdict.passed)
    for line in verdict_lines[1:]:
        tr.write_line(line)


def _write_corpus_table(tr: Any, state: RunState) -> None:
    """The multimodal corpus per kind (x/12 images, x/4 mixed, x/14 videos), when it ran."""
    rows = [
        (str(r.properties[properties.CORPUS_KIND]), r.item, r.passed)
        for r in state.results.values()
        if r.module == "multimodal" and properties.CORPUS_KIND in r.properties
    ]
    if rows:
        from pytest_qualify.tasks.kind_table import kind_table

        tr.write_line("")
        for line in kind_table(rows):
            tr.write_line(line)


class GateCollector:
    """Folds every protocol report into the run's item results (registered on the controller)."""

    def __init__(self, state: RunState) -> None:
        self.state = state

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        props = dict(report.user_properties)
        module = props.get(properties.MODULE)
        if module is None:
            return
        results = self.state.results
        result = results.get(report.nodeid)
        if result is None:
            result = results[report.nodeid] = gate_mod.ItemResult(
                nodeid=report.nodeid,
                module=module,
                item=str(props.get(properties.ITEM, report.nodeid)),
                repetition=int(props.get(properties.REPETITION, 1)),
                repetitions=int(props.get(properties.REPETITIONS, 1)),
                lane=props.get(properties.LANE),
            )
        result.properties.update(props)
        outcome = gate_mod.Outcome(report.outcome)
        if outcome is gate_mod.Outcome.SKIPPED and report.when == "call" and hasattr(report, "wasxfail"):
            outcome = gate_mod.Outcome.FAILED
        result.record(report.when, outcome, "" if outcome is gate_mod.Outcome.PASSED else reason_of(report))
