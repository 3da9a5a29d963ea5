"""``report.md``: what an operator pastes into a promotion record, rendered from the summary.

Tables follow the promotion record the protocol was drawn from: the deployment profile, Gate |
Result, Context lane | TTFT | End to end, decode p50/p95 and prefill p50, waivers with reasons,
failures with reasons, and the verdict. A run against the reference server says SIMULATED at
the top, in the title and in the verdict. No pytest here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pytest_qualify.gate.baseline import render_rows
from pytest_qualify.settings import Mode

MAX_FAILURE_ROWS = 60
SIMULATED_BANNER = (
    "> **SIMULATED** — this run qualified the built-in reference server, a deterministic oracle, "
    "**not vLLM and not a model**. Its verdict and figures say nothing about a real deployment "
    "and must not be attached to a promotion record."
)


def cell(value: Any) -> str:
    """A table cell: pipes and newlines would break the Markdown table."""
    text = "" if value is None else str(value)
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ").strip() or "-"


def table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return lines


def seconds(value: float | None) -> str:
    if value is None:
        return "-"
    if value < 1:
        return f"{value * 1000:.1f} ms"
    return f"{value:.3f} s"


def rate(value: float | None) -> str:
    return "-" if value is None else f"{value:,.2f} tok/s"


def spread_text(spread: Mapping[str, Any] | None, fmt: Any = seconds) -> str:
    if not spread:
        return "-"
    text = fmt(spread["median"])
    if spread["n"] > 1:
        text += f" ({fmt(spread['min'])} – {fmt(spread['max'])}, n={spread['n']})"
    return text


def _thinking(th: Mapping[str, Any]) -> str:
    state = "enabled" if th["enabled"] else "disabled"
    return f"{state}; {'overridable' if th['overridable'] else 'not overridable'} by the caller"


def profile_rows(s: Mapping[str, Any]) -> list[tuple[str, str]]:
    p, d, lim, t = s["profile"], s["profile"]["deployment"], s["profile"]["limits"], s["target"]
    lanes = ", ".join(f"{lane['name']} ({lane['prompt_tokens']:,} tokens)" for lane in lim["lanes"]) or "-"
    models = t.get("models") or []
    served = ", ".join(
        f"{m['id']} (root {m.get('root') or '-'}, max_model_len {m.get('max_model_len') or '-'})" for m in models
    )
    rows = [
        ("Profile", f"{p['name']} — {p['description']}" if p.get("description") else p["name"]),
        ("Profile file", p["source"]),
        ("Model", d["model"]),
        ("Revision", d["revision"] or "-"),
        ("Served name", d["served_name"]),
        ("Engine (profile)", d["engine"] or "-"),
        ("Engine (server /version)", t.get("engine_version") or "-"),
        ("Image", (d.get("image") or "-") + (f" @ {d['image_digest']}" if d.get("image_digest") else "")),
        ("Quantization / KV cache", f"{d['quantization'] or '-'} / KV {d['kv_cache_dtype'] or '-'}"),
        ("Window (max_model_len)", f"{lim['window_tokens']:,} tokens"),
        ("Context lanes", lanes),
        ("Visible-answer budget", f"{lim['answer_tokens']:,} tokens; reasoning headroom {lim['reasoning_headroom_tokens']:,}"),
        ("Admission", f"{lim['max_num_seqs']} sequence{'s' if lim['max_num_seqs'] != 1 else ''} (max_num_seqs)"),
        ("Media limits", f"{lim['images_per_request']} images, {lim['videos_per_request']} video per request"),
        ("Thinking", _thinking(p["thinking"])),
        *_stage_rows(s),
        ("Target", t["mode"] + (" (SIMULATED reference server)" if s["simulated"] else "")),
        ("Served by the endpoint", served or "-"),
        ("Launch command", f"`{t['launch_command']}`" if t.get("launch_command") else "- (attached to a running endpoint)"),
    ]
    return rows


def _stage_only(s: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The stage when it is not the full qualification (whose report reads as it always did)."""
    stage = s.get("stage")
    return stage if stage and not stage["qualifies"] else None


