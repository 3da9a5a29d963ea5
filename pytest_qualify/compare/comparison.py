"""One comparison of arm A (the incumbent, or recipe A) with arm B (the candidate, or recipe B):
every figure with its call, the gate rows item by item, the identities side by side, and the
decision as an exit status. Pure over the boots read; the writers render what it returns. No pytest here.

The decision has three answers, and "can't tell" is never "not worse":

- ``B WORSE`` (exit 1): B is separably worse on a gating figure, or an item failed only in B;
- ``B NOT WORSE`` (exit 0): every gating figure is shown not worse (better, equivalent within ±T, or
  the non-inferiority test puts B's degradation inside T) and no item regressed;
- ``UNDECIDED`` (exit 2): anything else, each undecided gating figure with the boots per arm that
  would decide it, and each gating figure not compared because its boots took it from different
  sources (a TTFT from the client's chunks in some, from the engine's ``/metrics`` in others: no
  number of boots decides that); ``INCOMPLETE`` (exit 2 too) when an arm has fewer finished boots
  than asked (or than two) or a boot did not finish.

A figure not compared is in ``figures_left_out``, its reason in ``figures_left_out_reasons``: a
boot lacks it, or the boots took it from different sources.

Usage errors (4) are raised before, by :mod:`boots`.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Mapping, Sequence
from typing import Any

from pytest_qualify.compare.boots import ArmBoots, Boot, CompareUsageError
from pytest_qualify.compare.figures import Figure, figures_of
from pytest_qualify.compare.separability import METHOD, NoiseRow, compare_figures

COMPARISON_SCHEMA_ID = "pytest-qualify/comparison"
COMPARISON_SCHEMA_VERSION = 2
MIN_BOOTS = 2
EXIT = {"B NOT WORSE": 0, "B WORSE": 1, "UNDECIDED": 2, "INCOMPLETE": 2}


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


def left_out_reasons(per_boot: Sequence[tuple[str, Boot, Mapping[str, Figure]]], compared: Sequence[str],
                     arms: Sequence[str] = ("A", "B")) -> dict[str, str]:
    """Every figure some boot holds that is not compared, with why: an arm with no finished boot, the
    boots that lack it, or, for a figure every boot holds, the source each boot took it from where
    they differ (``per_boot``: arm name, boot, its figures; ``arms``: the arms compared)."""
    empty = [arm for arm in arms if not any(name == arm for name, _, _ in per_boot)]
    out: dict[str, str] = {}
    for name in sorted({n for _, _, f in per_boot for n in f} - set(compared)):
        missing = [f"{arm} {boot.path.name}" for arm, boot, f in per_boot if name not in f]
        by_source: dict[str, list[str]] = {}
        for arm, boot, f in per_boot:
            if name in f:
                by_source.setdefault(f[name].source or "no source named", []).append(f"{arm} {boot.path.name}")
        if empty:
            out[name] = f"not compared: arm {', '.join(empty)} has no finished boot"
        elif missing:
            out[name] = f"not compared: missing from {', '.join(missing)} (a module that did not reach it)"
        else:
            out[name] = ("not compared: its boots measured it from different sources ("
                         + "; ".join(f"{source}: {', '.join(boots)}" for source, boots in by_source.items())
                         + "), two measurements under one id")
    return out


def _boots_text(n: int | None) -> str:
    return f"{n} boots per arm" if n is not None else "more than 1000 boots per arm"


def compare_arms(a: ArmBoots, b: ArmBoots, *, reference: ArmBoots | None = None, workload: Mapping[str, Any],
                 tolerance_pct: float = 5.0, noise_floor: Mapping[str, NoiseRow] | None = None,
                 gate_patterns: Sequence[str] = (), boots_asked: int | None = None,
                 spread: str = "boot-to-boot", pair: bool = False, spend: float = 1.0,
                 warm_up: str = "", sequential: Mapping[str, Any] | None = None,
                 power: bool = True) -> dict[str, Any]:
    """``comparison.json``'s content. ``noise_floor``: a noise floor's rows by figure (one boot's
    variance and its degrees of freedom, pooled with the boots'); ``spread``: what one sample is
    ("boot-to-boot", or "run-to-run" when the arms were attached endpoints); ``pair``: decide on
    adjacent pairs; ``spend``: the look's share of the alpha (``ab --until-decided``);
    ``warm_up``: what the report says of cold boots; ``sequential``: the looks so far."""
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
    if pair and len(a.finished) != len(b.finished):
        incomplete.append(f"paired analysis: arm A has {len(a.finished)} finished boots and arm B "
                          f"{len(b.finished)}: the boots do not pair up")
    per_boot = [(arm.name, boot, figures_of(boot.summary)) for arm in (a, b) for boot in arm.finished]
    per_boot_a = [f for arm, _, f in per_boot if arm == a.name]
    per_boot_b = [f for arm, _, f in per_boot if arm == b.name]
    held = [n for n in (per_boot_a[0] if per_boot_a else {}) if all(n in f for _, _, f in per_boot)]
    # A figure some boot lacks (a module that did not reach it), or one its boots took from different
    # sources (two measurements under one id), is not compared, and said so.
    names = [n for n in held if len({f[n].source for _, _, f in per_boot}) == 1]
    left_out = left_out_reasons(per_boot, names, (a.name, b.name))
    # The gate is read over every figure the boots hold: one they took from different sources gates
    # still, and can never be shown not worse.
    gating = gating_set(held, gate_patterns)
    gates_left_out = [n for n in held if n not in names and (gating is None or n in gating)]
    arms = {n: ([f[n].value for f in per_boot_a], [f[n].value for f in per_boot_b], per_boot_a[0][n].better)
            for n in names}
    tests = compare_figures(arms, tolerance_pct=tolerance_pct, gating=gating, noise=noise_floor, pair=pair,
                            spend=spend, power=power) if names else []
    figures = []
    for t in tests:
        meta = per_boot_a[0][t.figure]
        figures.append({"id": t.figure, "title": meta.title, "unit": meta.unit, "source": meta.source,
                        **t.as_dict()})
    items = item_rows(a, b, reference)
    gates = [f for f in figures if f["gating"]]
    worse = [f["id"] for f in gates if f["decision"] == "worse"]
    undecided = [f for f in gates if f["decision"] == "undecided"]
    regressions = [r["item"] for r in items if r["kind"] == "regression"]
    if incomplete:
        result = "INCOMPLETE"
    elif worse or regressions:
        result = "B WORSE"
    elif undecided or gates_left_out or not gates:
        result = "UNDECIDED"
    else:
        result = "B NOT WORSE"
    reasons = incomplete + [f"B separably worse on gating figure {f}" for f in worse] \
        + [f"item regression: {i} failed only in B" for i in regressions]
    if result == "UNDECIDED":
        reasons += [f"gating figure {f['id']} undecided (B {_signed(f['difference_pct'])}, interval "
                    f"{_range(f['interval_pct'])}, B at worst {_worst(f['degradation_bound_pct'])} against a "
                    f"tolerance of {f['tolerance_pct']:g}%): {_boots_text(f['boots_to_decide'])} would decide it "
                    f"({f['boots_to_decide_basis'] or 'at 80% power'})" for f in undecided]
        reasons += [f"gating figure {n} {left_out[n]}: no number of boots decides it, boots that take it from one "
                    "source would" for n in gates_left_out]
        if not gates and not gates_left_out:
            reasons.append("no figure to decide on: the boots hold no figure in common")
    boots_needed = [f["boots_to_decide"] for f in undecided]
    return {
        "schema": COMPARISON_SCHEMA_ID,
        "schema_version": COMPARISON_SCHEMA_VERSION,
        "method": METHOD + ("; " + sequential["method"] if sequential else ""),
        "spread": spread,
        "result": result,
        "exit_code": EXIT[result],
        "reasons": reasons,
        "decision": {
            "worse": worse, "regressions": regressions,
            "not_worse": [f["id"] for f in gates if f["decision"] == "not worse"],
            "undecided": [{"figure": f["id"], "boots_to_decide": f["boots_to_decide"],
                           "basis": f["boots_to_decide_basis"], "boots_if_equal": f["boots_if_equal"]}
                          for f in undecided],
            # The boots per arm a rerun needs so that every undecided figure would be decided (None:
            # more than 1000, or nothing undecided).
            "boots_per_arm_to_decide": (max(boots_needed) if boots_needed and None not in boots_needed else None),
            # Gating figures not compared (their boots took them from different sources): none is
            # shown not worse, and no boots per arm would decide it.
            "left_out": gates_left_out,
            "analysis": "paired (adjacent boots)" if pair else ("pooled with the noise floor" if noise_floor else "welch"),
        },
        "warm_up": warm_up or "none declared: every bundle named is a sample (each arm's boots are taken as warm)",
        "sequential": dict(sequential) if sequential else None,
        "workload": dict(workload),
        "tolerance_pct": tolerance_pct,
        "noise_floor": {k: {"sd_log": v.sd_log, "df": v.df} for k, v in noise_floor.items()} if noise_floor else None,
        "gating": sorted(gating) if gating is not None else "every figure",
        "arms": {arm.name: {"identity": arm.boots[0].identity if arm.boots else None,
                            "host_kinds": sorted({bt.host_kind for bt in arm.boots}),
                            "boots": [{"path": str(bt.path), "run_id": bt.run_id, "verdict": bt.verdict,
                                       "finished": bt.finished, "host_kind": bt.host_kind} for bt in arm.boots],
                            "warm_up_boots": [{"path": str(bt.path), "run_id": bt.run_id, "verdict": bt.verdict}
                                              for bt in arm.warm_up]}
                 for arm in (a, b) + ((reference,) if reference else ())},
        "figures": figures,
        "figures_left_out": sorted(left_out),
        "figures_left_out_reasons": left_out,
        "items": items,
        "summary": {"figures": len(figures), "b_better": sum(f["call"] == "B better" for f in figures),
                    "b_worse": sum(f["call"] == "B worse" for f in figures),
                    "equivalent": sum(f["call"].startswith("equivalent") for f in figures),
                    "not_worse": sum(f["call"].startswith("not worse") for f in figures),
                    "undecided": sum(f["decision"] == "undecided" for f in figures),
                    "gating_undecided": len(undecided), "gating_left_out": len(gates_left_out),
                    "regressions": len(regressions), "fixed": sum(r["kind"] == "fixed" for r in items),
                    "shared": sum(r["kind"].startswith("shared") for r in items)},
    }


def _signed(pct: float | None) -> str:
    return "-" if pct is None else (f"{pct:+.1f}%" if abs(pct) < 1000 else (">+1000%" if pct > 0 else "<-1000%"))


def _worst(pct: float | None) -> str:
    if pct is None or not math.isfinite(pct):
        return "unbounded"
    return f"{pct:.1f}% worse" if pct >= 0 else f"{-pct:.1f}% better"


def _range(iv: Sequence[float] | None) -> str:
    return "-" if not iv else f"{_signed(iv[0])} … {_signed(iv[1])}"


def last_line(comparison: Mapping[str, Any], out_dir: str) -> str:
    s = comparison["summary"]
    need = comparison["decision"]["boots_per_arm_to_decide"]
    undecided = (f" · {s['gating_undecided']} gating figure(s) undecided: "
                 + (f"{need} boots per arm would decide them" if need else "more than 1000 boots per arm needed")
                 if comparison["result"] == "UNDECIDED" and s["gating_undecided"] else "")
    if comparison["result"] == "UNDECIDED" and s.get("gating_left_out"):
        undecided += (f" · {s['gating_left_out']} gating figure(s) not compared: their boots took them from "
                      "different sources")
    return (f"COMPARISON: {comparison['result']} (exit {comparison['exit_code']}){undecided} · {s['figures']} "
            f"figures: {s['b_worse']} B worse, {s['b_better']} B better, {s['equivalent']} equivalent, "
            f"{s['not_worse']} not worse, {s['undecided']} undecided · items: {s['regressions']} regression(s), "
            f"{s['fixed']} fixed, {s['shared']} shared · {comparison['spread']} spread · {out_dir}")


def fmt(value: float | None, unit: str = "") -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    if unit == "s":
        return f"{value * 1000:,.1f} ms" if abs(value) < 1 else f"{value:,.3f} s"
    return f"{value:,.3f}" if abs(value) < 100 else f"{value:,.1f}"
