"""``summary.json``: the run as data, versioned and validated by the JSON Schema that ships in
``pytest_qualify/schemas/summary.schema.json``. The report, the terminal lines and the baseline
comparison are all rendered from this one dictionary, so they cannot disagree. No pytest here.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from typing import TYPE_CHECKING

from pytest_qualify import engines
from pytest_qualify.evidence.metrics import Snapshot, TimingSource, delta, held_stream
from pytest_qualify.graders.answer_checks import INCREMENTAL_MIN_TOKENS
from pytest_qualify.bundle_format.schema import SCHEMA_ID, SCHEMA_VERSION
from pytest_qualify.bundle_format.workload import load_plan, sweep_plan
from pytest_qualify.properties import Outcome
from pytest_qualify.redaction import redact_command, safe_url
from pytest_qualify.server.info import ServerInfo
from pytest_qualify.stats import percentile, spread

if TYPE_CHECKING:
    from pytest_qualify.evidence.session import CaseRecord
    from pytest_qualify.gate.claims import ClaimRow
    from pytest_qualify.gate.decide import Decision, GateVerdict, ItemResult
    from pytest_qualify.gate.slo import SloRow
    from pytest_qualify.profiles import Profile
    from pytest_qualify.run import RunState
    from pytest_qualify.promotion.stage_run import StageRun

CONTEXT_MODULE = "context"
SCALARS = (str, int, float, bool, type(None))


def iso(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.timezone.utc).isoformat(timespec="seconds")


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, SCALARS):
        return value
    return str(value)


def _num(props: Mapping[str, Any], key: str) -> float | None:
    value = props.get(key)
    if isinstance(value, bool) or value is None:
        return None
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None


def _spread(values: Iterable[float | None]) -> dict[str, Any] | None:
    s = spread([v for v in values if v is not None])
    return s.as_dict() if s else None


# -- pieces ----------------------------------------------------------------------------------------


def profile_section(profile: Profile) -> dict[str, Any]:
    d, lim, th = profile.deployment, profile.limits, profile.thinking
    return {
        "name": profile.name,
        "source": profile.source,
        "description": profile.description,
        "deployment": {
            "model": d.model, "revision": d.revision, "served_name": d.served_name, "engine": d.engine,
            "image": d.image, "image_digest": d.image_digest, "quantization": d.quantization,
            "kv_cache_dtype": d.kv_cache_dtype,
        },
        "limits": {
            "window_tokens": lim.window_tokens,
            "answer_tokens": lim.answer_tokens,
            "reasoning_headroom_tokens": lim.reasoning_headroom_tokens,
            "max_num_seqs": lim.max_num_seqs,
            "images_per_request": lim.images_per_request,
            "videos_per_request": lim.videos_per_request,
            "lanes": [{"name": lane.name, "prompt_tokens": lane.prompt_tokens} for lane in lim.lanes],
        },
        "thinking": {"enabled": th.enabled, "overridable": th.overridable},
        "required_modules": list(profile.required_modules),
        "waivable_modules": list(profile.waivable_modules),
        # The plans that shape the load and sweep figures: what a comparison holds two runs to.
        "load": load_plan(profile.load) if profile.load is not None else None,
        "sweep": sweep_plan(profile.sweep),
    }


def item_section(result: ItemResult, case: CaseRecord | None) -> dict[str, Any]:
    props = {k: _json_safe(v) for k, v in result.properties.items()}
    return {
        "nodeid": result.nodeid,
        "module": result.module,
        "item": result.item,
        "repetition": result.repetition,
        "repetitions": result.repetitions,
        "lane": result.lane,
        "outcome": result.outcome,
        "reason": result.reason,
        "failure_kind": result.failure_kind,
        "waiver": result.waiver,
        "duration_s": round(case.duration_s, 6) if case else None,
        "properties": props,
    }


def timing_section(items: Sequence[Mapping[str, Any]], lane_order: Sequence[str],
                   engine_version: str | None = None) -> dict[str, Any]:
    """Suite-level decode p50/p95 and prefill p50 over every item's recorded request, and the
    context lanes' TTFT / end-to-end as median with min-max over repetitions."""
    props = [i["properties"] for i in items]
    decode = [v for v in (_num(p, "decode_tok_s") for p in props) if v is not None]
    prefill = [v for v in (_num(p, "prefill_tok_s") for p in props) if v is not None]
    ttft = [v for v in (_num(p, "ttft_s") for p in props) if v is not None]
    out: dict[str, Any] = {
        "label": "client-observed (includes network and HTTP time)",
        "requests_measured": sum(1 for p in props if _num(p, "e2e_s") is not None),
        "streamed_measured": len(ttft),
        "decode_tok_s": {"p50": percentile(decode, 50), "p95": percentile(decode, 95), "n": len(decode)} if decode else None,
        "prefill_tok_s": {"p50": percentile(prefill, 50), "n": len(prefill)} if prefill else None,
        "ttft_s": _spread(ttft),
        "points": [
            {"prompt_tokens": int(_num(p, "prompt_tokens") or 0), "ttft_s": _num(p, "ttft_s"),
             "lane": i.get("lane"), "module": i["module"], "outcome": i["outcome"]}
            for i, p in zip(items, props)
            # The sweep's items keep their warm-up's timing; their samples are timing.sweep's points.
            if _num(p, "ttft_s") is not None and _num(p, "prompt_tokens") is not None and i["module"] != SWEEP_MODULE
        ],
        "lanes": lanes_section(items, lane_order),
    }
    streaming = streaming_section(items, engine_version)
    if streaming is not None:
        out["streaming"] = streaming
    load = load_section(items)
    if load is not None:
        out["load"] = load
    sweep = sweep_section(items)
    if sweep is not None:
        out["sweep"] = sweep
    return out


