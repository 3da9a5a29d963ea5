"""Protocol module 12 — integrity: the judged server is the answering one, and its streams say
what they mean (MLPerf Inference's compliance audits, held against an OpenAI-compatible endpoint).

A sample of the streaming modules' own requests (``fixtures/integrity.toml``), asked exactly as
those modules ask them:

- streamed (with and without ``include_usage``) and plain at temperature 0: the same visible
  answer, tool calls, finish reason and completion tokens; one finish chunk; usage exactly when
  asked; no more content deltas than tokens; tool-call deltas that start with id, type and name;
- a tool call cut by ``max_tokens`` ends ``length``;
- the answer equals every earlier answer to the same request in this run (the answer journal:
  other modules, earlier repetitions, the streamed path) — TEST01;
- the visible answer's length within the profile's band for the sample's module — TEST09.

And once per repetition, a prompt of the probe size asked fresh, fresh again with other text, then
repeated under a fresh cache salt: no prefix-cache hit, and the repeat not markedly faster — TEST04.
Also once per repetition, where the profile runs the context module: the smallest lane's timed
request (the very one the context module streamed and measured) asked again without streaming, its
answer equal to the timed one — TEST01 on the timing phase.
Answers are compared whatever their finish state (that is the finish module's row).
"""

from __future__ import annotations

import time

import pytest

from pytest_qualify import engines
from pytest_qualify.checks import fail, held, require, sizing
from pytest_qualify.graders import Verdict
from pytest_qualify.client.errors import EndpointError
from pytest_qualify.evidence.answers import HELD, REASKED, answers_to, timed_answers
from pytest_qualify.graders.contract import measured_span
from pytest_qualify.hooks import state_of
from pytest_qualify.evidence.metrics import MetricsParseError, delta, parse
from pytest_qualify.tasks.fixture_data import integrity_samples
from pytest_qualify.graders.integrity import (
    RecordedAnswer, check_cut_call, check_length_band, check_no_result_cache, check_same_answers, too_fast,
    check_stream_shape, compare_stream_plain, parsed_calls,
)
from pytest_qualify.tasks.haystack import Haystack, Sized, haystack_seed, lane_plan, plan_haystack, size_to_tokens

pytestmark = pytest.mark.qualify_module("integrity")

SAMPLES = integrity_samples()
TOOL_SAMPLES = [s for s in SAMPLES if s.tool_turn]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    # The timed re-ask holds the smallest context lane (the profile's rule, ``Limits.smallest_lane``);
    # its ``qualify_reads("context")`` marker drops it where the context module does not run.
    if "lane" in metafunc.fixturenames:
        state = state_of(metafunc.config)
        lanes = (state.profile.limits.smallest_lane,) if state is not None else ()
        metafunc.parametrize("lane", lanes, ids=[lane.name for lane in lanes])


def _usage_tokens(answer) -> int | None:
    return answer.completion_tokens if answer.usage else None


def _require_all(where: str, checks: list[tuple[str, Verdict]]) -> None:
    """Fail with every broken rule at once: one breach must not hide another."""
    problems = [f"{label}: {verdict.reason}" if label else verdict.reason for label, verdict in checks if not verdict.ok]
    if problems:
        fail(where, " | ".join(problems))
    held(where, "every rule held")


