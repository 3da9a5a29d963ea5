"""The recipe's claims: each published figure of the profile's ``[claims]`` held to what the run
measured, one gate row per claim ("Recipe claims: ..."). No pytest here.

A claim is held when the measured figure is

- ``at_most``: no more than the claimed value plus its tolerance (``measured <= claimed × (1 + t)``);
- ``at_least``: no less than the claimed value less its tolerance (``measured >= claimed × (1 − t)``);
- ``within``: no further from the claimed value than its tolerance (``|measured − claimed| <= claimed × t``).

Where the figure comes from (the run's facts, :class:`RunFacts`, never re-measured here):

- a serving fact (KV tokens and GiB, concurrency at the window, model memory, weight load, compile,
  graph capture, launch to ready): ``serving_facts`` (server/facts.py), with its source;
- TTFT and prefill tok/s at a prompt size: the sweep module's points (``timing.sweep``), the median
  of every sample at that size; single-stream decode tok/s at a prompt size: its decode probe;
- TTFT and end to end at a lane: the context lane's median over repetitions (``timing.lanes``);
- the run's decode p50/p95 and prefill p50: ``timing``, over every recorded request.

A figure the run could not show is "not verifiable here": the row fails as not measured (the run is
INCOMPLETE, never a PASS) only when the claim is ``required``; otherwise it is listed, held by
nobody, and decides nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from pytest_qualify.gate.run_facts import RunFacts
from pytest_qualify.gate.slo import CheckRow, RowVerdict, limit_verdict
from pytest_qualify.profiles import Direction
from pytest_qualify.properties import TimingSource

TITLE = "Recipe claims"
NOT_VERIFIABLE = "not verifiable here"
NOT_IN_RUN = "not in this run"
HELD, BROKEN = "held", "broken"

UNITS = {
    "kv_cache_tokens": "tokens", "kv_cache_gib": "GiB", "max_concurrency": "x", "model_memory_gib": "GiB",
    "weight_load_s": "s", "startup_s": "s", "compile_s": "s", "graph_capture_s": "s", "ttft_s": "s", "e2e_s": "s",
    "prefill_tok_s": "tok/s", "decode_tok_s": "tok/s", "decode_tok_s_p50": "tok/s", "decode_tok_s_p95": "tok/s",
    "prefill_tok_s_p50": "tok/s",
}
LABELS = {
    "kv_cache_tokens": "KV cache tokens", "kv_cache_gib": "KV cache GiB", "max_concurrency": "concurrency at the window",
    "model_memory_gib": "model memory", "weight_load_s": "weight load", "startup_s": "launch to ready",
    "compile_s": "torch.compile", "graph_capture_s": "graph capture", "ttft_s": "TTFT (first chunk)", "e2e_s": "end to end",
    "prefill_tok_s": "prefill", "decode_tok_s": "single-stream decode", "decode_tok_s_p50": "decode p50 (all requests)",
    "decode_tok_s_p95": "decode p95 (all requests)", "prefill_tok_s_p50": "prefill p50 (all requests)",
}
SERVING_FACTS = ("kv_cache_tokens", "kv_cache_gib", "max_concurrency", "model_memory_gib", "weight_load_s",
                 "startup_s", "compile_s", "graph_capture_s")


@dataclass(frozen=True)
class ClaimRow:
    """One claim of the profile's ``[claims]`` held to the run's figure: a row of ``summary.json``'s
    ``claims`` section (:meth:`as_dict`; the fields are its keys, in its order) and, through
    :func:`check_rows`, a gate row unless the claim is not in this run."""

    name: str
    title: str  # the gate row's title: "Recipe claims: KV cache tokens"
    figure: str
    unit: str
    direction: Direction
    claimed: float
    tolerance: float
    required: bool
    prompt_tokens: int | None
    lane: str | None
    said: str | None  # the recipe's own words
    low: float | None  # the lowest measured value that holds the claim (None: unbounded)
    high: float | None
    measured: float | None  # None: not verifiable here, or not in this run
    source: str  # where the figure comes from, or why there is none
    status: str  # held | broken | not verifiable here | not in this run
    ok: bool
    claimed_text: str  # "at least 412,980 tokens (−10%)"
    measured_text: str | None
    reason: str  # both figures, or why there is no measured one

    @property
    def verdict(self) -> RowVerdict:
        """FAIL only when measured and broken; INCOMPLETE when a required claim is not verifiable
        here; PASS when it held, is not required, or is not in this run."""
        return limit_verdict(self.ok, self.measured)

    def as_dict(self) -> dict[str, Any]:
        """The row as ``summary.json``'s ``claims`` section holds it, with its verdict."""
        return {**asdict(self), "verdict": self.verdict}


def fmt(value: float, unit: str) -> str:
    if unit == "tokens":
        return f"{int(round(value)):,} tokens"
    if unit == "x":
        return f"{value:.2f}x"
    if unit == "s":
        return f"{value * 1000:.0f} ms" if value < 1 else f"{value:,.2f} s"
    return f"{value:,.2f} {unit}"


