"""Latency SLOs: the profile's ``[slo]`` limits checked against the run's client-observed figures.
No pytest here.

Each limit becomes one gate row (:class:`CheckRow`, the type of every run-level gate row) with the measured figure beside the limit:

- per lane, ``ttft_s_max`` and ``e2e_s_max``: the *worst* repetition of the lane is measured,
  because the gate is pass^k — every repetition must hold the limit, as every repetition must
  find the needle;
- run-wide, ``decode_tok_s_p50_min``: the median decode rate over every item's recorded request;
- run-wide, ``ttft_s_p95_max``: the 95th percentile of TTFT over every streamed item;
- ``[slo.load]``: the load module's per-level figures (TTFT, TPOT, ITL p50/p95/p99 of its
  fixed-length decode probes, mean queue time, goodput, output tok/s, requests/s), each limit held
  at every level and repetition (the worst is measured). The decode probe's TPOT is the decode
  figure an SLO should use: ``decode_tok_s_p50_min`` reads the answers' own lengths (a derived
  figure, from answers of a few tokens).

The figures are the ones the evidence already reports, with ``vllm bench serve``'s definitions
(timing.py): TTFT at the first chunk with ``choices``, end to end at the last byte, decode tok/s
``(completion_tokens - 1) / (e2e - ttft)``, percentiles interpolated linearly as numpy does.
A limit with nothing to measure (the lane did not run) is a row that is not measured: the run
is INCOMPLETE, never a PASS.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from pytest_qualify.stats import percentile

CONTEXT_MODULE = "context"
LOAD_MODULE = "load"

RowVerdict = Literal["PASS", "FAIL", "INCOMPLETE"]  # the values of gate/decide.py's ``Result``


def limit_verdict(ok: bool, measured: object) -> RowVerdict:
    """A run-level row's verdict, decided here once so every reader shows the same: PASS when it
    holds, FAIL only when a figure was measured and broke it, INCOMPLETE when nothing was measured
    (the row could not be checked, so it is never a judged failure)."""
    if ok:
        return "PASS"
    return "INCOMPLETE" if measured is None else "FAIL"


@dataclass(frozen=True)
class CheckRow:
    """A gate row that is a limit, not a module: a measured figure against the profile's limit
    (a latency SLO). ``measured`` None means there was nothing to measure: the run is incomplete."""

    title: str
    measured: str | None  # as the operator reads it, with its unit ("1.234 s (max of 3)")
    limit: str  # "<= 2.000 s"
    ok: bool
    reason: str = ""  # why it failed, naming the figure and the limit

    @property
    def result(self) -> str:
        return f"{self.measured or 'not measured'} (limit {self.limit})"

    @property
    def verdict(self) -> RowVerdict:
        return limit_verdict(self.ok, self.measured)


@dataclass(frozen=True)
class SloRow:
    """One limit of the profile's ``[slo]`` held to the run's figure: a row of ``summary.json``'s
    ``slo`` section (:meth:`as_dict`; the fields are its keys, in its order) and, through
    :func:`check_rows`, a gate row. ``measured`` None: nothing to measure, so the limit cannot be
    checked and the row and the run are INCOMPLETE (:attr:`verdict`)."""

    name: str  # stable: "lane:1K:ttft_s", "run:decode_tok_s_p50", "load:ttft_s_p95_max"
    title: str  # the gate row's title: "SLO 1K lane TTFT"
    scope: str  # "lane 1K", "run" or "load"
    metric: str  # the figure: "ttft_s", "decode_tok_s", a load figure
    statistic: str  # how the figure was taken: "max", "p50", "p95", "worst"
    limit: float
    bound: Literal["max", "min"]  # a ceiling (the figure may not exceed the limit) or a floor
    measured: float | None
    n: int  # how many values the figure was taken over
    ok: bool
    measured_text: str | None  # as the operator reads it: "300.0 ms (worst of 3)"
    limit_text: str  # "<= 500.0 ms"
    reason: str  # why the row fails, naming the figure and the limit; empty when it holds

    @property
    def verdict(self) -> RowVerdict:
        return limit_verdict(self.ok, self.measured)

    def as_dict(self) -> dict[str, Any]:
        """The row as ``summary.json``'s ``slo`` section holds it, with its verdict."""
        return {**asdict(self), "verdict": self.verdict}


def _seconds(value: float) -> str:
    return f"{value * 1000:.1f} ms" if value < 1 else f"{value:.3f} s"


def _rate(value: float) -> str:
    return f"{value:,.2f} tok/s"


def _figures(items: Sequence[Mapping[str, Any]], key: str, lane: str | None = None) -> list[float]:
    out = []
    for item in items:
        if lane is not None and (item.get("module") != CONTEXT_MODULE or item.get("lane") != lane):
            continue
        value = (item.get("properties") or {}).get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out.append(float(value))
    return out


def _ceiling(name: str, title: str, scope: str, metric: str, values: Sequence[float], limit: float,
             how: str, fmt: Any) -> SloRow:
    if not values:
        measured = None
    elif how == "max":
        measured = max(values)
    else:  # "p95"
        measured = percentile(values, 95)
    ok = measured is not None and measured <= limit
    text = None if measured is None else f"{fmt(measured)} ({'worst' if how == 'max' else how} of {len(values)})"
    if measured is None:
        reason = f"{title}: not measured (no {metric} recorded), so the limit {fmt(limit)} cannot be checked"
    elif not ok:
        reason = f"{title}: measured {text} exceeds the limit {fmt(limit)}"
    else:
        reason = ""
    return SloRow(name=name, title=title, scope=scope, metric=metric, statistic=how, limit=limit, bound="max",
                  measured=measured, n=len(values), ok=ok, measured_text=text, limit_text=f"<= {fmt(limit)}",
                  reason=reason)