def _verdict_block(s: Mapping[str, Any]) -> list[str]:
    from pytest_qualify.evidence.summary import left_out_label

    v = s["verdict"]
    label = f"**{v['result']}**" + (" (SIMULATED)" if s["simulated"] else "")
    stage = _stage_only(s)
    if stage:
        label += f" — stage {stage['name']}, **not a qualification**"
    scope = left_out_label(s)
    if scope:
        label += f" — {scope}"
    lines = [f"## Verdict: {label}", ""]
    if scope:
        lines += [f"This profile leaves out {', '.join(s['protocol']['left_out'])} of protocol "
                  f"v{s['protocol']['version']}: the verdict covers the other modules only.", ""]
    if stage:
        lanes = f" (context lanes: {', '.join(stage['lanes'])})" if "context" in stage["modules"] else ""
        lines += [
            f"`{stage['verdict_line']}`", "",
            f"This run is the **{stage['name']}** stage ({stage['title']}): {', '.join(stage['modules'])}{lanes}. "
            "Its verdict covers those modules only; only the full stage qualifies a deployment.", "",
        ]
    if v["result"] == "PASS":
        waived = len(v["waived"])
        lines.append(
            "Every hard assertion passed in every repetition"
            + (f"; {waived} corpus item(s) failed and were waived (listed below)." if waived else ".")
        )
    elif v["result"] == "INCOMPLETE":
        lines.append("The deployment was not fully judged (this is not a pass, and not a judged failure); "
                     "repeat the run once the cause is fixed:")
        lines.append("")
        lines += [f"- {cell(r)}" for r in v["reasons"]]
    else:
        lines.append("The gate failed because:")
        lines.append("")
        lines += [f"- {cell(r)}" for r in v["reasons"]]
        failures, _ = failures_split(s)
        if failures:
            lines.append(f"- {len(failures)} protocol item(s) failed (see Failures)")
    return lines + [""]


def _provenance(s: Mapping[str, Any]) -> list[str]:
    prov = s.get("provenance")
    if not prov:
        return []
    v, h, ci = prov["versions"], prov["host"], prov["ci"]
    text = ("Judged by " + ", ".join(f"{k} {v[k]}" for k in ("python", "pytest", "pytest-xdist", "openai", "httpx") if k in v)
            + f" on host `{h['hostname']}` ({h['platform']})")
    if ci:
        where = ci.get("run_url") or ci.get("pipeline_url") or ci.get("job_url") or ci.get("run_id") or ci.get("pipeline_id")
        text += f" · CI: {ci['system']} {where or ''}".rstrip()
    return [cell(text), ""]


def render(s: Mapping[str, Any]) -> str:
    from pytest_qualify.evidence.summary import left_out_label

    p, run = s["profile"], s["run"]
    title = f"# Qualification report: {p['deployment']['served_name']} — {s['verdict']['result']}"
    if _stage_only(s):
        stage = s["stage"]
        title = f"# {stage['title']}: {p['deployment']['served_name']} — {stage['verdict_line']}"
    scope = left_out_label(s)
    if scope:
        title += f" ({scope})"
    if s["simulated"]:
        title += " (SIMULATED)"
    out = [title, ""]
    if s["simulated"]:
        out += [SIMULATED_BANNER, ""]
    out += [
        f"Run `{run['id']}` · started {run['started_at']} · {run['duration_s']:.1f} s · "
        f"`--repeat {run['repeat']}`" + (f" · {run['workers']} xdist workers" if run["workers"] else "")
        + f" · pytest-qualify {run['tool_version']}",
        "",
    ]
    out += _provenance(s)
    out += _verdict_block(s)

    out += ["## Deployment", ""] + table(("Field", "Value"), profile_rows(s)) + [""]
    if s["target"].get("startup_error"):
        # Attach mode starts nothing: its endpoint could not be reached, no startup failed.
        head = "**Endpoint could not be reached:**" if s["target"].get("mode") == Mode.ATTACH else "**Server startup failed:**"
        out += [head, "", "```", s["target"]["startup_error"].strip(), "```", ""]
    if s["target"].get("died"):
        out += [f"**Server died during the run:** {cell(s['target']['died'])}", ""]

    out += _identity(s)
    out += _selftest(s)
    out += faults_block(s)

    stage = _stage_only(s)
    out += ["## Gate" + (f" (stage {stage['name']}, not a qualification)" if stage else ""), ""]
    gate_rows = [(g["title"], g["result"] + verdict_mark(g)) for g in s["gate"]]
    gate_rows += [(r["title"], f"{r['measured_text'] or 'not measured'} (limit {r['limit_text']})" + verdict_mark(r))
                  for r in s.get("slo") or []]
    gate_rows += [(c["title"], f"{c['measured'] or 'not measured'} ({c['limit']})" + verdict_mark(c))
                  for c in s.get("checks") or []]
    gate_rows += [(c["title"], claim_result(c) + verdict_mark(c)) for c in s.get("claims") or []]
    out += table(("Gate", "Result"), gate_rows)
    out.append("")
    out += _failure_kinds(s)
    if s.get("slo"):
        out += ["SLO rows: client-observed, with `vllm bench serve`'s definitions; a lane's limit is held by "
                "its worst repetition (max), run-wide limits by the percentile named.", ""]
    out += _evidence_strength(s)

    out += serving_facts_block(s)
    out += claims_block(s)
    out += _timing(s)
    out += sweep_block(s)
    out += _server(s)
    out += _waivers(s)
    out += _failures(s)
    out += _baseline(s)
    out += _artifacts(s)
    return "\n".join(out).rstrip() + "\n"


