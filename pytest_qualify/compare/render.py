"""The comparison's files: ``comparison.json`` (validated against ``schemas/comparison.schema.json``),
``comparison.md`` and ``comparison.html`` (report.html's look; per figure, every boot's value per
arm and the interval on the difference, drawn as inline SVG), with ``SHA256SUMS``. Renders only:
every call was made by :mod:`comparison`. No pytest here.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from pytest_qualify.bundle_format.manifest import MANIFEST, sha256_file
from pytest_qualify.compare.comparison import fmt
from pytest_qualify.evidence.html import STYLE

FILES = ("comparison.json", "comparison.md", "comparison.html")


@cache
def schema() -> dict[str, Any]:
    return json.loads(resources.files("pytest_qualify").joinpath("schemas/comparison.schema.json").read_text())


def validate(comparison: Mapping[str, Any]) -> None:
    import jsonschema

    jsonschema.validate(comparison, schema())


def _pct(value: float | None, signed: bool = True) -> str:
    if value is None:
        return "-"
    if abs(value) > 1000:  # a difference these boots cannot bound; the digits would mean nothing
        return (">" if value > 0 else "<") + (" +1000%" if value > 0 else " -1000%") if signed else "> 1000%"
    return f"{value:+.2f}%" if signed else f"{value:.2f}%"


def _interval(f: Mapping[str, Any], key: str = "adjusted_interval_pct") -> str:
    """An interval of the figure; by default the one the call rests on, Holm's adjusted one (at the
    figure's step level)."""
    iv = f.get(key)
    return "-" if not iv else f"{_pct(iv[0])} … {_pct(iv[1])}"


def _arm_text(arm: Mapping[str, Any], unit: str) -> str:
    spread = arm.get("spread_pct")
    return f"{fmt(arm.get('center'), unit)} (spread {_pct(spread, False)}, n={arm['boots']})"


def _identity_rows(comparison: Mapping[str, Any]) -> list[tuple[str, list[str]]]:
    arms = comparison["arms"]
    keys = ("profile", "model", "revision", "served_name", "quantization", "kv_cache_dtype", "engine_version",
            "mode", "launch_command", "simulated")
    rows = [(k, [str((arm.get("identity") or {}).get(k, "-")) for arm in arms.values()]) for k in keys]
    rows.append(("host kind", [", ".join(arm["host_kinds"]) for arm in arms.values()]))
    rows.append(("boots", [", ".join(f"{b['run_id']} ({b['verdict']})" for b in arm["boots"]) for arm in arms.values()]))
    return rows


_CALLS = ("Calls: `equivalent within ±T%` (two one-sided tests put the difference inside the tolerance), "
          "`B better` / `B worse` (separable after the correction across figures), `not worse by T%` (the "
          "one-sided bound on B's degradation, \"B at worst\", lies inside the tolerance), `undecided` (none "
          "of these: too few boots to tell, never \"the same\"; the boots per arm that would decide it are "
          "stated, at 80% power if B's true difference is the one observed).")


def _meaning(c: Mapping[str, Any]) -> str:
    return {"B NOT WORSE": "Every gating figure is shown not worse (better, equivalent, or B's degradation bounded "
                           "inside the tolerance) and no item regressed.",
            "B WORSE": "B is separably worse on a gating figure, or an item failed only in B.",
            "UNDECIDED": "Can't tell, which is not \"not worse\": a gating figure is neither shown worse nor shown "
                         "not worse. Rerun with the boots stated below (or add boots: ab --until-decided).",
            "INCOMPLETE": "A boot did not finish, or an arm has too few boots: no decision."}[c["result"]]


