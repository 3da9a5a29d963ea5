"""The figures one boot's ``summary.json`` holds, each under a stable id an ``[ab]`` table can name.

- ``lane.<lane>.ttft_s`` / ``.e2e_s`` / ``.prefill_tok_s`` / ``.decode_tok_s``: the context
  lane's median over the boot's repetitions (decode: the answer's tokens after the first over their time);
- ``load.c<N>.<figure>``: the load module's decode probes at concurrency N (TTFT, TPOT, ITL p50 per
  chunk and per token, output and request throughput, goodput), the boot's worst repetition as the
  summary keeps it;
- ``sweep.p<N>.ttft_s`` / ``.prefill_tok_s`` and ``sweep.decode.p<N>.decode_tok_s``: the sweep
  module's TTFT at exact prompt sizes and its single-stream decode probe, when the boot ran it;
- ``facts.<name>``: every number the serving facts hold (KV-cache tokens and GiB, concurrency at
  the window, model memory, weight load, compile, start-up), when the bundle has them.

Which way is better is part of the figure: a time is better lower, a rate or a capacity higher.
No pytest here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

LANE_FIGURES = {"ttft_s": ("TTFT", "s", "lower"), "e2e_s": ("end to end", "s", "lower"),
                "prefill_tok_s": ("prefill", "tok/s", "higher"), "decode_tok_s": ("decode", "tok/s", "higher")}
LOAD_FIGURES = {"ttft_s_p50": ("TTFT p50", "s", "lower"), "tpot_s_p50": ("TPOT p50", "s", "lower"),
                "itl_s_p50": ("ITL p50 (per chunk)", "s", "lower"),
                # Per token: a chunk's gap over the tokens it brought, so an engine that packs several
                # tokens per chunk compares with one that streams them one by one (issue of ITL per chunk).
                "itl_token_s_p50": ("ITL p50 (per token)", "s", "lower"),
                "output_tok_s": ("output throughput", "tok/s", "higher"),
                "requests_per_s": ("request throughput", "req/s", "higher"), "goodput": ("goodput", "", "higher")}
# Serving facts (summary.json ``serving_facts.facts``): a capacity is better higher (KV-cache tokens
# and GiB, concurrency at the window), the model's own memory and every time lower; the block size is
# a setting, not a figure.
LOWER_FACTS = ("model_memory_gib",)
SKIPPED_FACTS = ("block_size_tokens",)


@dataclass(frozen=True)
class Figure:
    id: str
    title: str
    unit: str
    better: str  # "higher" | "lower"
    value: float


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
                out[fid] = Figure(fid, f"{title}, {lane['lane']} lane", unit, better, value)
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
        for key, title, unit, better in (("ttft_s", "TTFT", "s", "lower"), ("prefill_tok_s", "prefill", "tok/s", "higher")):
            if isinstance(point.get(key), (int, float)):
                fid = f"sweep.p{n}.{key}"
                out[fid] = Figure(fid, f"{title} at {n:,} prompt tokens (sweep)", unit, better, float(point[key]))
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
