"""The verdict at the end of a run on the controller: waivers and the baseline applied, the bundle
written — also when the server never started or died. A run whose evidence could not be written
cannot pass. No pytest here: the pytest side hands in the run state and the gate's ``evaluate``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from pytest_qualify.evidence import bundle
from pytest_qualify.evidence.baseline import compare
from pytest_qualify.evidence.session import EvidenceState
from pytest_qualify.evidence.summary import build_summary, gate_section, iso, target_section, tool_version, verdict_section
from pytest_qualify.evidence.waivers import Candidate, hard_module_conflicts, item_ids
from pytest_qualify.gate import GateVerdict, ItemResult
from pytest_qualify.run import RunState
from pytest_qualify.stage_run import StageRun

WAIVER_USAGE_ERROR = "usage error in --qualify-waivers"
# Where a user plugin's summary fields go (the schema leaves this one object open).
EXTRA_KEY = "extra"


def candidates(results: Iterable[ItemResult]) -> list[Candidate]:
    return [Candidate(r.nodeid, r.module, item_ids(r.nodeid, r.item)) for r in results]


def conclude(
    state: RunState,
    ev: EvidenceState,
    *,
    problems: list[str],
    evaluate: Callable[..., GateVerdict],
    secrets: Sequence[str],
    died: str | None = None,
    extra_fields: Callable[[dict[str, Any]], Iterable[Mapping[str, Any]]] = lambda summary: (),
    incomplete: Sequence[str] = (),
    stage_run: StageRun | None = None,
) -> GateVerdict:
    """Decide the verdict and write the bundle. Anything that goes wrong while writing evidence
    becomes a run-level reason. ``extra_fields`` returns fields user plugins add to the summary;
    ``stage_run`` adds the stage, the served identity and the promoted run (``stage_run.py``).

    ``problems`` fail the deployment (a dead server); ``incomplete`` leave it unjudged (an
    interruption, a partial selection); a target that never started leaves everything unjudged
    (gate.py). The profile's SLOs become gate rows; a baseline adds its per-item flips."""
    from pytest_qualify.evidence.provenance import PROVENANCE_FILE
    from pytest_qualify.evidence.slo import check_rows, evaluate_slo
    from pytest_qualify.evidence.stats import flips

    results = list(state.results.values())
    waiver_for = None
    unjudged = list(incomplete)
    if ev.waivers is not None:
        ev.waivers.observe(candidates(results))
        for conflict in hard_module_conflicts(ev.waivers.waivers, candidates(results), ev.waivers.waivable_modules):
            problems.append(f"{WAIVER_USAGE_ERROR}: {conflict}")
        waiver_for = ev.waivers.waiver_for
    checks: list[Any] = []

    def decide() -> GateVerdict:
        return evaluate(results, waiver_for=waiver_for, run_problems=problems, incomplete=unjudged,
                        checks=checks, target_unavailable=bool(state.startup_error))

    verdict = decide()

    run = {
        "id": state.run_id,
        "started_at": iso(ev.started_at),
        "finished_at": iso(time.time()),
        "duration_s": round(time.perf_counter() - ev.t0, 3),
        "repeat": state.settings.repeat,
        "workers": ev.workers,
        "tool_version": tool_version(),
    }
    run_dir = state.run_dir
    if died is None and state.dead:
        died = state.dead.splitlines()[0]
    try:
        summary = build_summary(
            run=run,
            target=target_section(state, died, secrets),
            profile=state.profile,
            verdict=verdict,
            results=results,
            cases=ev.cases,
            snapshots=ev.snapshots,
            metrics_errors=ev.metrics_errors,
            metrics_files=bundle.metrics_files(run_dir) if run_dir.is_dir() else [],
            waivers=ev.waivers.as_dict() if ev.waivers is not None else None,
            baseline=None,
            artifacts={"plot": None, "notes": [], "provenance": PROVENANCE_FILE},
            **(stage_run.summary_fields(verdict) if stage_run is not None else {}),
        )
        slo_rows = evaluate_slo(state.profile.slo, summary["items"], summary["timing"])
        if slo_rows:
            summary["slo"] = slo_rows
            checks[:] = check_rows(slo_rows)
            verdict = decide()
        if ev.baseline is not None:
            comparison = compare(summary, ev.baseline, path=ev.baseline_path,
                                 threshold_pct=ev.regression_threshold_pct, fail_on_regression=ev.fail_on_regression)
            comparison["flips"] = flips(summary["items"], ev.baseline.get("items") or [])
            summary["baseline"] = comparison
            if ev.fail_on_regression and comparison["regressions"]:
                problems.append(
                    f"performance regression against baseline run {comparison['run_id']} beyond "
                    f"{ev.regression_threshold_pct:g}%: " + "; ".join(comparison["regressions"])
                )
                verdict = decide()
        summary["verdict"] = verdict_section(verdict)
        summary["gate"] = gate_section(verdict)
        if stage_run is not None:
            summary.update(stage_run.summary_fields(verdict))
        extra: dict[str, Any] = {}
        for fields in extra_fields(summary):
            extra.update(fields or {})
        if extra:
            summary[EXTRA_KEY] = extra
        bundle.write_bundle(run_dir, summary, ev.cases, secrets)
        ev.summary = summary
        ev.bundle_dir = str(run_dir)
    except Exception as exc:  # noqa: BLE001 - whatever broke, the verdict must say so
        ev.bundle_error = f"{type(exc).__name__}: {exc}"
        unjudged.append(f"evidence bundle could not be written to {run_dir}: {ev.bundle_error}")
        verdict = decide()
    return verdict


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