@pytest.mark.parametrize("sample", SAMPLES, ids=[s.id for s in SAMPLES])
def test_stream_matches_plain(sample, qualify_ask, qualify_profile, qualify_record, qualify_repetition):
    where = f"sample {sample.id}, repetition {qualify_repetition}"
    messages = list(sample.messages)
    plain = qualify_ask(messages, check_finish=False, salt_suffix="-plain", **sample.params)
    streamed = qualify_ask(messages, check_finish=False, stream=True, salt_suffix="-usage",
                           stream_options={"include_usage": True}, **sample.params)
    quiet = qualify_ask(messages, check_finish=False, stream=True, salt_suffix="-quiet",
                        stream_options={"include_usage": False}, **sample.params)
    qualify_record.props(case=sample.id, plain_completion_tokens=plain.completion_tokens,
                         stream_chunks=streamed.stream.chunks, stream_content_deltas=streamed.stream.content_deltas)
    checks = [
        ("streamed with include_usage", check_stream_shape(streamed.stream, _usage_tokens(streamed),
                                                            streamed.finish_reason)),
        # Without usage the stream's own count is unknown: the plain answer's bounds its deltas.
        ("streamed without include_usage", check_stream_shape(quiet.stream, plain.completion_tokens,
                                                               quiet.finish_reason)),
        ("streamed with include_usage", compare_stream_plain(streamed, plain)),
        ("streamed without include_usage", compare_stream_plain(quiet, plain)),
    ]
    band = qualify_profile.integrity.band(sample.module)
    if band is not None and not plain.tool_calls:
        # Measured on what the sample's contract reads as the answer, never on invited working.
        measured, what = measured_span(plain.content, sample.contract) if sample.contract else (plain.content or "", "visible answer")
        qualify_record.props(length_chars=len(measured), length_measured=what)
        checks.append(("", check_length_band(measured, band.min_chars, band.max_chars, sample.module, what=what)))
    _require_all(where, checks)


@pytest.mark.parametrize("sample", TOOL_SAMPLES, ids=[s.id for s in TOOL_SAMPLES])
def test_cut_tool_call_says_length(sample, qualify_ask, qualify_client, qualify_record, qualify_repetition):
    where = f"sample {sample.id}, repetition {qualify_repetition}"
    messages = list(sample.messages)
    uncut = qualify_ask(messages, check_finish=False, salt_suffix="-uncut", **sample.params)
    tokens = uncut.completion_tokens
    if not uncut.tool_calls or not tokens or tokens < 2:
        fail(where, f"the uncut answer made no tool call of 2 or more tokens (finish {uncut.finish_reason!r}, "
                    f"{tokens} completion tokens), so a cut call cannot be judged")
    max_tokens = tokens // 2
    qualify_record.props(case=sample.id, uncut_tokens=tokens, cut_max_tokens=max_tokens)
    checks = []
    for stream in (True, False):
        cut = qualify_ask(messages, check_finish=False, stream=stream, max_tokens=max_tokens,
                          salt_suffix=f"-cut-{'stream' if stream else 'plain'}", **sample.params)
        how = "streamed" if stream else "not streamed"
        if cut.stream is not None:
            checks.append((how, check_stream_shape(cut.stream, _usage_tokens(cut), cut.finish_reason)))
        checks.append((how, check_cut_call(cut.finish_reason, max_tokens, tokens)))
    if any(not verdict.ok for _how, verdict in checks):
        # The engine's own behaviour, as its version's row in engines.toml tells it (or that it has none).
        checks.append(("engine", Verdict.reject(engines.cut_call_note(_version(qualify_client)))))
    _require_all(where, checks)


def _version(client) -> str | None:  # type: ignore[no-untyped-def]
    try:
        return client.version()
    except Exception:  # noqa: BLE001 - the reason is still written when /version fails
        return None


@pytest.mark.parametrize("sample", SAMPLES, ids=[s.id for s in SAMPLES])
def test_answer_held_through_run(sample, qualify_ask, qualify_run, qualify_record, qualify_repetition):
    where = f"sample {sample.id}, repetition {qualify_repetition}"
    messages = list(sample.messages)
    key = qualify_ask.key(messages, **sample.params)
    earlier = answers_to(qualify_run.run_dir, key)
    qualify_record.props(case=sample.id, earlier_answers=len(earlier))
    if not earlier:
        # First in the run to ask it (an xdist worker, a -k selection): ask it the timing path's
        # way first, so the answer is always held to another.
        qualify_ask(messages, check_finish=False, stream=True, salt_suffix="-held-first", journal_role=HELD,
                    **sample.params)
        earlier = answers_to(qualify_run.run_dir, key)
    answer = qualify_ask(messages, check_finish=False, salt_suffix="-held", journal_role=HELD, **sample.params)
    now = RecordedAnswer("now", False, answer.content, parsed_calls(answer.tool_calls), answer.finish_reason)
    require(check_same_answers(now, earlier), where)