def streaming_section(items: Sequence[Mapping[str, Any]], engine_version: str | None = None) -> dict[str, Any] | None:
    """How the items' streamed answers (each item's timed one, and every answer of the load and
    sweep items) came in chunks: how many, how many arrived whole in one chunk with their finish (at
    least ``INCREMENTAL_MIN_TOKENS`` tokens), and the tokens per output chunk. None when nothing was
    streamed."""
    streamed = [i for i in items if (i["properties"] or {}).get("timing_source") == "streamed"
                and _num(i["properties"], "output_chunks") is not None]
    # The load module's answers and the sweep's samples are counted by their items (none of them is
    # the item's timed answer): each such item is named with how many of its answers came whole.
    counted = {"load": "load_whole_at_finish", "sweep": "sweep_whole_at_finish"}
    many = [(i, int(n)) for i in items for key in [counted.get(i["module"])]
            if key and (n := _num(i["properties"] or {}, key))]
    if not streamed and not many:
        return None
    whole = [i for i in streamed if held_stream(i["properties"])]
    named = [f"{i['module']}: {i['item']} (repetition {i['repetition']})" for i in whole]
    named += [f"{i['module']}: {i['item']} (repetition {i['repetition']}): {n} of its answers" for i, n in many]
    per_chunk = [v for v in (_num(i["properties"], "tokens_per_chunk") for i in streamed) if v is not None]
    return {
        "label": (f"each item's timed streamed answer; whole at finish: every output token in one chunk with the "
                  f"finish, for an answer of {INCREMENTAL_MIN_TOKENS} tokens or more (its TTFT, at the first chunk, "
                  "is then its end to end)"),
        "answers": len(streamed),
        "whole_at_finish": len(whole) + sum(n for _, n in many),
        "whole_at_finish_items": named[:20],
        "tokens_per_chunk_p50": percentile(per_chunk, 50) if per_chunk else None,
        "tokens_per_chunk_max": max(per_chunk) if per_chunk else None,
        "engine_note": _stream_note(engine_version) if whole else None,
    }


def _stream_note(engine_version: str | None) -> str | None:
    found = engines.known(engine_version)
    return found.stream_note() if found is not None else None


SWEEP_MODULE = "sweep"


def _samples(text: Any) -> list[float]:
    """A sweep item's per-sample figures (a comma-separated property: JUnit properties are scalars)."""
    out = []
    for part in str(text or "").split(","):
        try:
            value = float(part)
        except ValueError:
            continue
        if math.isfinite(value):
            out.append(value)
    return out


