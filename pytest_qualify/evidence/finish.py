"""The end of a run on the controller: apply waivers and the baseline, decide the verdict, and
write the bundle — also when the server never started or died. No pytest here: the plugin hands
in its run state and the gate's ``evaluate``."""

from __future__ import annotations

import re
import time
import urllib.parse
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pytest_qualify.evidence import bundle
from pytest_qualify.evidence.baseline import compare
from pytest_qualify.evidence.junit import redact_command
from pytest_qualify.evidence.session import EvidenceState
from pytest_qualify.evidence.summary import build_summary, iso, verdict_section, gate_section
from pytest_qualify.evidence.waivers import Candidate, hard_module_conflicts, item_ids


WAIVER_USAGE_ERROR = "usage error in --qualify-waivers"


def tool_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("pytest-qualify")
    except metadata.PackageNotFoundError:
        return "unknown"


def safe_url(url: str | None) -> str | None:
    """A URL without user:password, which may be a credential."""
    if not url:
        return url
    parts = urllib.parse.urlsplit(url)
    if parts.username or parts.password:
        host = parts.hostname or ""
        if parts.port:
            host += f":{parts.port}"
        parts = parts._replace(netloc=host)
    return urllib.parse.urlunsplit(parts)


def target_section(state: Any, died: str | None, secrets: Sequence[str]) -> dict[str, Any]:
    info = state.server_info or {}
    command = info.get("launch_command") or (state.target.display_command if state.target is not None else "")
    models = []
    for m in info.get("models") or []:
        if isinstance(m, dict):
            mlen = m.get("max_model_len")
            models.append({"id": str(m.get("id", "")), "root": m.get("root"),
                           "max_model_len": mlen if isinstance(mlen, int) else None})
    return {
        "mode": state.settings.mode,
        "simulated": state.settings.mode == "reference",
        "base_url": safe_url(state.base_url),
        "launch_command": redact_command(command, secrets) if command else None,
        "engine_version": info.get("version") or None,
        "version_error": info.get("version_error"),
        "models": models,
        "startup_error": state.startup_error,
        "died": died,
    }


def death_of(state: Any) -> str | None:
    """Why the launched server is gone (with its last log line), or None while it runs."""
    if state.target is None:
        return None
    why = state.target.died()
    if not why:
        return None
    process = getattr(state.target, "process", None)
    last = process.log_tail(1).strip() if process is not None else ""
    return why + (f" (last log line: {last[:200]})" if last else "")


def candidates(results: Sequence[Any]) -> list[Candidate]:
    return [Candidate(r.nodeid, r.module, item_ids(r.nodeid, r.item)) for r in results]


def conclude(
    state: Any,
    ev: EvidenceState,
    *,
    problems: list[str],
    evaluate: Callable[..., Any],
    secrets: Sequence[str],
    died: str | None = None,
    stage_run: Any = None,
) -> Any:
    """Decide the verdict and write the bundle; returns the GateVerdict. Anything that goes wrong
    while writing evidence becomes a run-level reason: a run without its evidence cannot pass."""
    results = list(state.results.values())
    waiver_for = None
    if ev.waivers is not None:
        ev.waivers.observe(candidates(results))
        for conflict in hard_module_conflicts(ev.waivers.waivers, candidates(results), ev.waivers.waivable_modules):
            problems.append(f"{WAIVER_USAGE_ERROR}: {conflict}")
        waiver_for = ev.waivers.waiver_for
    verdict = evaluate(results, waiver_for=waiver_for, run_problems=problems)

    finished = time.time()
    run = {
        "id": state.run_id,
        "started_at": iso(ev.started_at),
        "finished_at": iso(finished),
        "duration_s": round(time.perf_counter() - ev.t0, 3),
        "repeat": state.settings.repeat,
        "workers": ev.workers,
        "tool_version": tool_version(),
    }
    run_dir = Path(state.run_dir)
    if died is None and getattr(state, "dead", None):
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
            artifacts={"plot": None, "notes": []},
            **(stage_run.summary_fields(verdict) if stage_run is not None else {}),
        )
        if ev.baseline is not None:
            comparison = compare(summary, ev.baseline, path=ev.baseline_path,
                                 threshold_pct=ev.regression_threshold_pct, fail_on_regression=ev.fail_on_regression)
            summary["baseline"] = comparison
            if ev.fail_on_regression and comparison["regressions"]:
                problems.append(
                    f"performance regression against baseline run {comparison['run_id']} beyond "
                    f"{ev.regression_threshold_pct:g}%: " + "; ".join(comparison["regressions"])
                )
                verdict = evaluate(results, waiver_for=waiver_for, run_problems=problems)
                summary["verdict"] = verdict_section(verdict)
                summary["gate"] = gate_section(verdict)
                if stage_run is not None:
                    summary.update(stage_run.summary_fields(verdict))
        bundle.write_bundle(run_dir, summary, ev.cases, secrets)
        ev.summary = summary
        ev.bundle_dir = str(run_dir)
    except Exception as exc:  # noqa: BLE001 - whatever broke, the verdict must say so
        ev.bundle_error = f"{type(exc).__name__}: {exc}"
        problems.append(f"evidence bundle could not be written to {run_dir}: {ev.bundle_error}")
        verdict = evaluate(results, waiver_for=waiver_for, run_problems=problems)
    return verdict