@pytest.mark.qualify_reads("context")
def test_timed_answer_held(lane, qualify_sizer, qualify_ask, qualify_profile, qualify_run, qualify_record,
                           qualify_salt, qualify_repetition):
    """TEST01 on the timing phase: the context module's timed answer (streamed, measured, graded by
    its needle contract only) equals the same request's answer asked without streaming. A server
    that answers long streamed prompts on another path (another model, another build behind the
    route) gives itself away here even where both answers pass the needle grader."""
    where = f"{lane.name} lane, repetition {qualify_repetition}"
    limits = qualify_profile.limits
    # The context module's own request, rebuilt: same seed, and the run's sizer's record of the
    # lane's sizing (sized here first when this item comes before the lane: the lane then reuses it).
    plan = lane_plan(qualify_run.run_id, [x.name for x in limits.lanes], lane.name, qualify_repetition)
    with sizing(where, "the lane"):
        sized = qualify_sizer.lane(plan, lane.prompt_tokens, limits.lane_tolerance_tokens)
    messages = sized.messages
    timeout_s = qualify_profile.timeouts.for_prompt(lane.prompt_tokens)
    timed = timed_answers(qualify_run.run_dir, qualify_ask.key(messages))
    if timed:
        # The timed request's own cache salt: the re-ask is then the very same request but for
        # streaming, and a prefix cache may serve its prompt (a 32K prefill is CPU minutes on a CPU
        # vLLM; TEST01 is about the output, not the time). Safe for the lane's no-cache rule: the lane
        # was asked, measured and its usage.cached_tokens judged before its answer reached the
        # journal, and a prefix hit under this salt is this item's, never the lane's (under xdist a
        # lane running meanwhile counts the server's hits as shared, and judges its own usage).
        answer_of_lane, salt = timed[0]
        earlier = [answer for answer, _ in timed]
        source = answer_of_lane.test
    else:
        # The lane has not answered yet (another xdist worker), or is not in this run: ask it the
        # timing path's way under this item's own fresh salt, so the lane (if it comes) keeps its own
        # salt and its cold prefill; the run-end row holds the lane's answer when it comes, and says
        # so when it never does.
        salt = qualify_salt + "-timed"
        own = qualify_ask(messages, check_finish=False, stream=True, cache_salt=salt, timeout_s=timeout_s,
                          journal_role=REASKED)
        earlier = [RecordedAnswer("this item's own stream", True, own.content, parsed_calls(own.tool_calls),
                                  own.finish_reason)]
        source = "this item's own stream (the lane's timed answer is held at the end of the run)"
    qualify_record.props(haystack_seed=plan.seed, sized_prompt_tokens=sized.tokens, tokenize_calls=sized.calls,
                         timed_answer_from=source)
    answer = qualify_ask(messages, check_finish=False, cache_salt=salt, timeout_s=timeout_s, journal_role=REASKED)
    now = RecordedAnswer("now", False, answer.content, parsed_calls(answer.tool_calls), answer.finish_reason)
    verdict = check_same_answers(now, earlier)
    if not verdict.ok:
        verdict = verdict.reworded(f"the timed request asked again without streaming answers otherwise: {verdict.reason}")
    require(verdict, where)