def _evidence_strength(s: Mapping[str, Any]) -> list[str]:
    stats = s.get("stats")
    if not stats:
        return []
    from pytest_qualify.stats import interval_text, percent

    rows = [(m["title"], f"{m['passed']}/{m['attempts']}", percent(m["pass_rate"]), interval_text(m))
            for m in stats["modules"]]
    o = stats["overall"]
    rows.append(("**All modules**", f"{o['passed']}/{o['attempts']}", percent(o["pass_rate"]), interval_text(o)))
    return ["## Evidence behind the verdict", ""] + table(
        ("Module", "Attempts passed", "Pass rate", "95% Wilson interval"), rows) + [
        "", "An attempt is one repetition of one item. The interval bounds the per-attempt pass probability; "
        "it is informational — the gate itself is pass^k (every attempt must pass).", ""]


def _stage_rows(s: Mapping[str, Any]) -> list[tuple[str, str]]:
    stage = s.get("stage")
    if not stage:
        return []
    text = f"{stage['name']} — {stage['title']}; modules {', '.join(stage['modules'])}"
    if "context" in stage["modules"]:
        text += f"; context lanes {', '.join(stage['lanes'])}"
    if stage.get("not_in_profile"):
        text += f"; not in this profile: {', '.join(stage['not_in_profile'])}"
    return [("Stage", text)]


_IDENTITY_HEADER = ("Reading", "Served name", "Model root", "Revision", "Window", "Engine version")


def _identity_row(label: str, r: Mapping[str, Any] | None) -> tuple[Any, ...]:
    if not r:
        return (label, "not read", "-", "-", "-", "-")
    window = f"{r['window_tokens']:,}" if r.get("window_tokens") is not None else "-"
    row = (label, r["served_name"], r.get("model_root") or "-", r.get("revision") or "- (not visible)", window,
           r.get("engine_version") or "-")
    return row[:-1] + (row[-1] + (f" ({r['error']})" if r.get("error") else ""),)


def _selftest(s: Mapping[str, Any]) -> list[str]:
    """The gate self-test this run required (``--qualify-require-selftest``), by run id and digest."""
    st = (s.get("extra") or {}).get("selftest")
    if not st:
        return []
    return ["## Gate self-test", "",
            f"Required and found: self-test `{st['run_id']}` (`{st['path']}`, sha256 `{st['sha256']}`), "
            f"pytest-qualify {st['plugin_version']}, profile {st['profile']}, finished {st['finished_at']} "
            f"({st['age_days']:.1f} days before this run); it showed {', '.join(st['modules_proven'])} "
            "each failing its own fault on this machine.", ""]


def _identity(s: Mapping[str, Any]) -> list[str]:
    """The served identity at both ends of the run, and the promoted run it was held to."""
    identity, promoted = s.get("identity"), s.get("promoted")
    if not identity and not promoted:
        return []
    out = ["## Served identity", ""]
    rows = []
    if promoted:
        rows.append(_identity_row(f"qualified (run {promoted['run_id']})", promoted["identity"]))
    if identity:
        rows += [_identity_row("start of this run", identity["start"]), _identity_row("end of this run", identity["end"])]
    out += table(_IDENTITY_HEADER, rows) + [""]
    declared = (identity or {}).get("declared") or []
    if declared:
        out += ["Declared | Value | Shown | Where | Result", "--- | --- | --- | --- | ---"]
        out += [f"{cell(d['name'])} | `{cell(d['declared'])}` | " + (f"`{cell(d['shown'])}`" if d["shown"] else "-")
                + f" | {cell(d['where'])} | **{d['status']}**" for d in declared if d["status"] != "not declared"]
        out += [""]
    if identity and identity.get("changed"):
        out += [f"**Identity changed during the run:** {cell(identity['changed'])}", ""]
    elif identity and identity["start"] and identity["end"]:
        out += ["The endpoint served the same identity at the start and at the end of the run.", ""]
    if promoted:
        out += [
            f"Promoted run: `{promoted['run_id']}` (`{promoted['path']}`); its `summary.json` sha256 "
            f"`{promoted['summary_sha256']}`, its bundle's `SHA256SUMS` sha256 `{promoted['bundle_sha256sums_sha256']}`.",
            "",
        ]
        if promoted["mismatches"]:
            out += ["**The live route does not serve the qualified identity:**", ""]
            out += [f"- {cell(m)}" for m in promoted["mismatches"]] + [""]
        else:
            out += ["The live route serves exactly the identity that run qualified "
                    "(model, revision where visible, served name, window, engine version).", ""]
    return out


