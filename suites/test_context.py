"""Protocol module 3 — context retrieval.

Per lane and repetition: a fresh haystack (seeded by run, lane and repetition) sized to the lane in
the server's own tokens (``/tokenize`` the first time a lane's size is asked for; after that computed
from the server's learned tokens per filler unit and proven by the answer's ``usage.prompt_tokens``), a target needle and distractor needles of the same form,
the target at a depth swept across lanes and repetitions. The streamed answer must be the target's
exact value (the question's contract: the value alone, ``fixtures/haystack/needles.toml``); the prompt must land within the lane's tolerance; with a
fresh cache salt, no prompt token may come from the prefix cache.
"""

from __future__ import annotations

import pytest

from pytest_qualify.checks import fail, require, sizing
from pytest_qualify.evidence.answers import TIMED
from pytest_qualify.graders.needle import grade_needle
from pytest_qualify.tasks.haystack import lane_plan
from pytest_qualify.hooks import state_of

pytestmark = pytest.mark.qualify_module("context")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "lane" in metafunc.fixturenames:
        state = state_of(metafunc.config)
        lanes = state.profile.limits.lanes if state is not None else ()
        metafunc.parametrize("lane", lanes, ids=[lane.name for lane in lanes])


def test_context_retrieval(lane, qualify_sizer, qualify_ask, qualify_profile, qualify_run, qualify_record, qualify_repetition):
    where = f"{lane.name} lane, repetition {qualify_repetition}"
    limits = qualify_profile.limits
    # The integrity module rebuilds the smallest lane's request with the same two calls and asks it
    # again (suites/test_integrity.py, test_timed_answer_held): change them together. The run's
    # sizer sizes a lane once; the rebuild gets the same messages.
    plan = lane_plan(qualify_run.run_id, [x.name for x in limits.lanes], lane.name, qualify_repetition)
    qualify_record.props(
        haystack_seed=plan.seed, needle_template=plan.template.id, needle_key=plan.target.key,
        needle_depth=plan.target.depth, distractors=len(plan.distractors),
    )
    tolerance = limits.lane_tolerance_tokens
    with sizing(where, "the lane"):
        sized = qualify_sizer.lane(plan, lane.prompt_tokens, tolerance)
    calls = sized.calls

    needles = {f"{'target' if n.target else 'distractor'} {n.key}": n.value for n in (plan.target, *plan.distractors)}
    timeout_s = qualify_profile.timeouts.for_prompt(lane.prompt_tokens)
    how = "counted" if sized.counted else "computed, proven by usage.prompt_tokens"
    qualify_record.props(tokenize_calls=calls, sized_prompt_tokens=sized.tokens, lane_sizing=how)
    # The answer's finish state is checked after its size: a computed size is proven (or refuted) by
    # the answer's usage whatever the answer's words, and the sizing is on record whatever fails.
    answer = qualify_ask(sized.messages, stream=True, timeout_s=timeout_s, journal_role=TIMED, marks=needles,
                         check_finish=False)
    if not qualify_sizer.confirm(sized, answer.prompt_tokens, tolerance):
        # A lane of a size counted before is computed from the learned rate (no /tokenize call) and
        # proven by its answer's usage; this haystack's filler counted otherwise: the harness's miss,
        # not the server's. Size it by count and ask again, under its own salt (no shared prefix).
        how = f"computed as {sized.tokens}, refuted by usage.prompt_tokens {answer.prompt_tokens}; counted"
        with sizing(where, "the lane"):
            sized = qualify_sizer.lane(plan, lane.prompt_tokens, tolerance, counted=True)
        calls += sized.calls
        qualify_record.retime()
        answer = qualify_ask(sized.messages, stream=True, timeout_s=timeout_s, journal_role=TIMED, marks=needles,
                             salt_suffix="-counted", check_finish=False)
        qualify_record.props(tokenize_calls=calls, sized_prompt_tokens=sized.tokens, lane_sizing=how)

    prompt_tokens = answer.prompt_tokens
    if prompt_tokens is None:
        fail(where, "the server reported no usage.prompt_tokens, so the lane's size cannot be verified")
    if abs(prompt_tokens - lane.prompt_tokens) > tolerance:
        fail(where, f"prompt has {prompt_tokens} tokens; the lane is {lane.prompt_tokens} ± {tolerance}")
    cached = answer.cached_tokens  # recorded with the answer's timing
    if cached:
        fail(where, f"{cached} of {prompt_tokens} prompt tokens came from the prefix cache despite a fresh haystack and cache_salt")
    qualify_record.finish(answer)
    require(grade_needle(answer.content, plan.target.value, plan.distractor_values, key=plan.target.key,
                         contract=plan.contract), where)