def test_no_result_cache(qualify_client, qualify_sizer, qualify_ask, qualify_profile, qualify_run, qualify_record,
                        qualify_repetition):
    where = f"repetition {qualify_repetition}"
    rules = qualify_profile.integrity
    limits = qualify_profile.limits
    size = rules.cache_probe_tokens or limits.smallest_lane.prompt_tokens
    calls_before = qualify_sizer.calls

    tolerance = max(limits.lane_tolerance_tokens // 2, 8)

    def probe(name: str) -> Sized:
        # Re-seeded per repetition: counted the first time, computed from the learned rate after
        # (its own answer's usage proves it; the probe's exact size decides nothing).
        plan = plan_haystack(haystack_seed(qualify_run.run_id, "integrity", name, qualify_repetition), 0.5)
        build = Haystack(plan).build
        with sizing(where, "the cache probe"):
            return qualify_sizer.about(
                f"cache probe {plan.seed} {size}±{tolerance}", f"cache probe {size}±{tolerance}", build, size,
                lambda: size_to_tokens(build, qualify_sizer.count, size, tolerance=tolerance, max_calls=6,
                                       rate=qualify_sizer.rate))

    # A computed probe is proven by its answer's usage within 5% of its size: the probe's exact size
    # decides nothing, and a re-seeded haystack of a thousand tokens varies by a few percent at the
    # same length (a tighter proof refuted such probes and counted them again, repetition after repetition).
    proof_tolerance = max(tolerance, size // 20)

    def ask_fresh(sized: Sized, suffix: str):  # type: ignore[no-untyped-def]
        answer = qualify_ask(sized.messages, check_finish=False, salt_suffix=suffix, timeout_s=timeout_s)
        qualify_sizer.confirm(sized, answer.prompt_tokens, proof_tolerance)
        return answer

    timeout_s = qualify_profile.timeouts.for_prompt(size)
    probes = [probe("a"), probe("b")]
    prompts = [p.messages for p in probes]
    # Not streamed: the end-to-end time is what a cache shortens, and usage always comes.
    fresh = [ask_fresh(probes[0], "-a"), ask_fresh(probes[1], "-b")]
    before = _metrics(qualify_client)
    repeats = [qualify_ask(prompts[0], check_finish=False, salt_suffix="-repeat", timeout_s=timeout_s)]
    engine = _engine_prompt_tokens(qualify_client, before, repeats[0].prompt_tokens)
    ratio_min = rules.repeat_e2e_ratio_min
    if too_fast([r.timeline.e2e_s for r in repeats], [a.timeline.e2e_s for a in fresh], ratio_min):
        # One round can be noise (a busy machine slows both fresh requests): a cache is fast every
        # time, so a second round — a third fresh prompt, the repeat once more — must agree.
        fresh.append(ask_fresh(probe("c"), "-c"))
        repeats.append(qualify_ask(prompts[0], check_finish=False, salt_suffix="-repeat2", timeout_s=timeout_s))
    fresh_s = [a.timeline.e2e_s for a in fresh]
    repeat_s = [r.timeline.e2e_s for r in repeats]
    qualify_record.props(probe_tokens=size, fresh_e2e_s=",".join(f"{t:.4f}" for t in fresh_s),
                         repeat_e2e_s=",".join(f"{t:.4f}" for t in repeat_s), rounds=len(repeats),
                         repeat_ratio=round(max(repeat_s) / min(fresh_s), 4),
                         repeat_ratio_min=ratio_min, prefix_cache_rule=rules.prefix_cache)
    qualify_record.props(engine_prompt_tokens="no /metrics" if engine is None else engine,
                         tokenize_calls=qualify_sizer.calls - calls_before)
    require(check_no_result_cache([a.cached_tokens for a in (*fresh, *repeats)], repeat_s, fresh_s, ratio_min,
                                  salted=rules.prefix_cache == "salted", prompt_tokens=repeats[0].prompt_tokens,
                                  engine_prompt_tokens=engine), where)


# A server may publish a request's counts a moment after its answer: wait this long for them.
METRICS_SETTLE_S = 3.0


def _engine_prompt_tokens(client, before, prompt_tokens: int | None) -> float | None:
    """The prompt tokens the server counted since ``before`` (None without metrics), polled until
    they cover the repeat or ``METRICS_SETTLE_S`` has passed."""
    if before is None:
        return None
    deadline = time.monotonic() + METRICS_SETTLE_S
    while True:
        after = _metrics(client)
        counted = delta(before, after).prompt_tokens if after is not None else None
        if counted is None or counted >= (prompt_tokens or 0) or time.monotonic() > deadline:
            return counted
        time.sleep(0.2)


def _metrics(client):
    """The server's ``/metrics`` now, or None where it has none (a router in front of it)."""
    try:
        return parse(client.metrics_text())
    except (EndpointError, MetricsParseError):
        return None
