"""Head-to-head against an earlier run's ``summary.json``: per-lane TTFT and end to end, decode
p50/p95, prefill p50, the sweep's TTFT per prompt size and its decode probe, the engine's capacity
facts (KV tokens and GiB, concurrency at the window, model memory), gate counts, with % deltas; regressions beyond a threshold are flagged
(and, with ``--qualify-fail-on-regression PCT``, fail the gate). No pytest here."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_qualify.bundle_format.earlier import EarlierRunError, read_earlier
from pytest_qualify.bundle_format.schema import SCHEMA_ID, SummaryError, validate
from pytest_qualify.bundle_format.workload import differences, of_summary

DEFAULT_THRESHOLD_PCT = 10.0


class BaselineError(ValueError):
    """A baseline that cannot be compared against; the message names the file."""


def load_baseline(path: Path) -> dict[str, Any]:
    label = f"baseline {path}"
    try:
        data = read_earlier(Path(path), label, SCHEMA_ID).data
        validate(data)
    except EarlierRunError as exc:
        raise BaselineError(str(exc)) from None
    except SummaryError as exc:
        raise BaselineError(f"{label}: {exc}") from None
    return data


def simulated_mismatch(baseline: Mapping[str, Any], *, simulated: bool, path: str = "") -> str | None:
    """Why a baseline cannot be compared with this run when one of them ran against the SIMULATED
    reference server and the other did not (one line), else None: the reference server measures no
    deployment, so its figures are no baseline of a real one, nor a real run's of it."""
    if bool(baseline.get("simulated")) == bool(simulated):
        return None
    label = f"baseline {path}" if path else "baseline"
    run_id = (baseline.get("run") or {}).get("id", "?")
    which = ("the baseline is SIMULATED, this run is real" if baseline.get("simulated")
             else "this run is SIMULATED, the baseline is real")
    return (f"{label}: run {run_id} cannot be compared: {which}; a SIMULATED run is never compared with a real one "
            "(the reference server measures no deployment)")


def check_comparable(baseline: Mapping[str, Any], *, workload: Mapping[str, Any], path: str = "",
                     simulated: bool | None = None) -> None:
    """A baseline is comparable when it measured this run's workload (``bundle_format/workload.py``:
    modules, lanes and their prompt sizes, budgets, thinking, load levels and probe length, sampling),
    whatever its profile is called and whatever it deployed: a candidate against the incumbent is the
    point. A baseline of another workload would compare unlike things, so it is refused naming what
    differs. One boot on each side has no boot-to-boot spread: ``python -m pytest_qualify compare``
    makes the separability call across boots.

    ``simulated``: whether this run is SIMULATED, where that is known before the server starts (the
    reference server); None for an endpoint, which says so only once contacted: the gate refuses
    the comparison then (``gate/decide.py``, a usage error)."""
    if simulated is not None:
        mismatch = simulated_mismatch(baseline, simulated=simulated, path=path)
        if mismatch:
            raise BaselineError(mismatch)
    label = f"baseline {path}" if path else "baseline"
    run_id = (baseline.get("run") or {}).get("id", "?")
    diff = differences(of_summary(baseline), workload, a_name="baseline", b_name="this run")
    if diff:
        raise BaselineError(f"{label}: run {run_id} measured another workload: " + "; ".join(diff)
                            + "; a baseline must measure the same workload")


def delta_pct(baseline: float | None, current: float | None) -> float | None:
    if baseline is None or current is None or baseline == 0:
        return None
    return (current - baseline) / abs(baseline) * 100.0


def _median(spread: Mapping[str, Any] | None) -> float | None:
    return float(spread["median"]) if spread else None


def _metric_rows(summary: Mapping[str, Any]) -> dict[str, tuple[float | None, str]]:
    """metric name -> (value, which direction is better)."""
    timing = summary["timing"]
    rows: dict[str, tuple[float | None, str]] = {}
    for lane in timing["lanes"]:
        rows[f"{lane['lane']} lane TTFT (s)"] = (_median(lane["ttft_s"]), "lower")
        rows[f"{lane['lane']} lane end to end (s)"] = (_median(lane["e2e_s"]), "lower")
    decode = timing["decode_tok_s"] or {}
    prefill = timing["prefill_tok_s"] or {}
    rows["decode tok/s p50"] = (decode.get("p50"), "higher")
    rows["decode tok/s p95"] = (decode.get("p95"), "higher")
    rows["prefill tok/s p50"] = (prefill.get("p50"), "higher")
    sweep = timing.get("sweep") or {}
    for point in sweep.get("points") or []:
        rows[f"TTFT at {point['prompt_tokens']:,} tokens (s)"] = (point.get("ttft_s"), "lower")
    for probe in sweep.get("decode") or []:
        rows[f"decode probe at {probe['prompt_tokens']:,} tokens (tok/s)"] = (probe.get("decode_tok_s"), "higher")
    # The engine's own capacity figures (serving_facts): fixed for one deployment, so any move is the
    # deployment's. Start-up times are reported in the run, not compared: they vary with the host's load.
    facts = (summary.get("serving_facts") or {}).get("facts") or {}
    for key, name, better in CAPACITY_FACTS:
        if key in facts:
            rows[name] = (facts[key].get("value"), better)
    return rows


