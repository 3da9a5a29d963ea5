"""Protocol module 13 — load: the protocol's own items at the deployment's production concurrency,
every answer graded, with latency figures measured on a fixed output length (MLPerf Inference's
Server scenario: accuracy must hold in the performance run itself).

Per repetition, the profile's ``[load]`` levels in order (the first is concurrency 1). At each
level, that many clients (one connection each, released together) send the level's requests: the
mix — the short-answer, tool-call, recall and JSON items, each asked exactly as its own module asks
it and graded by that module's grader (graders/load.py) — and the decode probes, streamed with
``max_tokens = min_tokens = N`` and ``ignore_eos`` so each decodes exactly N tokens.

- A wrong answer, an HTTP error, a dropped or timed-out request fails the row with the level, the
  request and the reason. Queueing is allowed: a request may wait, never be lost or corrupted.
- Each item's answer under load is held to its answer at concurrency 1 (same request, temperature
  0): a difference is a batch-variance finding counted per level; it fails when the grader also
  fails the answer, and always where the profile declares the deployment batch-invariant.
- Per level: TTFT, TPOT and ITL p50/p95/p99 over the probes, request throughput and output tok/s,
  the server's mean queue time (``vllm:request_queue_time_seconds`` from ``/metrics``), goodput
  (probes inside the profile's TTFT and TPOT limits); ``[slo.load]`` can gate on any of them.
- A level proves it ran at its concurrency: as many requests in flight at once as the level names.
- A streamed answer (a probe, a streamed tool call) that came whole in one chunk with its finish is a
  finding counted per level, a failure where the profile requires incremental streaming.
"""

from __future__ import annotations

from typing import Any

import pytest

from pytest_qualify import checks
from pytest_qualify.checks import fail
from pytest_qualify.client.errors import EndpointError, RequestTimeout, ServerGone
from pytest_qualify.evidence.metrics import ENGINE_TPOT_NAMES, engine_mean
from pytest_qualify.graders.answer_checks import check_incremental
from pytest_qualify.graders.load import (
    ProbeTiming, check_probe, grade_item, held_to_first, level_figures, recorded,
)
from pytest_qualify.hooks.server_session import make_client
from pytest_qualify.tasks.load import Probe, level_plan, load_items, send_level, spread_probes

pytestmark = pytest.mark.qualify_module("load")

# How many of a repetition's problems the failure names in full (the count says the rest).
SHOWN = 12


def _scrape(client: Any) -> Any:
    """One ``/metrics`` snapshot, or None where it could not be read."""
    from pytest_qualify.evidence.metrics import MetricsParseError, parse

    try:
        return parse(client.metrics_text())
    except (MetricsParseError, EndpointError, ServerGone, RequestTimeout):
        return None


def _queue(before: Any, after: Any) -> dict[str, float] | None:
    """The queue-time histogram's sum and count over the level (no series before: both were 0)."""
    if after is None or after.get(f"{QUEUE_METRIC}_count") is None:
        return None
    b = before.values if before is not None else {}
    return {"sum": after.get(f"{QUEUE_METRIC}_sum") - b.get(f"{QUEUE_METRIC}_sum", 0.0),
            "count": after.get(f"{QUEUE_METRIC}_count") - b.get(f"{QUEUE_METRIC}_count", 0.0)}


QUEUE_METRIC = "request_queue_time_seconds"


