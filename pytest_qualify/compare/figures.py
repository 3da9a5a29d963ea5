"""The figures one boot's ``summary.json`` holds, each under a stable id an ``[ab]`` table can name.

- ``lane.<lane>.ttft_s`` / ``lane.<lane>.e2e_s`` / ``lane.<lane>.prefill_tok_s``: the context
  lane's median over the boot's repetitions;
- ``load.c<N>.<figure>``: the load module's decode probes at concurrency N (TTFT, TPOT and ITL p50,
  output and request throughput, goodput), the boot's worst repetition as the summary keeps it;
- ``facts.<name>``: every number the serving facts hold (KV-cache tokens, concurrency at the
  window, model memory, start-up), when the bundle has them;
- any other ``timing.*`` section with per-level rows (a TTFT sweep, a decode probe) the same way.

Which way is better is part of the figure: a time is better lower, a rate or a capacity higher.
No pytest here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

LANE_FIGURES = {"ttft_s": ("TTFT", "s", "lower"), "e2e_s": ("end to end", "s", "lower"),
                "prefill_tok_s": ("prefill", "tok/s", "higher")}
LOAD_FIGURES = {"ttft_s_p50": ("TTFT p50", "s", "lower"), "tpot_s_p50": ("TPOT p50", "s", "lower"),
                "itl_s_p50": ("ITL p50", "s", "lower"), "output_tok_s": ("output throughput", "tok/s", "higher"),
                "requests_per_s": ("request throughput", "req/s", "higher"), "goodput": ("goodput", "", "higher")}
# Serving facts: higher is better for capacities, lower for memory and times.
LOWER_FACTS = ("_s", "_gib", "_bytes", "memory", "time", "seconds")


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
    facts = summary.get("serving_facts") or (summary.get("extra") or {}).get("serving_facts") or {}
    for fid, title, value in _numbers(facts, "facts"):
        better = "lower" if any(word in fid for word in LOWER_FACTS) else "higher"
        out[fid] = Figure(fid, title, "", better, value)
    return out


def _numbers(section: Any, prefix: str) -> list[tuple[str, str, float]]:
    """(id, title, value) of every number in a nested section; a fact given as ``{"value": x, "source": ...}``
    is its value."""
    out: list[tuple[str, str, float]] = []
    if isinstance(section, Mapping):
        if isinstance(section.get("value"), (int, float)) and not isinstance(section.get("value"), bool):
            return [(prefix, prefix.split(".", 1)[-1].replace("_", " "), float(section["value"]))]
        for key, value in section.items():
            out += _numbers(value, f"{prefix}.{key}")
    elif isinstance(section, (int, float)) and not isinstance(section, bool):
        out.append((prefix, prefix.split(".", 1)[-1].replace("_", " "), float(section)))
    return out