def faults_block(s: Mapping[str, Any]) -> list[str]:
    """The reference server's fault switches this run turned on, each engaged or not and when it
    first was: a fault that never engaged is why the run is INCOMPLETE."""
    faults = s.get("faults")
    if not faults:
        return []
    rows = []
    for f in faults["armed"]:
        n, after_s = f.get("chat_requests"), f.get("after_s")
        when = ", ".join(part for part in (
            f"chat request {n}" if n else "before any chat request" if n == 0 else "",
            f"{after_s:.1f} s after the server started" if after_s is not None else "") if part)
        when = (when or "engaged") if f["engaged"] else "—"
        rows.append((f"`{f['fault']}`", "yes" if f["engaged"] else "**no: never engaged**", when, f.get("what") or ""))
    where = (f"as the server recorded it in `{faults['recorded_in']}`" if faults.get("recorded_in")
             else f"not recorded: {faults.get('note') or 'the server kept no record'}")
    return ["## Reference faults (SIMULATED)", "",
            f"Fault switches turned on for this run, {cell(where)}. A fault that never engaged changed nothing, "
            "so the run cannot show it is caught: it leaves the run INCOMPLETE.", ""] + table(
        ("Fault", "Engaged", "First engaged", "What it breaks"), rows) + [""]


def failures_split(s: Mapping[str, Any]) -> tuple[list[Mapping[str, Any]], list[Mapping[str, Any]]]:
    """The verdict's failed items as every reader lists them, and the items the gate did not judge:
    (judged failures, not judged). An item the gate did not judge (a steered run's void answers, a
    refused key) may have failed as a test but is no failure of the deployment, and no pass; each
    reader shows it as not judged, with the gate's reason, never among the failures."""
    unjudged = [i for i in s.get("items") or () if i.get("not_judged")]
    skip = {i["nodeid"] for i in unjudged}
    return [f for f in s["verdict"]["failures"] if f.get("nodeid") not in skip], unjudged


def row_verdict(g: Mapping[str, Any]) -> str:
    """A gate row's verdict as the gate decided it (``GateRow.verdict`` for a module row,
    ``verdict`` of an SLO, check or claim row): PASS, FAIL or INCOMPLETE. A summary written before
    rows carried it reads ``ok``, and a run-level row with nothing measured as INCOMPLETE."""
    if g.get("verdict"):
        return str(g["verdict"])
    if g["ok"]:
        return "PASS"
    return "INCOMPLETE" if "measured" in g and g["measured"] is None else "FAIL"


def verdict_mark(g: Mapping[str, Any]) -> str:
    """A gate row's mark in report.md's Result cell: nothing when it passed, else its verdict."""
    return "" if row_verdict(g) == "PASS" else f" — **{row_verdict(g)}**"


def claim_result(c: Mapping[str, Any]) -> str:
    """A claim's gate cell: measured and held or broken, or not verifiable here, beside the claim."""
    got = f"{c['measured_text']} {c['status']}" if c.get("measured") is not None else c["status"]
    return f"{got} (claimed {c['claimed_text']})"


def fact_value(f: Mapping[str, Any], missing: str = "*{}*") -> str:
    """A serving fact's figure with its unit, or its status where it has none."""
    from pytest_qualify.server.facts import format_value

    value = f.get("value")
    return missing.format(f.get("status")) if value is None else format_value(value, str(f.get("unit")))