def claim_label(claim: Any) -> str:
    label = LABELS[claim.figure]
    if claim.prompt_tokens is not None:
        label += f" at {claim.prompt_tokens:,} prompt tokens"
    if claim.lane is not None:
        label += f", {claim.lane} lane"
    return label


def bound(claim: Any) -> tuple[float | None, float | None]:
    """The lowest and highest measured value that holds the claim (None: unbounded)."""
    c, t = claim.claimed, claim.tolerance
    if claim.direction == "at_most":
        return None, c * (1 + t)
    if claim.direction == "at_least":
        return c * (1 - t), None
    return c * (1 - t), c * (1 + t)


def holds(claim: Any, measured: float) -> bool:
    low, high = bound(claim)
    return (low is None or measured >= low) and (high is None or measured <= high)


def claimed_text(claim: Any) -> str:
    unit = UNITS[claim.figure]
    word = {"at_most": "at most", "at_least": "at least", "within": "within"}[claim.direction]
    tol = f"{claim.tolerance:.0%}" if claim.tolerance * 100 == round(claim.tolerance * 100) else f"{claim.tolerance:.1%}"
    sign = {"at_most": "+", "at_least": "−", "within": "±"}[claim.direction]
    return f"{word} {fmt(claim.claimed, unit)} ({sign}{tol})"


def _sweep_point(timing: Mapping[str, Any], tokens: int) -> Mapping[str, Any] | None:
    for point in ((timing.get("sweep") or {}).get("points") or []):
        if point.get("prompt_tokens") == tokens:
            return point
    return None


def _decode_probe(timing: Mapping[str, Any], tokens: int) -> Mapping[str, Any] | None:
    for probe in ((timing.get("sweep") or {}).get("decode") or []):
        if probe.get("prompt_tokens") == tokens:
            return probe
    return None


def measure(claim: Any, facts: RunFacts) -> tuple[float | None, str]:
    """The figure the run measured for this claim and where it comes from; (None, why) when the run
    cannot show it."""
    timing = facts.timing
    simulated = " (SIMULATED)" if facts.simulated else ""
    figure = claim.figure
    if figure in SERVING_FACTS:
        fact = ((facts.serving_facts or {}).get("facts") or {}).get(figure)
        if not fact:
            return None, "no serving facts were read in this run"
        value = fact.get("value")
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            return None, f"the serving fact is {fact.get('status')}: {fact.get('source')}"
        source = str(fact.get("source"))
        if fact.get("upper_bound") and claim.direction != "at_most":
            # An upper bound shows that the figure is at most this, never that it is at least anything.
            return None, f"{source} gives only an upper bound ({value:,.2f}): {fact.get('note') or 'it may overstate'}"
        return float(value), source + (simulated if "SIMULATED" not in source else "")
    if claim.lane is not None:
        for lane in timing.get("lanes") or []:
            if lane.get("lane") == claim.lane and lane.get(figure):
                s = lane[figure]
                timed = figure in ("ttft_s", "prefill_tok_s")  # the figures a lane's TTFT source decides
                source = lane.get("ttft_source") if timed else None
                how = f"TTFT from {source}" if source and source != TimingSource.CLIENT else "client-observed"
                held = timed and any(str(r.get("source")) == TimingSource.CLIENT_HELD
                                     for r in lane.get("ttft_sources") or ())
                # A held stream's first chunk is its end: its TTFT at most the figure, its prefill rate at
                # least. Such a figure shows "at most" (TTFT) or "at least" (prefill), never the other way.
                shows = "at_most" if figure == "ttft_s" else "at_least"
                if held and claim.direction != shows:
                    return None, (f"not measurable here: the {claim.lane} lane's answer came whole in one chunk with its "
                                  f"finish and no engine timing stood in, so its {figure} is only a bound "
                                  f"({'at most' if shows == 'at_most' else 'at least'} {float(s['median']):,.4g}): the "
                                  "parser held the content")
                return float(s["median"]), f"{claim.lane} lane, median of {s['n']} repetition(s), {how}{simulated}"
        return None, f"the {claim.lane} lane recorded no {figure} in this run"
    if figure in ("ttft_s", "prefill_tok_s"):
        point = _sweep_point(timing, claim.prompt_tokens)
        value = point.get(figure) if point else None
        if value is None and point is not None:
            return None, (f"not measurable here: no sample at {claim.prompt_tokens:,} prompt tokens streamed as decoded "
                          "(each came whole in one chunk with its finish, so its first chunk is its end)")
        if value is None:
            return None, f"the sweep module measured no prompt of {claim.prompt_tokens:,} tokens in this run"
        if point.get("ttft_source") == TimingSource.ENGINE:
            return float(value), (f"sweep, the engine's own TTFT (/metrics) over the samples at {claim.prompt_tokens:,} "
                                  f"tokens: each came whole in one chunk with its finish, so its first chunk read the "
                                  f"parser{simulated}")
        return float(value), f"sweep, median of {point['samples']} warm sample(s) at {claim.prompt_tokens:,} tokens{simulated}"
    if figure == "decode_tok_s":
        probe = _decode_probe(timing, claim.prompt_tokens)
        value = probe.get("decode_tok_s") if probe else None
        if value is None and probe is not None:
            return None, (f"not measurable here: no decode probe sample after {claim.prompt_tokens:,} prompt tokens "
                          "streamed as decoded (each came whole in one chunk with its finish)")
        if value is None:
            return None, f"the sweep module's decode probe did not run at {claim.prompt_tokens:,} prompt tokens"
        return float(value), (f"decode probe, median of {probe['samples']} at {claim.prompt_tokens:,} prompt tokens, "
                              f"{probe['output_tokens']} output tokens{simulated}")
    key, stat = figure.rsplit("_", 1)  # decode_tok_s_p50 -> decode_tok_s, p50
    entry = timing.get(key)
    if not entry or entry.get(stat) is None:
        return None, f"no request recorded {key} in this run"
    return float(entry[stat]), f"{stat} of {entry['n']} request(s), client-observed{simulated}"