def test_load(qualify_run, qualify_profile, qualify_client, qualify_salt, qualify_record, qualify_repetition):
    rules = qualify_profile.load
    where = f"repetition {qualify_repetition}"
    if rules is None:
        fail(where, f"profile {qualify_profile.name} has no [load] table, so no concurrency level is declared")
    items = load_items(rules.mix)
    plan = level_plan(items, rules.requests_per_level)
    probe = Probe(rules.probe_tokens)
    budget = qualify_profile.limits.answer_budget_tokens
    first: dict[str, Any] = {}
    problems: list[str] = []
    findings: list[str] = []
    props: dict[str, Any] = {"load_levels": ",".join(map(str, rules.levels)), "load_probe_tokens": rules.probe_tokens,
                             "load_batch_invariant": rules.batch_invariant}
    variance_total = whole_total = 0
    # A streamed answer that came whole in one chunk with its finish (a probe's TTFT is then its end
    # to end): a finding, a failure where the profile requires incremental streaming.
    required = qualify_profile.integrity.incremental_streaming == "required"
    stream_findings: list[str] = []
    for level in rules.levels:
        tag = f"c={level}"
        before = _scrape(qualify_client)
        sent, wall_s, in_flight = send_level(lambda: make_client(qualify_run), level,
                                             spread_probes(plan, probe, rules.probes_per_level), budget, qualify_salt)
        after = _scrape(qualify_client)
        probes: list[ProbeTiming] = []
        failed = variance = output_tokens = completed = whole = probes_whole = 0
        for one in sent:
            what = "decode probe" if isinstance(one.job, Probe) else one.job.key
            at = f"{tag}, request {one.index + 1} ({what})"
            if one.error:
                failed += 1
                problems.append(f"{at}: {one.error}")
                continue
            answer = one.answer
            completed += 1
            output_tokens += answer.completion_tokens or 0
            finding, failure = check_incremental(answer, required)
            if finding is not None:
                whole += 1
                whole_total += 1
                if failure is not None:
                    failed += 1
                    problems.append(f"{at}: {failure}")
                else:
                    stream_findings.append(f"{at}: {finding}")
            if isinstance(one.job, Probe):
                length = check_probe(answer, probe.tokens)
                timeline = answer.timeline
                if not length:
                    failed += 1
                    problems.append(f"{at}: {length.reason}")
                elif finding is not None:
                    # Its first chunk is its end: no TTFT, TPOT or ITL to take from it (counted, so the
                    # level's decode figures say why they are missing rather than read as a number).
                    probes_whole += 1
                elif timeline is not None and timeline.ttft_s is not None and timeline.e2e_s is not None:
                    probes.append(ProbeTiming(timeline.ttft_s, timeline.e2e_s, answer.completion_tokens,
                                              tuple(timeline.inter_chunk_s), answer.stream.chunk_tokens))
                continue
            item = one.job
            verdict = grade_item(item, answer)
            now = recorded(answer, f"load {tag} request {one.index + 1}")
            held = None
            if level == rules.levels[0]:
                first.setdefault(item.key, now)
            elif item.key in first:
                held = held_to_first(now, first[item.key])
                if not held:
                    variance += 1
                    findings.append(f"{at}: differs from its answer at c={rules.levels[0]}: {held.reason}")
            if not verdict:
                failed += 1
                also = " (and differs from its answer at concurrency 1)" if held is not None and not held else ""
                problems.append(f"{at}: {verdict.reason}{also}")
            elif held is not None and not held and rules.batch_invariant:
                failed += 1
                problems.append(f"{at}: the profile declares the deployment batch-invariant, and the answer "
                                f"differs from its answer at c={rules.levels[0]}: {held.reason}")
        if in_flight < level:
            problems.append(f"{tag}: at most {in_flight} requests were in flight at once, so concurrency {level} "
                            "was not reached")
        figures = level_figures(probes, completed, output_tokens, wall_s, rules.goodput_ttft_s_max,
                                rules.goodput_tpot_s_max, _queue(before, after))
        # The engine's own time per output token over the level's requests: single-stream decode at c=1
        # whatever the stream's chunking (none where the server reports no such histogram).
        engine = engine_mean(before, after, ENGINE_TPOT_NAMES, completed)
        figures["engine_tpot_s_mean"] = engine.value
        if engine.metric is not None:
            props["load_engine_tpot_source"] = engine.metric
        if engine.value is None:
            props[f"load_c{level}_engine_tpot_why"] = engine.why
        variance_total += variance
        props.update({f"load_c{level}_requests": len(sent), f"load_c{level}_failed": failed,
                      f"load_c{level}_batch_variance": variance, f"load_c{level}_in_flight_max": in_flight,
                      f"load_c{level}_probes": len(probes), f"load_c{level}_wall_s": round(wall_s, 6),
                      f"load_c{level}_whole_at_finish": whole, f"load_c{level}_probes_whole": probes_whole})
        props.update({f"load_c{level}_{k}": (round(v, 6) if isinstance(v, float) else v)
                      for k, v in figures.items() if v is not None})
    props["load_batch_variance"] = variance_total
    if findings:
        props["load_batch_variance_findings"] = " | ".join(findings[:SHOWN])
    props["load_whole_at_finish"] = whole_total
    if stream_findings:
        more = f" (and {len(stream_findings) - SHOWN} more)" if len(stream_findings) > SHOWN else ""
        props["stream_incremental"] = " | ".join(stream_findings[:SHOWN]) + more
    qualify_record.props(**props)
    if problems:
        more = f" (and {len(problems) - SHOWN} more)" if len(problems) > SHOWN else ""
        fail(where, f"{len(problems)} problem(s) under load: " + " | ".join(problems[:SHOWN]) + more)
    checks.held(where, "every answer at every level graded right")
