"""One comparison of arm A (the incumbent, or recipe A) with arm B (the candidate, or recipe B):
every figure with its separability call, the gate rows item by item, the identities side by side,
and the exit status. Pure over the boots read; the writers render what it returns. No pytest here.

Exit: 0 when B is separably worse on no gating figure and has no item regression; 1 when it is, or
has; 2 when an arm has fewer boots than asked (or than two) or a boot did not finish; usage
errors (4) are raised before, by :mod:`boots`.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Mapping, Sequence
from typing import Any

from pytest_qualify.compare.boots import ArmBoots, CompareUsageError
from pytest_qualify.compare.figures import figures_of
from pytest_qualify.compare.separability import METHOD, compare_figures

COMPARISON_SCHEMA_ID = "pytest-qualify/comparison"
COMPARISON_SCHEMA_VERSION = 1
MIN_BOOTS = 2


def gating_set(names: Sequence[str], patterns: Sequence[str]) -> set[str] | None:
    """The figures the operator gates (ids or globs); None: every figure gates. A pattern that
    names no figure is a usage error: a gate that cannot engage must not read as passed."""
    if not patterns:
        return None
    chosen: set[str] = set()
    for pattern in patterns:
        hit = fnmatch.filter(names, pattern)
        if not hit:
            raise CompareUsageError(f"gating figure {pattern!r} names no figure these bundles hold "
                                    f"(they hold: {', '.join(sorted(names)[:12])}{' …' if len(names) > 12 else ''})")
        chosen.update(hit)
    return chosen


def _failed_items(arm: ArmBoots) -> dict[str, int]:
    """item (module::item, repetitions folded) → boots in which it failed (unwaived)."""
    out: dict[str, int] = {}
    for boot in arm.finished:
        failed = {f"{i['module']}::{i['item']}" for i in boot.summary.get("items", ())
                  if i.get("outcome") == "failed" and not i.get("waiver")}
        for key in failed:
            out[key] = out.get(key, 0) + 1
    return out


def item_rows(a: ArmBoots, b: ArmBoots, reference: ArmBoots | None) -> list[dict[str, Any]]:
    """Every item failed in some boot, attributed: failed in both arms (shared: not the candidate's
    regression), only in B (regression), only in A (fixed); with a reference deployment, a B
    failure it also shows is "shared with the reference deployment", never B's own."""
    fa, fb = _failed_items(a), _failed_items(b)
    fr = _failed_items(reference) if reference is not None else {}
    rows = []
    for item in sorted(set(fa) | set(fb)):
        in_a, in_b, in_r = fa.get(item, 0), fb.get(item, 0), fr.get(item, 0)
        if in_b and in_r:
            kind = "shared with the reference deployment"
        elif in_a and in_b:
            kind = "shared"
        elif in_b:
            kind = "regression"
        else:
            kind = "fixed"
        module, _, name = item.partition("::")
        rows.append({"item": item, "module": module, "name": name, "failed_boots_a": in_a,
                     "failed_boots_b": in_b, "failed_boots_reference": in_r if reference is not None else None,
                     "boots_a": len(a.finished), "boots_b": len(b.finished), "kind": kind})
    return rows