def _not_run(claim: Any, modules: Sequence[str] | None, lanes: Sequence[str] | None) -> str | None:
    """Why this run does not measure the claim's figure at all (its module or lane is not in the
    profile or stage), or None."""
    if modules is None:
        return None
    if claim.lane is not None:
        if "context" not in modules:
            return "the context module, which times the lanes, is not in this run"
        if lanes is not None and claim.lane not in lanes:
            return f"the {claim.lane} lane is not in this run"
    elif claim.prompt_tokens is not None and "sweep" not in modules:
        return "the sweep module, which measures at prompt sizes, is not in this run"
    return None


def evaluate_claims(claims: Any, facts: RunFacts, modules: Sequence[str] | None = None,
                    lanes: Sequence[str] | None = None, *, qualifies: bool = False) -> list[ClaimRow]:
    """One row per claim, in the profile's order: claimed, measured, tolerance, held or not, and a
    reason that holds both figures. ``modules`` and ``lanes``: what the run ran (the profile's or
    its stage's); a claim whose figure they do not measure is "not in this run", listed and no gate
    row (a preflight that runs one lane says nothing of the others). ``qualifies``: the run is a
    qualification (the full stage), which every required claim must be judged in: one its run
    cannot produce is not verifiable there, and leaves it INCOMPLETE naming the claim."""
    if claims is None:
        return []
    rows = []
    for claim in claims.claims:
        unit = UNITS[claim.figure]
        label = claim_label(claim)
        title = f"{TITLE}: {label}"
        wanted = claimed_text(claim)
        skipped = _not_run(claim, modules, lanes)
        measured, source = (None, skipped) if skipped else measure(claim, facts)
        if skipped and claim.required and qualifies:
            skipped = None  # a qualification cannot leave a required claim out: it is not verifiable here
        if skipped:
            status, ok = NOT_IN_RUN, True
            reason = f"{title}: claimed {wanted}; {NOT_IN_RUN} ({skipped})"
        elif measured is None:
            status = NOT_VERIFIABLE
            ok = not claim.required
            reason = (f"{title}: claimed {wanted}; {NOT_VERIFIABLE} ({source})"
                      + ("; the claim is required, so the run cannot be judged" if claim.required else ""))
        else:
            ok = holds(claim, measured)
            status = HELD if ok else BROKEN
            reason = (f"{title}: measured {fmt(measured, unit)} ({source}) "
                      f"{'holds' if ok else 'breaks'} the claim of {wanted}")
        low, high = bound(claim)
        rows.append(ClaimRow(
            name=claim.name, title=title, figure=claim.figure, unit=unit, direction=claim.direction,
            claimed=claim.claimed, tolerance=claim.tolerance, required=claim.required,
            prompt_tokens=claim.prompt_tokens, lane=claim.lane, said=claim.said or None, low=low, high=high,
            measured=measured, source=source, status=status, ok=ok, claimed_text=wanted,
            measured_text=None if measured is None else fmt(measured, unit), reason=reason,
        ))
    return rows


def check_rows(rows: Sequence[ClaimRow]) -> list[CheckRow]:
    """The gate's rows: a claim not verifiable here is a row that was not measured (INCOMPLETE)
    only when it is required; a claim not required and not verifiable is listed as held by nothing."""
    out = []
    for r in rows:
        if r.status == NOT_IN_RUN:
            continue
        if r.measured is None:
            measured = None if r.required else f"{NOT_VERIFIABLE} (not required)"
        else:
            measured = f"{r.measured_text} {r.status}"
        out.append(CheckRow(title=r.title, measured=measured, limit=f"claimed {r.claimed_text}", ok=r.ok,
                            reason=r.reason))
    return out