def serving_facts_block(s: Mapping[str, Any]) -> list[str]:
    """What the engine said of its own capacity and start-up, each fact with its source."""
    sf = s.get("serving_facts")
    if not sf:
        return []
    label = " (SIMULATED)" if sf.get("simulated") else ""
    out = [f"## Serving facts{label}", "",
           f"Engine {sf.get('engine_version') or 'version unknown'}, {sf['mode']} mode; log patterns: "
           f"{sf.get('characterised') or 'not yet characterised'}. Window {sf['window_tokens']:,} tokens.", ""]
    rows = [(f["label"], fact_value(f), f.get("status"), f.get("source") or "", f.get("line") or "")
            for f in sf["facts"].values()]
    out += table(("Fact", "Value", "Status", "Source", "Line"), rows) + [""]
    c = sf.get("concurrency") or {}
    engine = c.get("engine")
    if engine is not None and c.get("from_kv_tokens") is not None:
        out += [f"Concurrency at the window: vLLM's own figure {engine['value']:.2f}x"
                + (f" (for {engine['at_tokens']:,} tokens per request)" if engine.get("at_tokens") else "")
                + f", KV tokens / window {c['from_kv_tokens']:.2f}x"
                + (" — they agree." if c.get("agree") else "."), ""]
    for note in (c.get("note"), sf.get("note")):
        if note:
            out += [f"**{cell(note)}**", ""]
    return out


def claims_block(s: Mapping[str, Any]) -> list[str]:
    """The recipe's claims: claimed, measured, tolerance, held or not, and the recipe's words."""
    claims = s.get("claims") or []
    if not claims:
        return []
    rows = []
    for c in claims:
        held = {"held": "held", "broken": "**broken**"}.get(c["status"], f"*{c['status']}*" + (" (required)" if c["required"] else ""))
        rows.append((c["title"].split(": ", 1)[-1], c["claimed_text"], c.get("measured_text") or "—", held,
                     c["source"], c.get("said") or ""))
    return ["## Recipe claims", ""] + table(("Claim", "Claimed (tolerance)", "Measured", "Held", "Measured by", "The recipe says"), rows) + [""]


def sweep_block(s: Mapping[str, Any]) -> list[str]:
    """The sweep module's TTFT at each prompt size and its single-stream decode probe."""
    sweep = (s.get("timing") or {}).get("sweep")
    if not sweep:
        return []
    out = ["## TTFT sweep and single-stream decode", "", cell(sweep["label"]) + ".", ""]
    rows = [(f"{p['prompt_tokens']:,}", seconds(p["ttft_s"]) + (
                " (engine /metrics: every sample came whole, its first chunk read the parser)"
                if p.get("ttft_source") == "engine /metrics" else ""),
             f"{seconds(p['ttft_s_min'])} – {seconds(p['ttft_s_max'])}" if p["samples"] > 1 else "",
             p["samples"], rate(p["prefill_tok_s"])) for p in sweep["points"]]
    if rows:
        out += table(("Prompt tokens", "TTFT at the first chunk (median)", "min – max", "Samples", "Prefill tok/s"),
                     rows) + [""]
    rows = [(f"{d['prompt_tokens']:,}", d["output_tokens"], rate(d["decode_tok_s"]),
             f"{rate(d['decode_tok_s_min'])} – {rate(d['decode_tok_s_max'])}", d["samples"]) for d in sweep["decode"]]
    if rows:
        out += table(("Decode probe at prompt tokens", "Output tokens", "Decode tok/s (median)", "min – max", "Samples"),
                     rows) + [""]
    return out


def lane_ttft_sources(lanes: Sequence[Mapping[str, Any]]) -> list[str]:
    """One line for each lane whose TTFT is not the client's first chunk alone: a held stream's
    first chunk read the parser, so the line says where the figure came from and what it read."""
    return [f"{lane['lane']} lane: TTFT from {lane['ttft_source']}; {lane['ttft_source_note']}"
            for lane in lanes if lane.get("ttft_source_note")]