def compare_arms(a: ArmBoots, b: ArmBoots, *, reference: ArmBoots | None = None, workload: Mapping[str, Any],
                 tolerance_pct: float = 5.0, noise_floor: Mapping[str, float] | None = None,
                 gate_patterns: Sequence[str] = (), boots_asked: int | None = None,
                 spread: str = "boot-to-boot") -> dict[str, Any]:
    """``comparison.json``'s content. ``noise_floor``: per-figure tolerances (an A/A campaign's
    file) that replace ``tolerance_pct`` where they name the figure; ``spread``: what one sample is
    ("boot-to-boot", or "run-to-run" when the arms were attached endpoints)."""
    incomplete: list[str] = []
    for arm in (a, b) + ((reference,) if reference else ()):
        for boot in arm.boots:
            if not boot.finished:
                incomplete.append(f"arm {arm.name}: boot {boot.path.name} did not finish (verdict {boot.verdict}"
                                  + (", the server died" if (boot.summary.get("target") or {}).get("died") else "")
                                  + ")")
        need = max(MIN_BOOTS, boots_asked or 0)
        if arm.name != "reference" and len(arm.finished) < need:
            incomplete.append(f"arm {arm.name}: {len(arm.finished)} finished boot(s), {need} needed"
                              + ("" if boots_asked else " (one boot has no boot-to-boot spread)"))
    per_boot_a = [figures_of(boot.summary) for boot in a.finished]
    per_boot_b = [figures_of(boot.summary) for boot in b.finished]
    names = [n for n in (per_boot_a[0] if per_boot_a else {})
             if all(n in f for f in per_boot_a + per_boot_b)]
    # A figure some boot lacks (a module that did not reach it) is not compared, and said so.
    left_out = sorted({n for f in per_boot_a + per_boot_b for n in f} - set(names))
    gating = gating_set(names, gate_patterns)
    arms = {n: ([f[n].value for f in per_boot_a], [f[n].value for f in per_boot_b], per_boot_a[0][n].better)
            for n in names}
    tolerances = {n: float((noise_floor or {}).get(n, tolerance_pct)) for n in names}
    tests = compare_figures(arms, tolerance_pct=tolerances, gating=gating) if names else []
    figures = []
    for t in tests:
        meta = per_boot_a[0][t.figure]
        figures.append({"id": t.figure, "title": meta.title, "unit": meta.unit,
                        "tolerance_source": "noise floor" if noise_floor and t.figure in noise_floor else "tolerance",
                        **t.as_dict()})
    items = item_rows(a, b, reference)
    worse = [f["id"] for f in figures if f["gating"] and f["call"] == "B worse"]
    regressions = [r["item"] for r in items if r["kind"] == "regression"]
    if incomplete:
        result, exit_code = "INCOMPLETE", 2
    elif worse or regressions:
        result, exit_code = "B WORSE", 1
    else:
        result, exit_code = "B NOT WORSE", 0
    not_separable = [f["id"] for f in figures if f["call"] == "not separable"]
    return {
        "schema": COMPARISON_SCHEMA_ID,
        "schema_version": COMPARISON_SCHEMA_VERSION,
        "method": METHOD,
        "spread": spread,
        "result": result,
        "exit_code": exit_code,
        "reasons": incomplete + [f"B separably worse on gating figure {f}" for f in worse]
                   + [f"item regression: {i} failed only in B" for i in regressions],
        "workload": dict(workload),
        "tolerance_pct": tolerance_pct,
        "noise_floor": dict(noise_floor) if noise_floor else None,
        "gating": sorted(gating) if gating is not None else "every figure",
        "arms": {arm.name: {"identity": arm.boots[0].identity if arm.boots else None,
                            "host_kinds": sorted({bt.host_kind for bt in arm.boots}),
                            "boots": [{"path": str(bt.path), "run_id": bt.run_id, "verdict": bt.verdict,
                                       "finished": bt.finished, "host_kind": bt.host_kind} for bt in arm.boots]}
                 for arm in (a, b) + ((reference,) if reference else ())},
        "figures": figures,
        "figures_left_out": left_out,
        "items": items,
        "summary": {"figures": len(figures), "b_better": sum(f["call"] == "B better" for f in figures),
                    "b_worse": sum(f["call"] == "B worse" for f in figures),
                    "equivalent": sum(f["call"].startswith("equivalent") for f in figures),
                    "not_separable": len(not_separable),
                    "regressions": len(regressions), "fixed": sum(r["kind"] == "fixed" for r in items),
                    "shared": sum(r["kind"].startswith("shared") for r in items)},
        "not_separable_note": (f"{len(not_separable)} figure(s) not separable: their intervals hold no difference "
                               "and are wider than the tolerance; too few boots to tell, not a proof of sameness "
                               "(each row states the smallest difference these boots separate and the boots "
                               "that would separate the tolerance)") if not_separable else "",
    }


def last_line(comparison: Mapping[str, Any], out_dir: str) -> str:
    s = comparison["summary"]
    return (f"COMPARISON: {comparison['result']} (exit {comparison['exit_code']}) · {s['figures']} figures: "
            f"{s['b_worse']} B worse, {s['b_better']} B better, {s['equivalent']} equivalent, "
            f"{s['not_separable']} not separable · items: {s['regressions']} regression(s), {s['fixed']} fixed, "
            f"{s['shared']} shared · {comparison['spread']} spread · {out_dir}")


def fmt(value: float | None, unit: str = "") -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    if unit == "s":
        return f"{value * 1000:,.1f} ms" if abs(value) < 1 else f"{value:,.3f} s"
    return f"{value:,.3f}" if abs(value) < 100 else f"{value:,.1f}"
