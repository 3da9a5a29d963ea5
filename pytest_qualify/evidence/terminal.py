"""What the terminal shows under the gate table, rendered from the summary. No pytest here."""

from __future__ import annotations

from typing import Any

from pytest_qualify.gate.baseline import render_rows
from pytest_qualify.gate.decide import Result
from pytest_qualify.evidence.report import rate, spread_text
from pytest_qualify.evidence.session import EvidenceState


def terminal_lines(ev: EvidenceState) -> list[str]:
    """Timing, lanes, waivers, baseline and where the bundle is."""
    s = ev.summary
    lines: list[str] = []
    if s is None:
        if ev.bundle_error:
            lines.append(f"qualify: evidence bundle NOT written: {ev.bundle_error}")
        return lines
    if s.get("stats"):
        from pytest_qualify.stats import headline

        lines.append(headline(s["stats"]))
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
        source = lane.get("ttft_source")
        ttft = "TTFT (first chunk)" if source in (None, "client chunks") else f"TTFT ({source})"
        lines.append(f"context lane {lane['lane']}: {ttft} {spread_text(lane['ttft_s'])}, "
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
        lines += [f"  flip: {f['module']}: {f['item']}: {f['baseline']} -> {f['current']} ({f['change']})"
                  for f in b.get("flips") or []]
    lines.append(f"evidence bundle: {ev.bundle_dir} (report.md, summary.json, junit.xml, provenance.intoto.json, "
                 "SHA256SUMS" + (", plot" if s["artifacts"]["plot"] else "") + ")")
    lines += [f"  {n}" for n in s["artifacts"]["notes"]]
    return lines


def verdict_line(verdict: Any, ev: EvidenceState | None) -> str:
    """The run's last terminal line, for a CI log read from the bottom (``tail -1``): the verdict,
    the exit status, what the verdict covers when the profile leaves protocol modules out, SIMULATED,
    flagged regressions, the first reason and where the bundle is."""
    from pytest_qualify.evidence.summary import left_out_label

    summary = ev.summary if ev is not None else None
    text = verdict.headline  # names the stage: only the full stage reads QUALIFICATION
    if ev is not None and ev.exit_code is not None:
        text += f" (exit {ev.exit_code})"
    unjudged = [r for r in verdict.reasons if r in verdict.incomplete]
    judged = [r for r in verdict.reasons if r not in verdict.incomplete]
    if verdict.verdict == Result.FAIL and verdict.failures and not judged:
        # A judged failure outranks incompleteness, on the last line too: the item that failed first
        # leads, then what else kept the run from a whole judgement (-x / --maxfail: the stop it
        # caused; a selection: the modules left out).
        f = verdict.failures[0]
        text += f": {f.module}: {f.where}: {f.reason[:160]}"
        if unjudged:
            word = "then" if unjudged[0].startswith("run stopped early") else "also"
            text += f"; {word} {unjudged[0][:120]}"
        rest = len(verdict.failures) - 1 + max(len(unjudged) - 1, 0)
        text += f" (+{rest} more)" if rest else ""
    elif verdict.verdict == Result.FAIL and judged:
        text += f": {judged[0][:160]}" + (f" (+{len(verdict.reasons) - 1} more)" if len(verdict.reasons) > 1 else "")
    elif verdict.verdict != Result.PASS and verdict.reasons:
        first = verdict.reasons[0]
        text += f": {first[:160]}" + (f" (+{len(verdict.reasons) - 1} more)" if len(verdict.reasons) > 1 else "")
    elif verdict.verdict != Result.PASS and verdict.failures:
        text += f": {len(verdict.failures)} protocol item(s) failed"
    scope = left_out_label(summary) if summary else None
    if scope:
        text += f" · {scope}"
    if summary and summary.get("simulated"):
        text += " · SIMULATED (not vLLM; never backs a promotion)"
    regressions = tuple(getattr(verdict, "regressions", ()) or ())
    failing = any(f.row == "regression" for f in getattr(verdict, "findings", ()))
    if regressions and not failing:  # a failing regression is the reason above already
        text += f" · {len(regressions)} regression(s) flagged against the baseline: {regressions[0][:120]}"
    if ev is not None and ev.bundle_dir:
        text += f" · evidence {ev.bundle_dir}"
    return text