CAPACITY_FACTS = (("kv_cache_tokens", "KV cache (tokens)", "higher"), ("kv_cache_gib", "KV cache (GiB)", "higher"),
                  ("max_concurrency", "concurrency at the window (x)", "higher"),
                  ("model_memory_gib", "model memory (GiB)", "lower"))


def _gate_rows(summary: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {row["module"]: row for row in summary["gate"]}


def compare(current: Mapping[str, Any], baseline: Mapping[str, Any], *, path: str = "",
            threshold_pct: float = DEFAULT_THRESHOLD_PCT, fail_on_regression: bool = False) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    regressions: list[str] = []
    base_id = baseline.get("run", {}).get("id")
    cur_metrics, base_metrics = _metric_rows(current), _metric_rows(baseline)
    for name in list(base_metrics) + [n for n in cur_metrics if n not in base_metrics]:
        b, better = base_metrics.get(name, (None, cur_metrics.get(name, (None, "lower"))[1]))
        c, _ = cur_metrics.get(name, (None, better))
        d = delta_pct(b, c)
        worse = d is not None and (d > threshold_pct if better == "lower" else d < -threshold_pct)
        rows.append({"metric": name, "baseline": b, "current": c, "delta_pct": d, "better": better, "regression": worse})
        if worse:
            regressions.append(f"{name}: {_fmt(b)} -> {_fmt(c)} ({d:+.1f}%, threshold {threshold_pct:g}%)")
    cur_gate, base_gate = _gate_rows(current), _gate_rows(baseline)
    for module in list(base_gate) + [m for m in cur_gate if m not in base_gate]:
        b_row, c_row = base_gate.get(module), cur_gate.get(module)
        b_rate = _rate(b_row)
        c_rate = _rate(c_row)
        worse = b_rate is not None and c_rate is not None and c_rate < b_rate
        title = (c_row or b_row or {}).get("title", module)
        rows.append({
            "metric": f"gate: {title}",
            "baseline": _count(b_row), "current": _count(c_row),
            "delta_pct": delta_pct(b_rate, c_rate), "better": "higher", "regression": worse,
        })
        if worse:
            regressions.append(f"gate {title}: {_count(b_row)} -> {_count(c_row)}")
    return {
        "path": path,
        "run_id": base_id,
        "threshold_pct": threshold_pct,
        "fail_on_regression": fail_on_regression,
        "rows": rows,
        "regressions": regressions,
        "notes": _notes(current, baseline),
    }


def _rate(row: Mapping[str, Any] | None) -> float | None:
    if not row or not row["items"]:
        return None
    return (row["passed"] + row["waived"]) / row["items"]


def _count(row: Mapping[str, Any] | None) -> str | None:
    if not row:
        return None
    return f"{row['passed'] + row['waived']}/{row['items']}"


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.3f}" if abs(value) < 100 else f"{value:,.1f}"


def _notes(current: Mapping[str, Any], baseline: Mapping[str, Any]) -> list[str]:
    """What makes the comparison less than like for like: the operator must see it."""
    notes = []
    cp, bp = current["profile"], baseline["profile"]
    if cp["name"] != bp["name"]:
        notes.append(f"baseline used profile {bp['name']!r}, this run {cp['name']!r}")
    for key in ("model", "revision", "served_name", "engine", "quantization", "kv_cache_dtype"):
        if cp["deployment"].get(key) != bp["deployment"].get(key):
            notes.append(f"deployment {key} differs: baseline {bp['deployment'].get(key)!r}, this run {cp['deployment'].get(key)!r}")
    if current["run"].get("workers") != baseline["run"].get("workers"):
        notes.append(f"xdist workers differ: baseline {baseline['run'].get('workers')}, this run {current['run'].get('workers')}")
    return notes


def render_rows(comparison: Mapping[str, Any]) -> list[tuple[str, str, str, str]]:
    """(metric, baseline, this run, delta) as text, for the report and the terminal."""
    out = []
    for row in comparison["rows"]:
        b, c = row["baseline"], row["current"]
        d = row["delta_pct"]
        text_d = "-" if d is None else f"{d:+.1f}%"
        if row["regression"]:
            text_d += " REGRESSION"
        fb = b if isinstance(b, str) else _fmt(b)
        fc = c if isinstance(c, str) else _fmt(c)
        out.append((row["metric"], fb or "-", fc or "-", text_d))
    return out
