"""The end of a run on the controller: the run's record built once, the gate's one decision
(``gate.decide``: waivers, SLOs and the baseline applied there), and the bundle rendered from it —
also when the server never started or died. A run whose evidence could not be written cannot pass.
No pytest here: the pytest side hands in the run state and the run-level reasons.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_qualify.gate import decide as gate
from pytest_qualify.bundle_format.workload import task_data_sha256
from pytest_qualify.evidence import bundle
from pytest_qualify.evidence.answers import graded_tests, held_to_the_end
from pytest_qualify.evidence.session import EvidenceState
from pytest_qualify.evidence.provenance import provenance_section
from pytest_qualify.evidence.summary import facts_section, iso, protocol_section, render_summary, stage_fields, target_section, tool_version
from pytest_qualify.gate.decide import BaselineInput, Decision, RunRecord
from pytest_qualify.gate.run_facts import RunFacts
from pytest_qualify.profiles import ModuleInfo
from pytest_qualify.run import RunState
from pytest_qualify import properties
from pytest_qualify.promotion.stage_run import StageRun

# Where a user plugin's summary fields go (the schema leaves this one object open).
EXTRA_KEY = "extra"


@dataclass(frozen=True)
class EndOfRun:
    """The run at its end, built once: ``record``, what the gate judges (its measurements typed,
    ``RunRecord.facts``), and ``facts``, the summary's fact sections as ``summary.json`` holds them
    (``summary.facts_section``), which only the writers read: the target, the server's metrics, the
    protocol and the provenance are shown, never judged."""

    record: RunRecord
    facts: Mapping[str, Any]


def run_record(
    state: RunState,
    ev: EvidenceState,
    *,
    modules: Mapping[str, ModuleInfo],
    required: Sequence[str],
    problems: Sequence[str],
    incomplete: Sequence[str] = (),
    selection: Sequence[str] = (),
    died: str | None = None,
    stage_run: StageRun | None = None,
    secrets: Sequence[str] = (),
    answers_void: Sequence[str] = (),
) -> EndOfRun:
    """The run as the gate judges it, built once: the item results, the run-level reasons, the
    waivers, the SLOs, the claims, the baseline and the measurements they are held to; beside it
    the fact sections the summary will show."""
    run_dir = state.run_dir
    if died is None and state.dead:
        died = state.dead.splitlines()[0]
    results = gate.proof_of_grading(state.results.values(), graded_tests(run_dir) if run_dir.is_dir() else (),
                                    journaled=lambda r: bool(r.properties.get(properties.JOURNALED)))
    faults, never_engaged = fault_engagement(state)
    facts = facts_section(
        run={
            "id": state.run_id,
            "started_at": iso(ev.started_at),
            "finished_at": iso(time.time()),
            "duration_s": round(time.perf_counter() - ev.t0, 3),
            "repeat": state.settings.repeat,
            "workers": ev.workers,
            "tool_version": tool_version(),
        },
        target=target_section(state, died, secrets),
        profile=state.profile,
        results=results,
        cases=ev.cases,
        snapshots=ev.snapshots,
        metrics_errors=ev.metrics_errors,
        metrics_files=bundle.metrics_files(run_dir) if run_dir.is_dir() else [],
        protocol=protocol_section(state.profile.required_modules, [m for m, info in modules.items() if info.protocol],
                                  task_data_sha256()),
        provenance=provenance_section(os.environ),
        serving=state.serving_facts,
        faults=faults,
    )
    baseline = None
    if ev.baseline is not None:
        baseline = BaselineInput(ev.baseline, path=ev.baseline_path, threshold_pct=ev.regression_threshold_pct,
                                 fail_on_regression=ev.fail_on_regression)
    # A fault that never engaged leaves the run unjudged; a selection's reasons stay the last ones.
    incomplete = [*(r for r in incomplete if r not in selection), *never_engaged, *selection]
    record = RunRecord(
        results=results, modules=modules, required=tuple(required),
        stage=stage_run.stage if stage_run is not None else None,
        problems=tuple(problems), incomplete=tuple(incomplete), selection=tuple(selection), target_unavailable=bool(state.startup_error or state.credentials_refused),
        waivers=ev.waivers, slo=state.profile.slo, claims=state.profile.claims, facts=RunFacts.of(facts),
        baseline=baseline, answers_void=tuple(answers_void), checks=_journal_checks(run_dir),
    )
    return EndOfRun(record, facts)


def fault_engagement(state: RunState) -> tuple[dict[str, Any] | None, list[str]]:
    """The reference server's armed faults, each with whether it engaged (``summary.json``
    ``faults``, from reference/fault_log.py), and one incomplete reason per fault that never did: a
    fault that met no request it applies to changed nothing, and a PASS with it on would prove
    nothing. (None, []) when no fault was switched on. A run that never reached its endpoint (a
    failed start, a first step that judged nothing) lists its faults with no reason each: it is
    unjudged already, for the reason it gives."""
    if not state.settings.reference_faults:
        return None, []
    from pytest_qualify.reference.fault_log import read_record

    record = read_record(state.run_dir, state.settings.reference_faults)
    unreached = bool(state.startup_error) or bool(state.stop is not None and not state.stop.judged)
    return record.as_dict(), [] if unreached else record.never_engaged()


def _journal_checks(run_dir: Any) -> tuple[Any, ...]:
    """The answer journal's run-end row (integrity, TEST01), when the integrity module held answers."""
    row = held_to_the_end(run_dir) if run_dir is not None and run_dir.is_dir() else None
    return (row,) if row is not None else ()