def evaluate_slo(slo: Any, items: Sequence[Mapping[str, Any]], timing: Mapping[str, Any]) -> list[SloRow]:
    """One row per limit in the profile's ``Slo``, in the order: lanes (profile order), then run-wide."""
    if slo is None:
        return []
    rows = []
    for lane in slo.lanes:
        if lane.ttft_s_max is not None:
            rows.append(_ceiling(f"lane:{lane.lane}:ttft_s", f"SLO {lane.lane} lane TTFT", f"lane {lane.lane}",
                                 "ttft_s", _figures(items, "ttft_s", lane.lane), lane.ttft_s_max, "max", _seconds))
        if lane.e2e_s_max is not None:
            rows.append(_ceiling(f"lane:{lane.lane}:e2e_s", f"SLO {lane.lane} lane end to end", f"lane {lane.lane}",
                                 "e2e_s", _figures(items, "e2e_s", lane.lane), lane.e2e_s_max, "max", _seconds))
    if slo.decode_tok_s_p50_min is not None:
        decode = timing.get("decode_tok_s")
        limit = slo.decode_tok_s_p50_min
        title = "SLO decode tok/s p50"
        measured = decode["p50"] if decode else None
        ok = measured is not None and measured >= limit
        text = None if measured is None else f"{_rate(measured)} (p50 of {decode['n']})"
        if measured is None:
            reason = f"{title}: not measured (no streamed request with more than one token), so the floor {_rate(limit)} cannot be checked"
        elif not ok:
            reason = f"{title}: measured {text} is below the floor {_rate(limit)}"
        else:
            reason = ""
        rows.append(SloRow(name="run:decode_tok_s_p50", title=title, scope="run", metric="decode_tok_s",
                           statistic="p50", limit=limit, bound="min", measured=measured,
                           n=decode["n"] if decode else 0, ok=ok, measured_text=text,
                           limit_text=f">= {_rate(limit)}", reason=reason))
    if slo.ttft_s_p95_max is not None:
        rows.append(_ceiling("run:ttft_s_p95", "SLO TTFT p95 (all streamed items)", "run", "ttft_s",
                             _figures(items, "ttft_s"), slo.ttft_s_p95_max, "p95", _seconds))
    rows += [_load_row(key, limit, items) for key, limit in getattr(slo, "load", ())]
    return rows


def load_levels(items: Sequence[Mapping[str, Any]]) -> list[int]:
    """The concurrency levels the load module's items recorded (``load_levels``: "1,2,4")."""
    levels: set[int] = set()
    for item in items:
        if item.get("module") == LOAD_MODULE:
            text = str((item.get("properties") or {}).get("load_levels") or "")
            levels.update(int(x) for x in text.split(",") if x.strip().isdigit())
    return sorted(levels)


def _load_row(key: str, limit: float, items: Sequence[Mapping[str, Any]]) -> SloRow:
    """One ``[slo.load]`` limit held at every level and repetition: the worst figure is measured
    (the highest for a ceiling, the lowest for a floor)."""
    figure, bound = key.rsplit("_", 1)
    values: list[tuple[float, int]] = []
    for level in load_levels(items):
        for value in _figures([i for i in items if i.get("module") == LOAD_MODULE], f"load_c{level}_{figure}"):
            values.append((value, level))
    fmt = _seconds if figure.split("_s")[0] in ("ttft", "tpot", "itl", "queue_time") else (
        (lambda v: f"{v:.1%}") if figure == "goodput" else (lambda v: f"{v:,.2f}" + (" tok/s" if "tok" in figure else " req/s")))
    title = f"SLO load {figure.replace('_s_', ' ').replace('_', ' ')}"
    worst = (max if bound == "max" else min)(values) if values else None
    measured = worst[0] if worst else None
    ok = measured is not None and (measured <= limit if bound == "max" else measured >= limit)
    text = None if worst is None else f"{fmt(worst[0])} (worst of {len(values)}, at concurrency {worst[1]})"
    limit_text = f"{'<=' if bound == 'max' else '>='} {fmt(limit)}"
    if measured is None:
        reason = f"{title}: not measured (the load module recorded no {figure}), so the limit {fmt(limit)} cannot be checked"
    elif not ok:
        reason = f"{title}: measured {text} {'exceeds the limit' if bound == 'max' else 'is below the floor'} {fmt(limit)}"
    else:
        reason = ""
    return SloRow(name=f"load:{key}", title=title, scope="load", metric=figure, statistic="worst", limit=limit,
                  bound="max" if bound == "max" else "min", measured=measured, n=len(values), ok=ok,
                  measured_text=text, limit_text=limit_text, reason=reason)


def check_rows(rows: Sequence[SloRow]) -> list[CheckRow]:
    """The gate's rows for the SLO rows."""
    return [CheckRow(title=r.title, measured=r.measured_text, limit=r.limit_text, ok=r.ok, reason=r.reason)
            for r in rows]
