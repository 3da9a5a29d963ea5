"""Protocol module 3 — context retrieval.

Per lane and repetition: a fresh haystack (seeded by run, lane and repetition) sized to the lane in
the server's own tokens (``/tokenize``), a target needle and distractor needles of the same form,
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
    qualify_record.props(tokenize_calls=sized.calls, sized_prompt_tokens=sized.tokens)

    needles = {f"{'target' if n.target else 'distractor'} {n.key}": n.value for n in (plan.target, *plan.distractors)}
    answer = qualify_ask(sized.messages, stream=True, timeout_s=qualify_profile.timeouts.for_prompt(lane.prompt_tokens),
                         journal_role=TIMED, marks=needles)

    prompt_tokens = answer.prompt_tokens
    if prompt_tokens is None:
        fail(where, "the server reported no usage.prompt_tokens, so the lane's size cannot be verified")
    if abs(prompt_tokens - lane.prompt_tokens) > tolerance:
        fail(where, f"prompt has {prompt_tokens} tokens; the lane is {lane.prompt_tokens} ± {tolerance}")
    cached = answer.cached_tokens  # recorded with the answer's timing
    if cached:
        fail(where, f"{cached} of {prompt_tokens} prompt tokens came from the prefix cache despite a fresh haystack and cache_salt")
    require(grade_needle(answer.content, plan.target.value, plan.distractor_values, key=plan.target.key,
                         contract=plan.contract), where)
