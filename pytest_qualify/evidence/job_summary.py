"""The CI job summary: when ``GITHUB_STEP_SUMMARY`` names a file, append the verdict, the gate
table (SLO rows included), the evidence behind it and the failures, as GitHub-flavoured Markdown.
No pytest here.

GitHub accepts at most 1 MiB per step's summary and drops a larger one entirely; this one is
capped at :data:`MAX_BYTES` (64 KiB): failure rows beyond what fits are counted, not shown —
summary.json and junit.xml in the uploaded bundle hold them all.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pytest_qualify.evidence.report import cell, claim_result, failures_split, row_verdict, table
from pytest_qualify.stats import headline, interval_text

ENV = "GITHUB_STEP_SUMMARY"
MAX_BYTES = 64 * 1024
MEANING = {
    "PASS": "every hard assertion held in every repetition",
    "FAIL": "the deployment failed the protocol",
    "INCOMPLETE": "the deployment was not fully judged (the run must be repeated; it does not promote)",
}


def render(summary: Mapping[str, Any], *, bundle_dir: str, exit_code: int, max_bytes: int = MAX_BYTES) -> str:
    s, v = summary, summary["verdict"]
    served = s["profile"]["deployment"]["served_name"]
    from pytest_qualify.evidence.summary import left_out_label

    scope = left_out_label(s)
    head = [
        f"## Qualification: {v['result']} — `{served}` (profile `{s['profile']['name']}`)"
        + (f" — {scope}" if scope else "")
        + (" — SIMULATED reference server" if s["simulated"] else ""),
        "",
        f"{MEANING.get(v['result'], '')}; exit status {exit_code} · run `{s['run']['id']}` · "
        f"`--repeat {s['run']['repeat']}` · evidence bundle `{bundle_dir}`",
        "",
    ]
    if scope:
        head += [f"Not judged by this profile: {', '.join(s['protocol']['left_out'])} (left out of protocol "
                 f"v{s['protocol']['version']}).", ""]
    if s["artifacts"].get("html"):
        head += [f"Every item's request, answer and reason: `{bundle_dir}/{s['artifacts']['html']}`", ""]
    if v["reasons"]:
        head += [f"- {cell(r)}" for r in v["reasons"][:20]]
        if len(v["reasons"]) > 20:
            head.append(f"- … and {len(v['reasons']) - 20} more reasons in summary.json")
        head.append("")

    def mark(g: Mapping[str, Any]) -> str:
        return "ok" if row_verdict(g) == "PASS" else f"**{row_verdict(g)}**"

    rows = [(g["title"], g["result"], mark(g)) for g in s["gate"]]
    rows += [(r["title"], f"{r['measured_text'] or 'not measured'} (limit {r['limit_text']})", mark(r))
             for r in s.get("slo") or []]
    rows += [(c["title"], f"{c['measured'] or 'not measured'} ({c['limit']})", mark(c)) for c in s.get("checks") or []]
    rows += [(c["title"], claim_result(c), mark(c)) for c in s.get("claims") or []]
    head += table(("Gate", "Result", ""), rows) + [""]
    stats = s.get("stats")
    if stats:
        head += [headline(stats), ""]
        weak = [m for m in stats["modules"] if m["passed"] < m["attempts"]]
        if weak:
            head += table(("Module", "Attempts passed", "95% Wilson interval"),
                          [(m["title"], f"{m['passed']}/{m['attempts']}", interval_text(m)) for m in weak]) + [""]
    failures, unjudged = failures_split(s)
    if unjudged:
        head += [f"{len(unjudged)} item(s) not judged (no failure of the deployment, and no pass): "
                 f"{cell(unjudged[0]['not_judged'][:300])}", ""]
    if not failures:
        return "\n".join(head) + "\n"
    head += [f"### Failures ({len(failures)})", ""]
    header = table(("Module", "Item", "Lane", "Repetition", "Reason"), [])
    out = "\n".join(head + header) + "\n"
    shown = 0
    for f in failures:
        line = table(("",) * 5, [(f["module"], f["item"], f["lane"] or "-", f["repetition"], f["reason"][:500])])[-1] + "\n"
        # Room for the closing note: a summary over the cap is dropped by GitHub entirely.
        if len((out + line).encode("utf-8")) > max_bytes - 512:
            break
        out += line
        shown += 1
    if shown < len(failures):
        out += f"\n… and {len(failures) - shown} more failures in summary.json and junit.xml of the bundle.\n"
    return out


def append(summary: Mapping[str, Any], environ: Mapping[str, str], *, bundle_dir: str, exit_code: int,
           secrets: Sequence[str] = ()) -> str | None:
    """Append to the file ``GITHUB_STEP_SUMMARY`` names; returns its path, or None when unset. The
    page is outside the bundle, so it is redacted here: a reason may quote what a server echoed."""
    from pytest_qualify.redaction import redact

    target = environ.get(ENV)
    if not target:
        return None
    text = redact(render(summary, bundle_dir=bundle_dir, exit_code=exit_code), secrets)
    with Path(target).open("a", encoding="utf-8") as f:
        f.write(text + "\n")
    return target
