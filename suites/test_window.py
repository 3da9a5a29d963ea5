"""Protocol module 4 — window bracket.

A prompt of exactly window − answer budget tokens (sized with the server's ``/tokenize``) is
answered; a prompt one token over the window is refused with HTTP 400 and an error naming the
limit, after which the server is still serving (:mod:`pytest_qualify.server.liveness`).

A tokenizer may not be able to hit a count exactly (one more filler piece adding two tokens); the
prompt is then the nearest on the correct side, at most ``SLACK_TOKENS`` away, and its size is
recorded. Hangs and a dead server surface as the run's timeout / dead-server reasons.
"""

from __future__ import annotations

import pytest

from pytest_qualify.server import liveness
from pytest_qualify.checks import fail, held, require, sizing
from pytest_qualify.client.errors import EndpointError, error_message
from pytest_qualify.graders.window import check_overwindow_refusal
from pytest_qualify.tasks.haystack import (
    Haystack, Sized, SizingError, haystack_seed, pad_to_tokens, plan_haystack, size_to_tokens, unit_rate,
)

pytestmark = pytest.mark.qualify_module("window")

SLACK_TOKENS = 2
MAX_TOKENIZE_CALLS = 10
PAD_CALLS = 6


def _budget(profile) -> int:
    return profile.limits.answer_budget_tokens  # what qualify_ask sends as max_tokens


def _sized_prompt(client, run_id: str, label: str, repetition: int, target: int, side: str, where: str) -> Sized:
    plan = plan_haystack(haystack_seed(run_id, "window", label, repetition), 0.5, distractors=0)
    build = Haystack(plan).build
    with sizing(where):
        try:
            return size_to_tokens(build, client.count_chat_tokens, target, side=side, max_calls=MAX_TOKENIZE_CALLS,
                                  rate=unit_rate(client.base_url))
        except SizingError as exc:
            if exc.closest is not None and abs(exc.closest.tokens - target) <= SLACK_TOKENS:
                return exc.closest
            if exc.closest is None:
                raise
            # A tokenizer that splits filler words into several tokens (a small vocabulary) skips
            # the target with whole pieces: pad the nearest shorter prompt with one-token words.
            return pad_to_tokens(build, client.count_chat_tokens, target, exc.closest, max_calls=PAD_CALLS)
    raise AssertionError("unreachable")


def test_prompt_that_fits_is_answered(qualify_client, qualify_ask, qualify_profile, qualify_run, qualify_record, qualify_repetition):
    window, budget = qualify_profile.limits.window_tokens, _budget(qualify_profile)
    target = window - budget
    where = f"window {window}, repetition {qualify_repetition}: prompt of window − answer budget ({target} tokens)"
    sized = _sized_prompt(qualify_client, qualify_run.run_id, "fit", qualify_repetition, target, "below", where)
    qualify_record.props(window_tokens=window, fit_prompt_tokens=sized.tokens, tokenize_calls=sized.calls)
    try:
        # Recorded with its visible content and finish "stop".
        answer = qualify_ask(sized.messages, timeout_s=qualify_profile.timeouts.for_prompt(sized.tokens))
    except EndpointError as exc:
        fail(where, f"refused with HTTP {exc.status} although {sized.tokens} + {budget} answer tokens fit the window: "
                    f"{error_message(exc.body)[:200]!r}")
    if answer.prompt_tokens is not None and answer.prompt_tokens > target:
        fail(where, f"the server counted {answer.prompt_tokens} prompt tokens, /tokenize {sized.tokens}")
    held(where, "answered")


def test_prompt_over_window_is_refused(qualify_client, qualify_profile, qualify_run, qualify_record, qualify_salt, qualify_repetition):
    window, budget = qualify_profile.limits.window_tokens, _budget(qualify_profile)
    target = window + 1
    where = f"window {window}, repetition {qualify_repetition}"
    sized = _sized_prompt(qualify_client, qualify_run.run_id, "over", qualify_repetition, target, "above", where)
    qualify_record.props(window_tokens=window, over_prompt_tokens=sized.tokens, tokenize_calls=sized.calls)
    status, message = None, ""
    try:
        # A probe that must be refused, not a question: sent raw, its answer (if any) kept as a property.
        answer = qualify_client.chat(sized.messages, max_tokens=budget, temperature=0, cache_salt=qualify_salt,
                                     timeout_s=qualify_profile.timeouts.for_prompt(sized.tokens))
        qualify_record.props(overwindow_answer=(answer.content or "")[:200])
    except EndpointError as exc:
        status, message = exc.status, error_message(exc.body) or str(exc)
    qualify_record.props(overwindow_status=status if status is not None else 200, overwindow_message=message[:300])
    require(check_overwindow_refusal(status, message, window, sized.tokens), where)

    live = liveness.check(qualify_client, qualify_profile, after="the over-window refusal")
    qualify_record.props(**live.properties())
    if not live.ok:
        fail(where, live.reason)