def finalize(state: Any, ev: EvidenceState, secrets: Sequence[str]) -> str | None:
    """After the server stopped: redact and checksum the bundle. Returns an error text or None."""
    run_dir = Path(state.run_dir)
    if not run_dir.is_dir():
        return None
    try:
        bundle.write_manifest(run_dir, secrets)
    except OSError as exc:
        return f"SHA256SUMS could not be written: {exc}"
    return None


def lane_metrics_name(label: str, lane: str, repetition: Any, when: str) -> str:
    base = re.sub(r"[^A-Za-z0-9]+", "_", label).strip("_")
    return f"lane-{lane}-{base}-rep{repetition}-{when}"


def terminal_lines(ev: EvidenceState) -> list[str]:
    """What the terminal adds under the gate table: timing, lanes, waivers, baseline, the bundle."""
    from pytest_qualify.evidence.baseline import render_rows
    from pytest_qualify.evidence.report import rate, spread_text

    s = ev.summary
    lines: list[str] = []
    if s is None:
        if ev.bundle_error:
            lines.append(f"qualify: evidence bundle NOT written: {ev.bundle_error}")
        return lines
    t = s["timing"]
    d, pf = t["decode_tok_s"], t["prefill_tok_s"]
    if d or pf:
        lines.append(
            "timing (client-observed): "
            + (f"decode p50 {rate(d['p50'])}, p95 {rate(d['p95'])} (n={d['n']})" if d else "decode -")
            + "; " + (f"prefill p50 {rate(pf['p50'])} (n={pf['n']})" if pf else "prefill -")
        )
    for lane in t["lanes"]:
        extra = ""
        if lane["ttft_client_server_ratio"]:
            extra = f"; client/server TTFT {lane['ttft_client_server_ratio']['median']:.2f}x"
        lines.append(f"context lane {lane['lane']}: TTFT {spread_text(lane['ttft_s'])}, "
                     f"end to end {spread_text(lane['e2e_s'])}{extra}")
        lines += [f"  FLAG: {f}" for f in lane["flags"]]
    m = s["server_metrics"]
    if not m["available"] and m["errors"]:
        lines.append("/metrics cross-check unavailable: " + "; ".join(f"{k}: {v}" for k, v in m["errors"].items()))
    w = s["waivers"]
    if w is not None:
        for x in w["waivers"]:
            lines.append(f"waiver {x['item']!r} ({x['status']}; expires {x['expires']}): {x['reason']}"
                         + (f" -> waived {len(x['applied_to'])} item(s)" if x["applied_to"] else ""))
    b = s["baseline"]
    if b is not None:
        lines.append(f"against baseline {b['run_id']} ({b['path']}), threshold {b['threshold_pct']:g}%:")
        rows = render_rows(b)
        width = max((len(r[0]) for r in rows), default=10)
        lines.append(f"  {'metric':<{width}}  {'baseline':>12}  {'this run':>12}  delta")
        lines += [f"  {r[0]:<{width}}  {r[1]:>12}  {r[2]:>12}  {r[3]}" for r in rows]
        lines += [f"  note: {n}" for n in b["notes"]]
    lines.append(f"evidence bundle: {ev.bundle_dir} (report.md, summary.json, junit.xml, SHA256SUMS"
                 + (", plot" if s["artifacts"]["plot"] else "") + ")")
    lines += [f"  {n}" for n in s["artifacts"]["notes"]]
    return lines
