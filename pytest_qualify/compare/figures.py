"""The figures one boot's ``summary.json`` holds, each under a stable id an ``[ab]`` table can name.

- ``lane.<lane>.ttft_s`` / ``.e2e_s`` / ``.prefill_tok_s``: the context lane's median over the
  boot's repetitions. A lane gives no decode figure: its answer is a short needle value, a few tokens
  that may arrive in one chunk with the finish (with a tool parser on, vLLM holds whitespace-only
  content to the end), so its "decode" would time the stream's chunking (27-51% boot to boot on one
  H100). :func:`not_measurable` says so for ``lane.<lane>.decode_tok_s``;
- ``load.c<N>.<figure>``: the load module's decode probes at concurrency N (TTFT, TPOT, ITL p50 per
  chunk and per token, output and request throughput, goodput), the boot's worst repetition as the
  summary keeps it; a probe whose stream came whole in one chunk is in none of them, so a level where
  every probe came whole has no TTFT, TPOT or ITL, and :func:`not_measurable` says why. Beside them
  ``load.c<N>.engine_tpot_s_mean``: the engine's own mean time per output token over the level, from
  the ``/metrics`` histograms read around it (where the server reports one), which no chunking of the
  stream can change;
- ``sweep.p<N>.ttft_s`` / ``.prefill_tok_s`` and ``sweep.decode.p<N>.decode_tok_s``: the sweep
  module's TTFT at exact prompt sizes and its single-stream decode probe, when the boot ran it;
  ``sweep.p<N>.engine_ttft_s``: the engine's own mean TTFT over those samples (``/metrics``), a
  prefill figure where every stream comes whole (with a tool parser on, on the H100);
- ``facts.<name>``: every number the serving facts hold (KV-cache tokens and GiB, concurrency at
  the window, model memory, weight load, compile, start-up), when the bundle has them.

Which way is better is part of the figure: a time is better lower, a rate or a capacity higher.
A TTFT (and the prefill rate taken from it) carries where the boot took it (``Figure.source``, the
summary's ``ttft_sources``): the client's first chunk, or the engine's own ``/metrics`` TTFT where the
stream came whole with its finish. Two sources are two measurements under one id; the comparison
does not set them against each other (:func:`comparison.compare_arms`). No pytest here.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_qualify.evidence.metrics import TimingSource

LANE_FIGURES = {"ttft_s": ("TTFT", "s", "lower"), "e2e_s": ("end to end", "s", "lower"),
                "prefill_tok_s": ("prefill", "tok/s", "higher")}
LANE_NO_DECODE = ("a lane's answer is a short needle value, not a decode of a known length (it may arrive in one "
                  "chunk with its finish): no decode figure; single-stream decode is load.c1.tpot_s_p50 (the decode "
                  "probe) or sweep.decode.p<N>.decode_tok_s")
LOAD_FIGURES = {"ttft_s_p50": ("TTFT p50", "s", "lower"), "tpot_s_p50": ("TPOT p50", "s", "lower"),
                "itl_s_p50": ("ITL p50 (per chunk)", "s", "lower"),
                # Per token: a chunk's gap over the tokens it brought, so an engine that packs several
                # tokens per chunk compares with one that streams them one by one (issue of ITL per chunk).
                "itl_token_s_p50": ("ITL p50 (per token)", "s", "lower"),
                "output_tok_s": ("output throughput", "tok/s", "higher"),
                "requests_per_s": ("request throughput", "req/s", "higher"), "goodput": ("goodput", "", "higher"),
                # The engine's own per-token time (/metrics), beside the client's TPOT.
                "engine_tpot_s_mean": ("TPOT mean (engine, /metrics)", "s", "lower")}
# The load figures taken from the probes' streams: none where every probe came whole.
STREAM_FIGURES = ("ttft_s_p50", "tpot_s_p50", "itl_s_p50", "itl_token_s_p50")
# Serving facts (summary.json ``serving_facts.facts``): a capacity is better higher (KV-cache tokens
# and GiB, concurrency at the window), the model's own memory and every time lower; the block size is
# a setting, not a figure.
LOWER_FACTS = ("model_memory_gib",)
SKIPPED_FACTS = ("block_size_tokens",)


# The figures a summary names the source of (its ``ttft_sources``): a TTFT and the prefill rate
# taken from it (``evidence.metrics.lane_timing`` replaces both where the engine's TTFT stands in).
SOURCED_FIGURES = ("ttft_s", "prefill_tok_s")


@dataclass(frozen=True)
class Figure:
    id: str
    title: str
    unit: str
    better: str  # "higher" | "lower"
    value: float
    source: str | None = None  # where the boot took it, where the summary names it (a TTFT's ttft_sources)


def figure_source(taken: Mapping[str, Any]) -> str | None:
    """One boot's source of a lane's or a sweep point's TTFT, from the summary's ``ttft_sources``
    (each repetition with its source): the one source, or where the repetitions took theirs from
    different sources the sources joined with `` + `` whatever the repetitions: the median mixed
    them. None where the summary names none. A summary of an earlier release holds only the text
    (:func:`earlier_figure_source`)."""
    if "ttft_sources" not in taken:
        return earlier_figure_source(taken.get("ttft_source"))
    found = {str(r["source"]) for r in taken["ttft_sources"] or () if isinstance(r, Mapping) and r.get("source")}
    return " + ".join(sorted(found)) or None


# Longest first: "client chunks, held" is read whole, not as "client chunks" and a remainder.
_SOURCE_NAMES = re.compile("|".join(re.escape(str(s)) for s in sorted(TimingSource, key=lambda s: -len(s))))


def earlier_figure_source(rendered: Any) -> str | None:
    """Reads bundles of earlier releases, whose summary names a TTFT's source only in the rendered
    ``ttft_source`` text (``client chunks (repetition 1), engine /metrics (repetition 2)``), with no
    ``ttft_sources`` beside it: the sources the text names, joined as :func:`figure_source` joins
    them; the text itself where it names none of them; None where it is empty or absent."""
    if not isinstance(rendered, str) or not rendered.strip():
        return None
    found = sorted(set(_SOURCE_NAMES.findall(rendered)))
    return " + ".join(found) if found else rendered.strip()


def _median(spread: Any) -> float | None:
    if isinstance(spread, Mapping) and isinstance(spread.get("median"), (int, float)):
        return float(spread["median"])
    return None


def figures_of(summary: Mapping[str, Any]) -> dict[str, Figure]:
    """Every figure of one boot, by id."""
    out: dict[str, Figure] = {}
    timing = summary.get("timing") or {}
    for lane in timing.get("lanes") or ():
        for key, (title, unit, better) in LANE_FIGURES.items():
            value = _median(lane.get(key))
            if value is not None:
                fid = f"lane.{lane['lane']}.{key}"
                source = figure_source(lane) if key in SOURCED_FIGURES else None
                out[fid] = Figure(fid, f"{title}, {lane['lane']} lane", unit, better, value, source)
    load = timing.get("load") or {}
    for level in load.get("levels") or ():
        c = level.get("concurrency")
        for key, (title, unit, better) in LOAD_FIGURES.items():
            value = level.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                fid = f"load.c{c}.{key}"
                out[fid] = Figure(fid, f"{title} at concurrency {c}", unit, better, float(value))
    sweep = timing.get("sweep") or {}
    for point in sweep.get("points") or ():
        n = point.get("prompt_tokens")
        # A summary that names no source took a point's TTFT from its samples' first chunks: before the
        # engine's stood in, a point whose every sample came whole had no TTFT.
        source = figure_source(point) or str(TimingSource.CLIENT)
        for key, title, unit, better in (("ttft_s", "TTFT", "s", "lower"), ("prefill_tok_s", "prefill", "tok/s", "higher"),
                                         ("engine_ttft_s", "TTFT (engine, /metrics)", "s", "lower")):
            if isinstance(point.get(key), (int, float)):
                fid = f"sweep.p{n}.{key}"
                out[fid] = Figure(fid, f"{title} at {n:,} prompt tokens (sweep)", unit, better, float(point[key]),
                                  source if key in SOURCED_FIGURES else None)
    for probe in sweep.get("decode") or ():
        n = probe.get("prompt_tokens")
        if isinstance(probe.get("decode_tok_s"), (int, float)):
            fid = f"sweep.decode.p{n}.decode_tok_s"
            out[fid] = Figure(fid, f"single-stream decode after {n:,} prompt tokens", "tok/s", "higher",
                              float(probe["decode_tok_s"]))
    facts = (summary.get("serving_facts") or {}).get("facts") or {}
    for name, fact in facts.items():
        if name in SKIPPED_FACTS or not isinstance(fact, Mapping):
            continue
        value = fact.get("value")
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            better = "lower" if name in LOWER_FACTS or name.endswith("_s") else "higher"
            fid = f"facts.{name}"
            out[fid] = Figure(fid, str(fact.get("label") or name), str(fact.get("unit") or ""), better, float(value))
    return out


def not_measurable(summary: Mapping[str, Any]) -> dict[str, str]:
    """The figures this boot could not measure, by id, each with the reason: what a reader is told
    in place of a number (a stream that came whole is no decode measure)."""
    out: dict[str, str] = {}
    timing = summary.get("timing") or {}
    for lane in timing.get("lanes") or ():
        out[f"lane.{lane['lane']}.decode_tok_s"] = f"not measurable here: {LANE_NO_DECODE}"
    load = timing.get("load") or {}
    for level in load.get("levels") or ():
        c, whole = level.get("concurrency"), int(level.get("probes_whole") or 0)
        timed = int(level.get("probes") or 0)
        if whole <= 0:
            continue
        for key in STREAM_FIGURES:
            if not isinstance(level.get(key), (int, float)):
                out[f"load.c{c}.{key}"] = (f"not measurable here: every decode probe at concurrency {c} ({whole} in "
                                           "all) came whole in one chunk with its finish, so its stream times no "
                                           "decode" + (f" ({timed} timed)" if timed else ""))
    sweep = timing.get("sweep") or {}
    for point in sweep.get("points") or ():
        if not isinstance(point.get("ttft_s"), (int, float)):
            n = point.get("prompt_tokens")
            for key in ("ttft_s", "prefill_tok_s"):
                out[f"sweep.p{n}.{key}"] = (f"not measurable here: no sample at {n:,} prompt tokens streamed as "
                                            "decoded (each came whole in one chunk: its first chunk is its end)")
    for probe in sweep.get("decode") or ():
        if not isinstance(probe.get("decode_tok_s"), (int, float)):
            n = probe.get("prompt_tokens")
            out[f"sweep.decode.p{n}.decode_tok_s"] = (f"not measurable here: no decode probe sample after {n:,} prompt "
                                                      "tokens streamed as decoded (each came whole in one chunk)")
    return out


def timing_figures(profile: Any, stage_name: str = "timing") -> dict[str, str]:
    """The figure ids a run of ``profile`` at ``stage_name`` will produce, each with where it comes
    from: what ``ab`` holds the gating figures to before any server starts. A serving fact and the
    engine's own TPOT are listed too, though only the server decides whether it shows them."""
    stage = profile.stage(stage_name)
    modules = set(stage.modules)
    out: dict[str, str] = {}
    if "context" in modules:
        for lane in stage.lanes:
            for key in LANE_FIGURES:
                out[f"lane.{lane}.{key}"] = f"the context module's {lane} lane"
    rules = getattr(profile, "load", None)
    if "load" in modules and rules is not None:
        for c in rules.levels:
            for key in LOAD_FIGURES:
                if key == "goodput" and rules.goodput_ttft_s_max is None and rules.goodput_tpot_s_max is None:
                    continue  # no limit, no goodput
                out[f"load.c{c}.{key}"] = f"the load module at concurrency {c}"
    sweep = getattr(profile, "sweep", None)
    if "sweep" in modules and sweep is not None:
        for n in sweep.prompt_tokens:
            for key in ("ttft_s", "prefill_tok_s", "engine_ttft_s"):
                out[f"sweep.p{n}.{key}"] = f"the sweep at {n:,} prompt tokens"
        for n in sweep.decode_prompt_tokens:
            out[f"sweep.decode.p{n}.decode_tok_s"] = f"the sweep's decode probe after {n:,} prompt tokens"
    from pytest_qualify.server.facts import FACT_KEYS

    for name in FACT_KEYS:
        if name not in SKIPPED_FACTS:
            out[f"facts.{name}"] = "the serving facts (where the engine shows them)"
    return out


def unproducible_gates(patterns: Sequence[str], profile: Any, stage_name: str = "timing") -> list[str]:
    """Each gating figure (an id or a glob) that names no figure the profile's ``stage_name`` run
    will produce, with why: a gate that cannot engage would only be found after every boot."""
    produced = timing_figures(profile, stage_name)
    bad = []
    for pattern in patterns:
        if fnmatch.filter(produced, pattern):
            continue
        why = ""
        if pattern.startswith("lane.") and pattern.endswith("decode_tok_s"):
            why = f" ({LANE_NO_DECODE})"
        elif pattern.startswith("load.") and "load" not in profile.stage(stage_name).modules:
            why = " (the load module is not in its timing stage: add it to modules.required and a [load] table)"
        elif pattern.startswith("sweep.") and "sweep" not in profile.stage(stage_name).modules:
            why = " (the sweep module is not in its timing stage: add it to modules.required and a [sweep] table)"
        bad.append(f"gating figure {pattern!r} is no figure the {stage_name} stage of profile {profile.name} "
                   f"produces{why}")
    return bad
