"""The statistics, in one room on the ground floor: percentiles and spreads of timing figures
(``percentile``, ``spread``: what the client's timing, the SLO rows and the summary report), and
how much evidence stands behind a verdict: attempts passed / attempts per module and overall,
with a 95% Wilson score interval for the per-attempt pass probability; and, against a baseline,
the items that flipped. Informational: the gate stays pass^k. No pytest here.

An attempt is one repetition of one protocol item (one test case). 90/90 attempts passed says the
per-attempt pass probability is at least 95.9% at 95% confidence, not that it is 100%; the interval
shows how much more a promotion would learn from more repetitions.

The Wilson interval is written out here (five lines) rather than taken from scipy or statsmodels,
which would be a heavy dependency for one formula; tests check it against published values.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_qualify.properties import Outcome

CONFIDENCE = 0.95
Z_95 = 1.959963984540054  # the standard normal quantile for a two-sided 95% interval


@dataclass(frozen=True)
class Interval:
    low: float
    high: float


def wilson(passed: int, attempts: int, z: float = Z_95) -> Interval | None:
    """Wilson's score interval for a binomial proportion (Wilson 1927; Newcombe 1998, method 3).
    None for no attempts: there is no evidence to bound."""
    if attempts <= 0:
        return None
    if not 0 <= passed <= attempts:
        raise ValueError(f"passed must be within 0..attempts, got {passed}/{attempts}")
    p = passed / attempts
    z2 = z * z
    denom = 1 + z2 / attempts
    center = (p + z2 / (2 * attempts)) / denom
    half = z / denom * math.sqrt(p * (1 - p) / attempts + z2 / (4 * attempts * attempts))
    # Clamp float noise: at p = 0 or 1 the bound is exactly 0 or 1.
    return Interval(max(0.0, center - half) if passed else 0.0, min(1.0, center + half) if passed < attempts else 1.0)


def _entry(passed: int, attempts: int) -> dict[str, Any]:
    ci = wilson(passed, attempts)
    return {"attempts": attempts, "passed": passed,
            "pass_rate": passed / attempts if attempts else None,
            "wilson_low": ci.low if ci else None, "wilson_high": ci.high if ci else None}


def stats_section(items: Sequence[Mapping[str, Any]], titles: Mapping[str, str]) -> dict[str, Any]:
    """Per module (in the gate's order, ``titles``) and overall. A waived or skipped attempt is not
    a passed one: the interval is about the deployment, not about the gate's leniency."""
    counts: dict[str, list[int]] = {}
    for item in items:
        c = counts.setdefault(item["module"], [0, 0])
        c[1] += 1
        c[0] += item["outcome"] == Outcome.PASSED
    order = [m for m in titles if m in counts] + sorted(m for m in counts if m not in titles)
    modules = [{"module": m, "title": titles.get(m, m), **_entry(*counts[m])} for m in order]
    total = [sum(c[0] for c in counts.values()), sum(c[1] for c in counts.values())]
    return {"confidence": CONFIDENCE, "method": "wilson", "overall": _entry(*total), "modules": modules}


def percent(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def interval_text(entry: Mapping[str, Any]) -> str:
    if entry["wilson_low"] is None:
        return "-"
    return f"{percent(entry['wilson_low'])} – {percent(entry['wilson_high'])}"


def headline(section: Mapping[str, Any]) -> str:
    """One line for the terminal and the job summary."""
    o = section["overall"]
    if not o["attempts"]:
        return "evidence: no protocol attempt ran"
    return (f"evidence: {o['passed']}/{o['attempts']} attempts passed; per-attempt pass probability "
            f"{interval_text(o)} (95% Wilson interval; informational, the gate is pass^k)")


def _per_item(items: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], list[int]]:
    out: dict[tuple[str, str], list[int]] = {}
    for item in items:
        c = out.setdefault((item["module"], item["item"]), [0, 0])
        c[1] += 1
        c[0] += item["outcome"] == Outcome.PASSED
    return out


def flips(current: Sequence[Mapping[str, Any]], baseline: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Items (all repetitions together) that passed in the baseline and fail now, or the other way
    round. An item is passed when every one of its attempts passed. Items in only one run are not
    flips (the baseline's notes say when the runs differ)."""
    now, before = _per_item(current), _per_item(baseline)
    out = []
    for key in [k for k in before if k in now]:
        b, c = before[key], now[key]
        b_ok, c_ok = b[0] == b[1], c[0] == c[1]
        if b_ok != c_ok:
            out.append({"module": key[0], "item": key[1], "baseline": f"{b[0]}/{b[1]}", "current": f"{c[0]}/{c[1]}",
                        "change": "newly failing" if b_ok else "newly passing"})
    out.sort(key=lambda f: (f["change"] != "newly failing", f["module"], f["item"]))
    return out


# -- timing figures: percentiles and spreads -------------------------------------------------------


def percentile(values: Iterable[float], q: float) -> float:
    """The q-th percentile with linear interpolation between closest ranks (numpy's default,
    which ``vllm bench`` reports), so figures compare with vLLM's own benchmark output."""
    data = sorted(values)
    if not data:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile q must be within 0..100, got {q}")
    pos = (len(data) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(data) - 1)
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)


@dataclass(frozen=True)
class Spread:
    """Median with min and max: how a lane's figure is reported over its repetitions."""

    median: float
    min: float
    max: float
    n: int

    def as_dict(self) -> dict[str, float | int]:
        return {"median": self.median, "min": self.min, "max": self.max, "n": self.n}


def spread(values: Sequence[float]) -> Spread | None:
    data = [v for v in values if v is not None]
    if not data:
        return None
    return Spread(statistics.median(data), min(data), max(data), len(data))