def conclude(
    end: EndOfRun,
    state: RunState,
    ev: EvidenceState,
    *,
    secrets: Sequence[str],
    extra_fields: Callable[[dict[str, Any]], Iterable[Mapping[str, Any]]] = lambda summary: (),
    stage_run: StageRun | None = None,
) -> Decision:
    """Decide once and write the bundle. ``extra_fields`` returns fields user plugins add to the
    summary; ``stage_run`` adds the stage, the served identity and the promoted run. Anything that
    goes wrong while writing evidence leaves the run unjudged (``gate.with_unjudged``). The bundle's
    junit.xml gets the decision's own run-level test cases (``Decision.gate_cases``), as pytest's
    ``--junitxml`` and the terminal do from the decision returned."""
    from pytest_qualify.evidence.provenance import PROVENANCE_FILE

    decision = gate.decide(end.record)
    run_dir = state.run_dir
    try:
        summary = render_summary(
            end.facts, decision,
            artifacts={"plot": None, "notes": [], "provenance": PROVENANCE_FILE},
            **(stage_fields(stage_run, decision) if stage_run is not None else {}),
        )
        extra: dict[str, Any] = {}
        for fields in extra_fields(summary):
            extra.update(fields or {})
        if extra:
            summary[EXTRA_KEY] = extra
        bundle.write_bundle(run_dir, summary, ev.cases, secrets, gate=decision.gate_cases)
        ev.summary = summary
        ev.bundle_dir = str(run_dir)
    except Exception as exc:  # noqa: BLE001 - whatever broke, the verdict must say so
        ev.bundle_error = f"{type(exc).__name__}: {exc}"
        decision = gate.with_unjudged(decision, f"evidence bundle could not be written to {run_dir}: {ev.bundle_error}")
    return decision


def finish_bundle(state: RunState, ev: EvidenceState, environ: Mapping[str, str] | None = None) -> list[str]:
    """After the server stopped and before the bundle is sealed: the CI job summary
    (``GITHUB_STEP_SUMMARY``) and the provenance statement over the files as kept (redacted
    first, so its digests are those of the files). Returns what could not be written."""
    import os

    from pytest_qualify.evidence import job_summary
    from pytest_qualify.evidence.provenance import write_statement

    errors: list[str] = []
    run_dir = state.run_dir
    if ev.summary is None or not run_dir.is_dir():
        return errors
    if ev.exit_code is not None:
        try:
            ev.job_summary = job_summary.append(ev.summary, os.environ if environ is None else environ,
                                                bundle_dir=str(run_dir), exit_code=ev.exit_code,
                                                secrets=state.secrets)
        except OSError as exc:  # a convenience: the bundle stands without it
            errors.append(f"job summary not written: {exc}")
    try:
        bundle.redact_files(run_dir, state.secrets)
        write_statement(run_dir, ev.summary, state.secrets, exit_code=ev.exit_code)
    except OSError as exc:
        errors.append(f"provenance.intoto.json could not be written: {exc}")
    return errors