def _timing(s: Mapping[str, Any]) -> list[str]:
    t = s["timing"]
    out = ["## Context lanes", ""]
    lanes = t["lanes"]
    if lanes:
        rows = []
        for lane in lanes:
            rows.append((
                lane["lane"],
                spread_text(lane["prompt_tokens"], lambda v: f"{v:,.0f}"),
                spread_text(lane["ttft_s"]),
                spread_text(lane["e2e_s"]),
                f"{lane['passed']}/{lane['items']}",
            ))
        out += table(("Context lane", "Prompt tokens (server)", "TTFT (first chunk)", "End to end", "Passed"), rows)
        out += ["", "Median over repetitions, (min – max) when there is more than one.", ""]
        sources = lane_ttft_sources(lanes)
        if sources:
            out += [f"- {cell(s)}" for s in sources] + [""]
        flags = [f for lane in lanes for f in lane["flags"]]
        if flags:
            out += ["**Prefix-cache flags** (a context lane must not be served from the cache):", ""]
            out += [f"- {cell(f)}" for f in flags] + [""]
    else:
        out += ["No context-lane item recorded timing in this run.", ""]

    out += ["## Throughput (client-observed)", ""]
    d, pf = t["decode_tok_s"], t["prefill_tok_s"]
    rows = [
        ("Decode tok/s p50 (derived from the answers' own lengths)", rate(d["p50"]) if d else "-",
         f"n={d['n']}" if d else "no streamed request with >1 token"),
        ("Decode tok/s p95 (derived)", rate(d["p95"]) if d else "-", ""),
        ("Prefill tok/s p50", rate(pf["p50"]) if pf else "-", f"n={pf['n']}" if pf else "no streamed request"),
        ("TTFT at the first chunk (all streamed items)", spread_text(t["ttft_s"]),
         f"{t['streamed_measured']} streamed of {t['requests_measured']} measured"),
    ]
    out += table(("Metric", "Value", "Sample"), rows)
    out += [
        "",
        "Decode tok/s = (completion_tokens − 1) / (end to end − TTFT); prefill tok/s = prompt_tokens / TTFT. "
        "Token counts are the server's `usage`; times are observed by the client (network and HTTP included). "
        "Each item contributes its first streamed request. The decode figures above are derived from answers of "
        "whatever length they had (often a few tokens); the load module's decode probe (below) decodes a fixed "
        "number of tokens, and its TPOT is the figure a decode SLO should use. TTFT is taken at the first chunk "
        "with `choices` (a role-only chunk counts, as in `vllm bench serve`); the time to the first content "
        "token is recorded beside it (`ttfvt_s`).",
        "",
    ]
    return out + _streaming(t.get("streaming")) + _load(t.get("load"))


def _streaming(streaming: Mapping[str, Any] | None) -> list[str]:
    """How the streamed answers came in chunks: said whenever one arrived whole with its finish."""
    if not streaming or not (streaming.get("answers") or streaming.get("whole_at_finish")):
        return []
    per_chunk = streaming.get("tokens_per_chunk_p50")
    out = ["## Streaming", "",
           f"{streaming['answers']} timed streamed answers; output tokens per chunk p50 "
           f"{per_chunk:.1f} (max {streaming['tokens_per_chunk_max']:.0f})." if per_chunk is not None else
           f"{streaming['answers']} timed streamed answers.", ""]
    whole = streaming.get("whole_at_finish") or 0
    if whole:
        out += [f"**{whole} streamed answer(s) arrived whole in one chunk with their finish**: the engine did not "
                "stream them as it decoded them, so their time to first token is their end to end "
                "(a finding; a failure where the profile sets `[integrity] incremental_streaming = \"required\"`):", ""]
        out += [f"- {cell(i)}" for i in streaming.get("whole_at_finish_items") or []] + [""]
        if streaming.get("engine_note"):
            out += [f"Engine behaviour: {cell(streaming['engine_note'])}.", ""]
    return out