def _left_out(c: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Each figure not compared, with its reason."""
    return [(fid, c["figures_left_out_reasons"][fid]) for fid in c["figures_left_out"]]


def _source(f: Mapping[str, Any]) -> str:
    return f"; {f['source']}" if f.get("source") else ""


def _paired(f: Mapping[str, Any]) -> str:
    iv = f.get("paired_interval_pct")
    return "-" if not iv else f"{_pct(f['paired_difference_pct'])} ({_pct(iv[0])} … {_pct(iv[1])})"


def _worst(f: Mapping[str, Any]) -> str:
    bound = f.get("degradation_bound_pct")
    if bound is None:
        return "-"
    return f"{_pct(bound, False)} worse" if bound >= 0 else f"{_pct(-bound, False)} better"


def _to_decide(f: Mapping[str, Any]) -> str:
    if f["decision"] != "undecided":
        return "decided"
    n = f.get("boots_to_decide")
    return f"{n}" if n is not None else "> 1000"


def render_md(c: Mapping[str, Any]) -> str:
    arms = list(c["arms"])
    lines = [f"# Comparison: {c['result']} (exit {c['exit_code']})", "", _meaning(c), ""]
    for reason in c["reasons"]:
        lines.append(f"- {reason}")
    if c["reasons"]:
        lines.append("")
    lines += [f"Warm-up: {c['warm_up']}.", ""]
    if c.get("sequential"):
        seq = c["sequential"]
        lines += [f"Boots added until decided ({seq['method']}): "
                  + "; ".join(f"look {i} at {look['boots_per_arm']} boots per arm (alpha share "
                              f"{look['alpha_share']:.3f}): {look['result']}" for i, look in enumerate(seq["looks"], 1))
                  + f"; at most {seq['max_boots']} boots per arm.", ""]
    lines += ["## Identities", "", "| | " + " | ".join(arms) + " |", "|---|" + "---|" * len(arms)]
    for key, values in _identity_rows(c):
        lines.append(f"| {key} | " + " | ".join(v.replace("|", "\\|") for v in values) + " |")
    gating = c["gating"] if isinstance(c["gating"], str) else ", ".join(c["gating"])
    lines += ["", "## Figures", "",
              f"Method: {c['method']}.", "",
              f"Each boot is one sample; the spread is {c['spread']}. Tolerance ±{c['tolerance_pct']:g}%. "
              f"Deciding analysis: {c['decision']['analysis']}"
              + (" (the noise floor's variance and degrees of freedom pooled in where it names the figure)"
                 if c.get("noise_floor") else "") + f". Gating: {gating}.", ""]
    if c.get("spread") == "run-to-run":
        lines += ["The arms were attached endpoints: one sample is one run against a server that kept running, so "
                  "the spread is run-to-run, not boot-to-boot; a boot's own luck is not in it.", ""]
    lines += ["| figure | A | B | B vs A | interval (Holm-adjusted) | 95% interval (unadjusted) | adjacent pairs | "
              "B at worst | call | boots per arm to decide | gates |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for f in c["figures"]:
        lines.append(f"| {f['title']} (`{f['id']}`{_source(f)}) | {_arm_text(f['a'], f['unit'])} | {_arm_text(f['b'], f['unit'])} | "
                     f"{_pct(f['difference_pct'])} | {_interval(f)} | {_interval(f, 'interval_pct')} | "
                     f"{_paired(f)} | {_worst(f)} | **{f['call']}** | {_to_decide(f)} | "
                     f"{'yes' if f['gating'] else 'no'} |")
    lines += ["", _CALLS]
    if c.get("figures_left_out"):
        lines += ["", "Not compared:", ""] + [f"- `{fid}`: {why}" for fid, why in _left_out(c)]
    lines += ["", "## Gate rows, item by item", ""]
    if not c["items"]:
        lines.append("No item failed in any boot of either arm.")
    else:
        ref = "reference" in c["arms"]
        lines += ["| item | failed in A (boots) | failed in B (boots) |" + (" failed in reference |" if ref else "")
                  + " attribution |", "|---|---|---|" + ("---|" if ref else "") + "---|"]
        for r in c["items"]:
            lines.append(f"| {r['item']} | {r['failed_boots_a']}/{r['boots_a']} | {r['failed_boots_b']}/{r['boots_b']} |"
                         + (f" {r['failed_boots_reference']} |" if ref else "") + f" {r['kind']} |")
    lines += ["", "## Workload (the same in every boot)", "", "```json", json.dumps(c["workload"], indent=1), "```", ""]
    return "\n".join(lines)


def _svg(f: Mapping[str, Any]) -> str:
    """Every boot's value per arm on one axis, and below it the interval on B's relative difference
    against zero and the tolerance band."""
    width, pad = 420, 10
    values = f["a"]["values"] + f["b"]["values"]
    lo, hi = min(values), max(values)
    span = (hi - lo) or abs(hi) or 1.0
    lo, hi = lo - span * 0.1, hi + span * 0.1

    def x(v: float) -> float:
        return pad + (v - lo) / (hi - lo) * (width - 2 * pad)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="86" role="img" '
             f'aria-label="{html.escape(f["id"])}: boots per arm and the interval">']
    for row, (arm, color) in enumerate((("a", "#0969da"), ("b", "#b42318"))):
        y = 14 + row * 20
        parts.append(f'<text x="0" y="{y + 4}" font-size="10" fill="#57606a">{arm.upper()}</text>')
        parts.append(f'<line x1="{pad}" x2="{width - pad}" y1="{y}" y2="{y}" stroke="#d0d7de"/>')
        for v in f[arm]["values"]:
            parts.append(f'<circle cx="{x(v):.1f}" cy="{y}" r="4" fill="{color}" fill-opacity="0.7">'
                         f'<title>{html.escape(fmt(v, f["unit"]))}</title></circle>')
    iv, tol = f.get("adjusted_interval_pct"), f["tolerance_pct"]
    if iv:
        reach = max(abs(iv[0]), abs(iv[1]), tol) * 1.2

        def px(p: float) -> float:
            return pad + (p + reach) / (2 * reach) * (width - 2 * pad)

        y = 66
        parts.append(f'<rect x="{px(-tol):.1f}" y="{y - 8}" width="{px(tol) - px(-tol):.1f}" height="16" '
                     f'fill="#e9f6ec"><title>tolerance ±{tol:g}%</title></rect>')
        parts.append(f'<line x1="{px(0):.1f}" x2="{px(0):.1f}" y1="{y - 10}" y2="{y + 10}" stroke="#57606a"/>')
        parts.append(f'<line x1="{px(iv[0]):.1f}" x2="{px(iv[1]):.1f}" y1="{y}" y2="{y}" stroke="#1b1f24" stroke-width="3">'
                     f'<title>interval (Holm-adjusted) {html.escape(_interval(f))}</title></line>')
        if f.get("difference_pct") is not None:
            parts.append(f'<circle cx="{px(f["difference_pct"]):.1f}" cy="{y}" r="3" fill="#1b1f24"/>')
        parts.append(f'<text x="{width - pad}" y="{y + 18}" font-size="9" text-anchor="end" fill="#57606a">'
                     f'B vs A, ±{reach:.1f}%</text>')
    parts.append("</svg>")
    return "".join(parts)


def render_html(c: Mapping[str, Any]) -> str:
    e = html.escape
    cls = {"B NOT WORSE": "v-PASS", "B WORSE": "v-FAIL"}.get(c["result"], "v-INCOMPLETE")  # UNDECIDED: not a pass
    arms = list(c["arms"])
    out = ["<!doctype html><html lang=en><head><meta charset=utf-8>",
           f"<title>Comparison: {e(c['result'])}</title><style>{STYLE}</style></head><body><header>",
           f"<h1>Comparison <span class='verdict {cls}'>{e(c['result'])}</span> <span class=muted>exit {c['exit_code']}</span></h1>"]
    if any((arm.get("identity") or {}).get("simulated") for arm in c["arms"].values()):
        out.append("<div class=sim>SIMULATED: these boots ran against the reference server; the figures describe no "
                   "deployment.</div>")
    out.append(f"<p>{e(_meaning(c))}</p>")
    if c["reasons"]:
        out.append("<ul>" + "".join(f"<li class=reason>{e(r)}</li>" for r in c["reasons"]) + "</ul>")
    out.append(f"<p class=muted>Warm-up: {e(c['warm_up'])}.</p>")
    if c.get("sequential"):
        seq = c["sequential"]
        out.append(f"<p class=muted>Boots added until decided ({e(seq['method'])}): "
                   + "; ".join(f"{look['boots_per_arm']} boots per arm: {e(look['result'])}" for look in seq["looks"])
                   + "</p>")
    out.append("</header><main><h2>Identities</h2><table><tr><th></th>"
               + "".join(f"<th>{e(a)}</th>" for a in arms) + "</tr>")
    for key, values in _identity_rows(c):
        out.append(f"<tr><th>{e(key)}</th>" + "".join(f"<td class=mono>{e(v)}</td>" for v in values) + "</tr>")
    out.append("</table><h2>Figures</h2>")
    out.append(f"<p class=muted>Method: {e(c['method'])}. One sample is one boot; the spread is {e(c['spread'])}; "
               f"deciding analysis: {e(c['decision']['analysis'])}.</p><p>{e(_CALLS)}</p>")
    out.append("<table><tr><th>figure</th><th>A</th><th>B</th><th>B vs A</th><th>interval (Holm-adjusted)</th><th>95% interval (unadjusted)</th>"
               "<th>adjacent pairs</th><th>B at worst</th><th>call</th><th>boots per arm to decide</th><th>boots and interval</th></tr>")
    for f in c["figures"]:
        badge = {"worse": "b-fail", "not worse": "b-ok"}.get(f["decision"], "b-other")
        out.append(f"<tr><td>{e(f['title'])}<br><code>{e(f['id'])}</code>{e(_source(f))}{' <span class=kind>gates</span>' if f['gating'] else ''}</td>"
                   f"<td>{e(_arm_text(f['a'], f['unit']))}</td><td>{e(_arm_text(f['b'], f['unit']))}</td>"
                   f"<td>{e(_pct(f['difference_pct']))}</td><td>{e(_interval(f))}</td><td>{e(_interval(f, 'interval_pct'))}</td>"
                   f"<td>{e(_paired(f))}</td><td>{e(_worst(f))}</td>"
                   f"<td><span class='badge {badge}'>{e(f['call'])}</span></td><td>{e(_to_decide(f))}</td>"
                   f"<td>{_svg(f)}</td></tr>")
    out.append("</table>")
    if c.get("figures_left_out"):
        out.append("<p>Not compared:</p><ul>" + "".join(f"<li><code>{e(fid)}</code>: {e(why)}</li>"
                                                        for fid, why in _left_out(c)) + "</ul>")
    out.append("<h2>Gate rows, item by item</h2>")
    if not c["items"]:
        out.append("<p>No item failed in any boot of either arm.</p>")
    else:
        out.append("<table><tr><th>item</th><th>failed in A</th><th>failed in B</th><th>attribution</th></tr>")
        for r in c["items"]:
            out.append(f"<tr><td class=mono>{e(r['item'])}</td><td>{r['failed_boots_a']}/{r['boots_a']}</td>"
                       f"<td>{r['failed_boots_b']}/{r['boots_b']}</td><td>{e(r['kind'])}</td></tr>")
        out.append("</table>")
    out.append(f"<h2>Workload</h2><pre>{e(json.dumps(c['workload'], indent=1))}</pre></main></body></html>")
    return "".join(out)


def write(comparison: Mapping[str, Any], out_dir: Path) -> list[Path]:
    """The three files and ``SHA256SUMS`` over them; the JSON validated first."""
    validate(comparison)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / FILES[0], out_dir / FILES[1], out_dir / FILES[2]]
    paths[0].write_text(json.dumps(comparison, indent=1) + "\n", encoding="utf-8")
    paths[1].write_text(render_md(comparison), encoding="utf-8")
    paths[2].write_text(render_html(comparison), encoding="utf-8")
    (out_dir / MANIFEST).write_text("".join(f"{sha256_file(p)}  {p.name}\n" for p in paths), encoding="utf-8")
    return paths