def sweep_section(items: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The sweep module's figures (suites/test_sweep.py): per prompt size, TTFT over every warm
    sample of every repetition (median, min, max, the samples) and prefill tok/s as the size over
    the median TTFT (the recipe's own arithmetic: 2,042 tokens in 403 ms is about 5,071 tok/s); where
    every sample came whole with its finish (its first chunk read the parser), the engine's own TTFT
    over the samples (``/metrics``) stands for them where the server reported it (``ttft_source``,
    and ``ttft_sources``: each repetition the figure was taken from, with its source); per
    decode-probe prompt size, single-stream decode tok/s (median of the probes). None when the
    module recorded nothing."""
    group = [i for i in items if i.get("module") == SWEEP_MODULE]
    if not group:
        return None
    ttft: dict[int, list[float]] = {}
    engine: dict[int, list[float]] = {}  # the engine's own TTFT over each repetition's samples
    # The repetitions that timed a size from their samples' first chunks, and from the engine's TTFT.
    sampled: dict[int, set[int]] = {}
    engine_reps: dict[int, set[int]] = {}
    measured: dict[int, set[int]] = {}
    decode: dict[int, list[float]] = {}
    decode_out: dict[int, int] = {}
    for i in group:
        p = i["properties"]
        size = _num(p, "sweep_prompt_tokens")
        if size is not None:
            values = _samples(p.get("sweep_ttft_s_samples"))
            ttft.setdefault(int(size), []).extend(values)
            if values:
                sampled.setdefault(int(size), set()).add(int(i["repetition"]))
            if _num(p, "sweep_engine_ttft_s") is not None:
                engine.setdefault(int(size), []).append(float(_num(p, "sweep_engine_ttft_s") or 0.0))
                engine_reps.setdefault(int(size), set()).add(int(i["repetition"]))
            got = _num(p, "sweep_measured_prompt_tokens")
            if got is not None:
                measured.setdefault(int(size), set()).add(int(got))
        size = _num(p, "decode_probe_prompt_tokens")
        if size is not None:
            decode.setdefault(int(size), []).extend(_samples(p.get("decode_probe_tok_s_samples")))
            decode_out[int(size)] = int(_num(p, "decode_probe_tokens") or 0)
    points = []
    for size in sorted(ttft):
        values = ttft[size]
        engine_ttft = percentile(engine[size], 50) if engine.get(size) else None
        median = percentile(values, 50) if values else None
        # Every sample came whole with its finish (its first chunk read the parser): the engine's own
        # TTFT over the samples stands for the point where the server reported it.
        source = TimingSource.CLIENT if values else (TimingSource.ENGINE if engine_ttft else None)
        reps = sampled.get(size, set()) if values else (engine_reps.get(size, set()) if source else set())
        if not values:
            median = engine_ttft
        points.append({"prompt_tokens": size, "samples": len(values), "ttft_s": median,
                       "ttft_s_min": min(values) if values else None, "ttft_s_max": max(values) if values else None,
                       "ttft_s_samples": values, "prefill_tok_s": size / median if median else None,
                       "measured_prompt_tokens": sorted(measured.get(size, ())),
                       "engine_ttft_s": engine_ttft, "ttft_source": str(source) if source else None,
                       "ttft_sources": timing_sources((rep, source) for rep in reps)})
    probes = []
    for size in sorted(decode):
        values = decode[size]
        probes.append({"prompt_tokens": size, "output_tokens": decode_out[size], "samples": len(values),
                       "decode_tok_s": percentile(values, 50) if values else None,
                       "decode_tok_s_min": min(values) if values else None,
                       "decode_tok_s_max": max(values) if values else None, "decode_tok_s_samples": values})
    return {"label": "warm, greedy, a fresh cache salt per sample, client-observed; prompts of exactly the named "
                     "server-token counts", "points": points, "decode": probes}


# The load module's per-level figures (suites/test_load.py) and which way is worse for each.
LOAD_CEILINGS = (tuple(f"{m}_p{q}" for m in ("ttft_s", "tpot_s", "itl_s", "itl_token_s") for q in (50, 95, 99))
                 + ("queue_time_s_mean", "tokens_per_chunk_p50", "tokens_per_chunk_max", "engine_tpot_s_mean"))
LOAD_FLOORS = ("requests_per_s", "output_tok_s", "goodput")
# probes: the decode probes timed; probes_whole: those whose stream came whole (no decode figure from them).
LOAD_COUNTS = ("requests", "failed", "batch_variance", "probes", "probes_whole")


def load_section(items: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """Per concurrency level over the load module's repetitions: the counts summed, each figure at
    its worst repetition (the highest latency, the lowest throughput and goodput), as the
    ``[slo.load]`` rows hold them. None when the load module recorded nothing."""
    from pytest_qualify.gate.slo import LOAD_MODULE, load_levels

    group = [i for i in items if i.get("module") == LOAD_MODULE]
    levels = load_levels(group)
    if not levels:
        return None
    props = [i["properties"] for i in group]
    rows = []
    for level in levels:
        row: dict[str, Any] = {"concurrency": level,
                               "repetitions": sum(1 for p in props if _num(p, f"load_c{level}_requests") is not None)}
        for key in LOAD_COUNTS:
            row[key] = int(sum(_num(p, f"load_c{level}_{key}") or 0 for p in props))
        for keys, worst in ((LOAD_CEILINGS, max), (LOAD_FLOORS, min)):
            for key in keys:
                values = [v for v in (_num(p, f"load_c{level}_{key}") for p in props) if v is not None]
                row[key] = worst(values) if values else None
        rows.append(row)
    tokens = {int(v) for v in (_num(p, "load_probe_tokens") for p in props) if v is not None}
    return {"label": "decode probes of a fixed output length, client-observed; worst repetition per level",
            "probe_tokens": tokens.pop() if len(tokens) == 1 else None, "levels": rows}


def lanes_section(items: Sequence[Mapping[str, Any]], lane_order: Sequence[str]) -> list[dict[str, Any]]:
    lane_items: dict[str, list[Mapping[str, Any]]] = {}
    for i in items:
        if i["module"] == CONTEXT_MODULE and i.get("lane"):
            lane_items.setdefault(str(i["lane"]), []).append(i)
    order = [n for n in lane_order if n in lane_items] + sorted(n for n in lane_items if n not in lane_order)
    lanes = []
    for name in order:
        group = sorted(lane_items[name], key=lambda i: i["repetition"])
        props = [i["properties"] for i in group]
        ratios = []
        for p in props:
            # The client's own first chunk, also where the engine's TTFT stands for a held stream.
            c, s = _num(p, "client_ttft_s") or _num(p, "ttft_s"), _num(p, "server_ttft_s")
            if c is not None and s and p.get("metrics_attribution") == "exclusive":
                ratios.append(c / s)
        hits = [int(_num(p, "prefix_cache_hit_tokens") or 0) for p in props if _num(p, "prefix_cache_hit_tokens") is not None]
        cached = [int(_num(p, "cached_tokens") or 0) for p in props if _num(p, "cached_tokens") is not None]
        attributions = {str(p.get("metrics_attribution")) for p in props if p.get("metrics_attribution")}
        flags = []
        for i, p in zip(group, props):
            where = f"{name} lane, repetition {i['repetition']}"
            h = _num(p, "prefix_cache_hit_tokens")
            c = _num(p, "cached_tokens")
            shared = p.get("metrics_attribution") == "shared"
            # Under pytest -n other items run during the lane: when the lane's own usage reports no
            # cached token, the server's hits belong to them, not to the lane.
            if h and not (shared and c == 0):
                flags.append(
                    f"{where}: the server counted {int(h)} prefix-cache hit tokens during the lane"
                    + (" (other requests ran concurrently: attribution uncertain)" if shared else "")
                )
            if c:
                flags.append(f"{where}: usage reports {int(c)} cached prompt tokens")
        lanes.append({
            "lane": name,
            "items": len(group),
            "passed": sum(1 for i in group if i["outcome"] == Outcome.PASSED),
            "repetitions": sorted({i["repetition"] for i in group}),
            "prompt_tokens": _spread(_num(p, "prompt_tokens") for p in props),
            "ttft_s": _spread(_num(p, "ttft_s") for p in props),
            # The client's first chunk, where a held stream's TTFT is the engine's (ttft_source).
            "client_ttft_s": _spread(_num(p, "client_ttft_s") or _num(p, "ttft_s") for p in props),
            "ttfvt_s": _spread(_num(p, "ttfvt_s") for p in props),
            "e2e_s": _spread(_num(p, "e2e_s") for p in props),
            "decode_tok_s": _spread(_num(p, "decode_tok_s") for p in props),
            "prefill_tok_s": _spread(_num(p, "prefill_tok_s") for p in props),
            "server_ttft_s": _spread(_num(p, "server_ttft_s") for p in props),
            "ttft_client_server_ratio": _spread(ratios),
            "prefix_cache_hit_tokens": sum(hits) if hits else None,
            "cached_tokens": sum(cached) if cached else None,
            "metrics_attribution": (attributions.pop() if len(attributions) == 1 else "mixed") if attributions else None,
            **_ttft_source(group),
            "flags": flags,
        })
    return lanes


def timing_sources(taken: Iterable[tuple[int, Any]]) -> list[dict[str, Any]]:
    """A figure's ``ttft_sources``: each repetition it was taken from with its source (a
    :class:`TimingSource` value), by repetition. What a reader of the summary (``compare``) reads; the
    ``ttft_source`` text beside it renders the same for report.md and the terminal."""
    return [{"repetition": rep, "source": str(source)} for rep, source in sorted(taken)]


def _ttft_source(group: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Where a lane's TTFT came from over its repetitions (``evidence.metrics.lane_timing``): each
    repetition with its source (``ttft_sources``); as text, one source, or each with its repetitions;
    and, where any stream was held, what that source read."""
    from pytest_qualify.evidence.metrics import TIMING_SOURCE_NOTES

    reps: dict[str, list[int]] = {}
    for i in group:
        source = (i["properties"] or {}).get("ttft_source")
        if source:
            reps.setdefault(str(source), []).append(int(i["repetition"]))
    sources = timing_sources((rep, source) for source, r in reps.items() for rep in r)
    if not reps:
        return {"ttft_source": None, "ttft_source_note": None, "ttft_sources": sources}
    text = next(iter(reps)) if len(reps) == 1 else ", ".join(
        f"{source} (repetition{'s' if len(r) > 1 else ''} {', '.join(map(str, r))})" for source, r in reps.items())
    held = [f"{source}: {TIMING_SOURCE_NOTES[source]}" for source in reps  # type: ignore[index]
            if source != TimingSource.CLIENT and source in TIMING_SOURCE_NOTES]
    return {"ttft_source": text, "ttft_source_note": "; ".join(held) or None, "ttft_sources": sources}


def server_metrics_section(snapshots: Mapping[str, Snapshot], errors: Mapping[str, str],
                           files: Sequence[str]) -> dict[str, Any]:
    start, end = snapshots.get("start"), snapshots.get("end")
    run = delta(start, end).as_dict() if start is not None and end is not None else None
    return {
        "available": run is not None,
        "errors": dict(errors),
        "files": list(files),
        "run": run,
    }


def gate_section(verdict: GateVerdict) -> list[dict[str, Any]]:
    from pytest_qualify.gate.decide import failure_kinds
    from pytest_qualify.properties import FAILURE_KINDS

    # Failed items per kind (waived ones included: they failed too): format apart from fact.
    kinds = failure_kinds([*verdict.failures, *verdict.waived])
    return [{**r.as_dict(), "failures_by_kind": kinds.get(r.module, dict.fromkeys(FAILURE_KINDS, 0))}
            for r in verdict.rows]


def checks_section(verdict: GateVerdict, rows: Iterable[SloRow | ClaimRow]) -> list[dict[str, Any]]:
    """The gate's run-level rows that are neither a module, an SLO nor a claim (``rows``: those have
    their own sections, ``slo`` and ``claims``): today the integrity module's run-end row, every
    sampled answer held to the end of the run. Written whether they passed or failed, so the evidence
    shows the row was decided."""
    slo_titles = {row.title for row in rows}
    return [{"title": c.title, "measured": c.measured, "limit": c.limit, "ok": c.ok, "reason": c.reason,
             "verdict": c.verdict} for c in verdict.checks if c.title not in slo_titles]


def verdict_section(verdict: GateVerdict) -> dict[str, Any]:
    def brief(r: Any) -> dict[str, Any]:
        return {"nodeid": r.nodeid, "module": r.module, "item": r.item, "repetition": r.repetition,
                "lane": r.lane, "outcome": r.outcome, "reason": r.reason, "failure_kind": r.failure_kind,
                "waiver": r.waiver}

    return {
        "result": verdict.verdict,
        "reasons": list(verdict.reasons),
        "incomplete": list(verdict.incomplete),
        # The reasons as gate rows: JUnit's failing (judged) and erroring (not judged) run-level cases.
        "findings": [f.as_dict() for f in getattr(verdict, "findings", ())],
        "failures": [brief(r) for r in verdict.failures],
        "waived": [brief(r) for r in verdict.waived],
    }


def tool_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("pytest-qualify")
    except metadata.PackageNotFoundError:
        return "unknown"


def target_section(state: RunState, died: str | None, secrets: Sequence[str]) -> dict[str, Any]:
    """What was qualified: the mode, the URL without credentials, the exact launch command."""
    info = state.server_info or ServerInfo.unanswered(state.settings.mode)
    command = info.launch_command or (state.target.display_command if state.target is not None else "")
    models = []
    for m in info.models or ():
        if isinstance(m, dict):
            mlen = m.get("max_model_len")
            models.append({"id": str(m.get("id", "")), "root": m.get("root"),
                           "max_model_len": mlen if isinstance(mlen, int) else None})
    return {
        "mode": state.settings.mode,
        "simulated": state.simulated,
        "base_url": safe_url(state.base_url),
        "launch_command": redact_command(command, secrets) if command else None,
        "engine_version": info.version or None,
        "version_error": info.version_error,
        "models": models,
        "startup_error": state.startup_error,
        "died": died,
    }


PROTOCOL_VERSION = 3


def protocol_section(required: Sequence[str], protocol_modules: Iterable[str],
                     task_data_sha256: str | None = None) -> dict[str, Any]:
    """The protocol's modules and those the profile leaves out: a profile without ``integrity``
    reads "protocol v3 less integrity" wherever its verdict is shown, never as the whole protocol.
    ``task_data_sha256``: the digest of what the run's requests were built from
    (``bundle_format.workload.task_data_sha256``), which a later comparison holds to its own."""
    modules = list(protocol_modules)
    left_out = [m for m in modules if m not in required]
    label = f"protocol v{PROTOCOL_VERSION}"
    if len(left_out) > 3:  # most of it left out: say what is in
        kept = [m for m in modules if m not in left_out]
        label += f" subset: {', '.join(kept) or 'no module'} ({len(kept)} of {len(modules)} modules)"
    elif left_out:
        label += f" less {', '.join(left_out)}"
    out = {"version": PROTOCOL_VERSION, "modules": modules, "left_out": left_out, "label": label}
    if task_data_sha256 is not None:
        out["task_data_sha256"] = task_data_sha256
    return out


def left_out_label(summary: Mapping[str, Any]) -> str | None:
    """"protocol v3 less integrity" when the run's profile leaves modules of the protocol out, else
    None: every writer that shows the verdict shows this beside it."""
    protocol = summary.get("protocol") or {}
    return protocol["label"] if protocol.get("left_out") else None


def _scoped_stage(stage: dict[str, Any], protocol: Mapping[str, Any]) -> dict[str, Any]:
    # "Full qualification (protocol v3)" of a profile without integrity is
    # "Full qualification (protocol v3 less integrity)".
    if not stage.get("qualifies") or not protocol.get("left_out"):
        return stage
    whole = f"(protocol v{protocol['version']})"
    title = str(stage["title"])
    title = title.replace(whole, f"({protocol['label']})") if whole in title else f"{title} ({protocol['label']})"
    return {**stage, "title": title}


def facts_section(
    *,
    run: Mapping[str, Any],
    target: Mapping[str, Any],
    profile: Profile,
    results: Iterable[ItemResult],
    cases: Mapping[str, CaseRecord],
    snapshots: Mapping[str, Snapshot],
    metrics_errors: Mapping[str, str],
    metrics_files: Sequence[str],
    protocol: Mapping[str, Any] | None = None,
    provenance: Mapping[str, Any] | None = None,
    serving: Mapping[str, Any] | None = None,
    faults: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The summary's sections that are facts, not judgements: what ran, on what, what each item
    did and measured, by what (``provenance``). Built once at the end of a run; the gate reads its
    part of it typed (``gate.RunFacts.of``: the SLOs, the claims and the baseline are computed from
    that), :func:`render_summary` adds the decision."""
    items = [item_section(r, cases.get(r.nodeid)) for r in results]
    extra = {k: dict(v) for k, v in (("protocol", protocol), ("provenance", provenance), ("serving_facts", serving),
                                     ("faults", faults)) if v is not None}
    return {
        **extra,
        "run": dict(run),
        "simulated": bool(target.get("simulated")),
        "target": dict(target),
        "profile": profile_section(profile),
        "timing": timing_section(items, [lane.name for lane in profile.limits.lanes], target.get("engine_version")),
        "server_metrics": server_metrics_section(snapshots, metrics_errors, metrics_files),
        "items": items,
    }


def render_summary(
    facts: Mapping[str, Any],
    verdict: Decision,
    *,
    artifacts: Mapping[str, Any],
    stage: Mapping[str, Any] | None = None,
    identity: Mapping[str, Any] | None = None,
    promoted: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """``summary.json`` from the facts and the gate's decision, which brings its own waivers,
    baseline and SLO rows; judges nothing."""
    from pytest_qualify.stats import stats_section

    waivers, baseline, slo, claims = verdict.waivers, verdict.baseline, verdict.slo, verdict.claims
    judged = {r.nodeid: r.waiver for r in verdict.items if r.waiver}
    # An item the gate did not judge carries why (``not_judged``), which every writer shows as is.
    unjudged = dict(verdict.not_judged)
    items = [{**i, "waiver": judged.get(i["nodeid"], i["waiver"]),
              **({"not_judged": unjudged[i["nodeid"]]} if i["nodeid"] in unjudged else {})} for i in facts["items"]]
    titles = {row.module: row.title for row in verdict.rows}
    # The promotion stage this run was (stages.py), the served identity at both ends, and the
    # promoted run a post-promotion check was held to: present only when the plugin hands them in.
    extra = {k: dict(v) for k, v in (("stage", stage), ("identity", identity), ("promoted", promoted)) if v is not None}
    extra.update({k: dict(facts[k]) for k in ("protocol", "provenance", "serving_facts", "faults")
                  if facts.get(k) is not None})
    if "stage" in extra and "protocol" in extra:
        extra["stage"] = _scoped_stage(extra["stage"], extra["protocol"])
    return {
        "schema": SCHEMA_ID,
        "schema_version": SCHEMA_VERSION,
        "run": dict(facts["run"]),
        "simulated": facts["simulated"],
        "target": dict(facts["target"]),
        "profile": facts["profile"],
        "verdict": verdict_section(verdict),
        "gate": gate_section(verdict),
        "timing": facts["timing"],
        "server_metrics": facts["server_metrics"],
        "waivers": dict(waivers) if waivers is not None else None,
        "baseline": dict(baseline) if baseline is not None else None,
        "artifacts": dict(artifacts),
        "stats": stats_section(items, titles),
        "slo": [row.as_dict() for row in slo],
        "claims": [row.as_dict() for row in claims],
        "checks": checks_section(verdict, [*slo, *claims]),
        "items": items,
        **extra,
    }


def stage_section(stage: Any, verdict: Any) -> dict[str, Any]:
    return {**stage.as_dict(), "verdict_line": verdict.headline}


def identity_section(start: Any, end: Any, changed: str | None, declared: Sequence[Any] = ()) -> dict[str, Any]:
    return {"start": start.as_dict() if start is not None else None,
            "end": end.as_dict() if end is not None else None,
            "changed": changed,
            "declared": [d.as_dict() for d in declared]}


def stage_fields(stage_run: StageRun, verdict: GateVerdict) -> dict[str, Any]:
    """``stage``, ``identity`` and ``promoted`` for ``summary.json`` (additive sections)."""
    fields: dict[str, Any] = {
        "stage": stage_section(stage_run.stage, verdict),
        "identity": identity_section(stage_run.start, stage_run.end, stage_run.changed, stage_run.declared),
    }
    if stage_run.promoted is not None:
        fields["promoted"] = {**stage_run.promoted.as_dict(), "mismatches": list(stage_run.promoted_mismatches)}
    return fields