def _load(load: Mapping[str, Any] | None) -> list[str]:
    if not load:
        return []
    out = ["## Load (concurrency levels)", ""]

    def ms(v: Any) -> str:
        return seconds(v) if v is not None else "-"

    rows = []
    for r in load["levels"]:
        rows.append((
            str(r["concurrency"]), f"{r['requests'] - r['failed']}/{r['requests']}", str(r["batch_variance"]),
            " / ".join(ms(r.get(f"ttft_s_p{q}")) for q in (50, 95, 99)),
            " / ".join(ms(r.get(f"tpot_s_p{q}")) for q in (50, 95, 99)),
            " / ".join(ms(r.get(f"itl_s_p{q}")) for q in (50, 95, 99)),
            " / ".join(ms(r.get(f"itl_token_s_p{q}")) for q in (50, 95, 99)),
            (f"{r['tokens_per_chunk_p50']:g} (max {r['tokens_per_chunk_max']:g})"
             if r.get("tokens_per_chunk_p50") is not None and r.get("tokens_per_chunk_max") is not None else "-"),
            f"{r['requests_per_s']:.2f}" if r.get("requests_per_s") is not None else "-",
            rate(r.get("output_tok_s")) if r.get("output_tok_s") is not None else "-",
            ms(r.get("queue_time_s_mean")),
            f"{r['goodput']:.1%}" if r.get("goodput") is not None else "-",
        ))
    out += table(("Concurrency", "Answered right", "Batch variance", "TTFT (first chunk) p50/p95/p99",
                  "TPOT p50/p95/p99", "ITL per chunk p50/p95/p99", "ITL per token p50/p95/p99",
                  "Tokens per chunk p50", "Requests/s", "Output tok/s", "Queue (mean, server)", "Goodput"), rows)
    probe = f"exactly {load['probe_tokens']} tokens" if load.get("probe_tokens") else "a fixed length"
    out += ["", f"Latency from the decode probes ({probe}, `min_tokens` and `ignore_eos`), streamed, with `vllm bench "
                "serve`'s definitions; TTFT at the first chunk; ITL per chunk the gaps between chunks, ITL per "
                "token each gap over the tokens its chunk brought (the stream's running usage, "
                "`continuous_usage_stats`): on an engine that packs many tokens a chunk only the per-token ITL "
                "compares with TPOT; throughput over every request of the level; queue time from the server's "
                "`vllm:request_queue_time_seconds`; goodput: the probes inside the profile's TTFT and TPOT limits. "
                "Each figure is its worst repetition. Batch variance: answers that differ from the same request's "
                "answer at concurrency 1 (a finding; a failure when graded wrong, or when the profile declares "
                "the deployment batch-invariant).", ""]
    return out


def _server(s: Mapping[str, Any]) -> list[str]:
    m = s["server_metrics"]
    out = ["## Server-side cross-check (/metrics)", ""]
    if not m["available"]:
        errs = "; ".join(f"{k}: {v}" for k, v in m["errors"].items()) or "no scrape"
        return out + [f"Not available: {cell(errs)}", ""]
    run = m["run"]
    rows = [
        ("Requests (TTFT observations)", _n(run["requests"])),
        ("Server TTFT mean", seconds(run["ttft_mean_s"])),
        ("Server end-to-end mean", seconds(run["e2e_mean_s"])),
        ("Prompt tokens", _n(run["prompt_tokens"])),
        ("Generation tokens", _n(run["generation_tokens"])),
        (f"Prefix-cache hit tokens ({run['cache_metric'] or 'not exposed'})", _n(run["cache_hit_tokens"])),
    ]
    out += table(("Whole run (end − start scrape)", "Value"), rows) + [""]
    lanes = [lane for lane in s["timing"]["lanes"] if lane["server_ttft_s"]]
    if lanes:
        out += table(
            ("Context lane", "Client TTFT (first chunk)", "Server TTFT (first token)", "Client / server", "Prefix-cache hits",
             "Attribution"),
            [(lane["lane"], spread_text(lane.get("client_ttft_s") or lane["ttft_s"]), spread_text(lane["server_ttft_s"]),
              spread_text(lane["ttft_client_server_ratio"], lambda v: f"{v:.2f}×"),
              _n(lane["prefix_cache_hit_tokens"]), lane["metrics_attribution"] or "-") for lane in lanes],
        )
        out += ["", "Scraped before and after each context-lane item. `shared`: other requests ran at the same "
                "time (pytest -n), so the lane's server figures and ratio are not attributable to it alone.", ""]
    if m["errors"]:
        out += [f"Scrape errors: {cell('; '.join(f'{k}: {v}' for k, v in m['errors'].items()))}", ""]
    return out


def _n(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _waivers(s: Mapping[str, Any]) -> list[str]:
    w = s["waivers"]
    waived = s["verdict"]["waived"]
    out = ["## Waivers", ""]
    if w is None:
        return out + ["No waiver file was given.", ""]
    out.append(f"Waiver file: `{w['file']}`")
    out.append("")
    if w["waivers"]:
        out += table(
            ("Waiver", "Reason", "Expires", "Status", "Waived items"),
            [(x["item"], x["reason"], x["expires"], x["status"].upper() if x["status"] == "stale" else x["status"],
              ", ".join(x["applied_to"]) or "-") for x in w["waivers"]],
        )
        out.append("")
    if waived:
        out += ["Waived failures (not hidden; each still failed):", ""]
        out += table(("Item", "Repetition", "Failure", "Waiver"),
                     [(f["item"], f["repetition"], f["reason"], f["waiver"]) for f in waived])
        out.append("")
    stale = [x for x in w["waivers"] if x["status"] == "stale"]
    if stale:
        out += [f"**Stale waivers** (match no test in this run): {', '.join(cell(x['item']) for x in stale)}", ""]
    return out


def _failure_kinds(s: Mapping[str, Any]) -> list[str]:
    """Failed items per module, format apart from fact: "the model did not follow the answer
    contract" is not "the model got it wrong" (other: no answer was judged — a timeout, a refusal)."""
    rows = [(g["title"], k["format"], k["fact"], k["other"]) for g in s["gate"]
            if (k := g.get("failures_by_kind")) and any(k.values())]
    if not rows:
        return []
    return ["Failed items by kind (format: the answer contract was not followed; fact: it was, with a wrong "
            "value; other: no answer was judged):", ""] + table(("Module", "Format", "Fact", "Other"), rows) + [""]


def _failures(s: Mapping[str, Any]) -> list[str]:
    failures, unjudged = failures_split(s)
    out = ["## Failures", ""]
    if not failures:
        out += ["None.", ""]
    else:
        rows = [(f["module"], f["item"], f["lane"] or "-", f["repetition"], f["outcome"], f.get("failure_kind") or "-",
                 f["reason"]) for f in failures[:MAX_FAILURE_ROWS]]
        out += table(("Module", "Item", "Lane", "Repetition", "Outcome", "Kind", "Reason"), rows)
        if len(failures) > MAX_FAILURE_ROWS:
            out.append(f"\n… and {len(failures) - MAX_FAILURE_ROWS} more in summary.json and junit.xml.")
        out.append("")
    if unjudged:
        out += ["## Not judged", "",
                f"{len(unjudged)} item(s) the gate did not judge: no failure of the deployment, and no pass.", ""]
        out += table(("Module", "Item", "Lane", "Repetition", "Outcome", "Why not judged", "The test's reason"),
                     [(f["module"], f["item"], f["lane"] or "-", f["repetition"], f["outcome"], f["not_judged"],
                       f["reason"] or "-") for f in unjudged[:MAX_FAILURE_ROWS]])
        if len(unjudged) > MAX_FAILURE_ROWS:
            out.append(f"\n… and {len(unjudged) - MAX_FAILURE_ROWS} more in summary.json and junit.xml.")
        out.append("")
    return out


def _baseline(s: Mapping[str, Any]) -> list[str]:
    b = s["baseline"]
    if b is None:
        return []
    out = ["## Against the baseline", "",
           f"Baseline: `{b['path']}` (run {b['run_id'] or '-'}); regression threshold {b['threshold_pct']:g}%"
           + ("; regressions fail the gate." if b["fail_on_regression"] else "; regressions are flagged, not failed."),
           ""]
    out += table(("Metric", "Baseline", "This run", "Δ"), render_rows(b))
    out.append("")
    if b["notes"]:
        out += [f"- note: {cell(n)}" for n in b["notes"]] + [""]
    if b["regressions"]:
        out += ["**Regressions:**", ""] + [f"- {cell(r)}" for r in b["regressions"]] + [""]
    flips = b.get("flips")
    if flips is not None:
        out += ["**Per-item flips** (all repetitions of an item together):", ""]
        out += table(("Module", "Item", "Baseline", "This run", "Change"),
                     [(f["module"], f["item"], f["baseline"], f["current"], f["change"]) for f in flips]) if flips else ["None."]
        out.append("")
    return out


def _artifacts(s: Mapping[str, Any]) -> list[str]:
    a = s["artifacts"]
    out = ["## Evidence files", ""]
    if a.get("html"):
        out += [f"Every item's requests, answers and reasons: [`{a['html']}`]({a['html']}) (one self-contained page; "
                f"its data is `{a.get('transcripts') or 'transcripts.jsonl'}` and `summary.json`).", ""]
    out.append("`junit.xml`, `report.md`, `summary.json` (schema `pytest-qualify/summary` "
               f"v{s['schema_version']}), "
               + (f"`{a['provenance']}` (in-toto statement over the other files), " if a.get("provenance") else "")
               + ("`server.log`, " if s["target"]["mode"] != Mode.ATTACH else "")
               + (", ".join(f"`{f}`" for f in s["server_metrics"]["files"]) or "no metrics snapshots")
               + (f", `{a['plot']}`" if a["plot"] else "")
               + "; `SHA256SUMS` verifies them all (`sha256sum -c SHA256SUMS`).")
    if a["plot"]:
        out += ["", f"![TTFT against prompt tokens]({a['plot']})"]
    if a["notes"]:
        out += [""] + [f"- {cell(n)}" for n in a["notes"]]
    return out + [""]
