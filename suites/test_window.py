"""Protocol module 4 — window bracket.

A prompt of exactly window − answer budget tokens (sized with the server's ``/tokenize``) is
answered; a prompt one token over the window is refused with HTTP 400 and an error naming the
limit, after which the server is still serving (:mod:`pytest_qualify.server.liveness`).

A tokenizer may not be able to hit a count exactly (one more filler piece adding two tokens); the
prompt is then the nearest on the correct side, at most ``SLACK_TOKENS`` away, and its size is
recorded. Hangs and a dead server surface as the run's timeout / dead-server reasons.

The two edges are one haystack per run (a token count is a property of the prompt, so every
repetition sends the prompts sized once, each repetition under its own cache salt). The fitting
prompt is computed from the run's calibrated rate over its own frame (``tasks/sizing.py``: no
``/tokenize`` of its size) and proven exact by its answer's ``usage.prompt_tokens``; an answer that
refutes it (or a refusal of it) was the harness's miss, and the prompt is then searched by count and
asked again. The over-window one is the fitting one with one-token pad words until the server counts
exactly window + 1 (usually one ``/tokenize`` call): a refusal has no usage, and vLLM's refusal
states only a lower bound of the prompt's size; where it states the exact size, that proves it.
"""

from __future__ import annotations

import pytest

from pytest_qualify.server import liveness
from pytest_qualify.checks import fail, held, require, sizing
from pytest_qualify.client.errors import EndpointError, error_message
from pytest_qualify.graders.window import check_overwindow_refusal
from pytest_qualify.tasks.robustness import OVER_WINDOW_REFUSED, Proof, record_proof
from pytest_qualify.tasks.sizing import refusal_tokens
from pytest_qualify.tasks.haystack import (
    Haystack, Sized, SizingError, haystack_seed, pad_to_tokens, plan_haystack, size_to_tokens,
)

pytestmark = pytest.mark.qualify_module("window")

SLACK_TOKENS = 2
MAX_TOKENIZE_CALLS = 10
PAD_CALLS = 6


def _budget(profile) -> int:
    return profile.limits.answer_budget_tokens  # what qualify_ask sends as max_tokens


def _fitting(sizer, run_id: str, target: int, where: str, *, counted: bool = False) -> Sized:
    """The prompt of exactly ``target`` tokens (or the nearest below, at most ``SLACK_TOKENS``),
    sized once per run: computed (its answer proves it), or ``counted`` (searched with ``/tokenize``,
    after an answer refuted the computed one; every later item uses that one)."""
    plan = plan_haystack(haystack_seed(run_id, "window", "fit"), 0.5, distractors=0)
    build = Haystack(plan).build
    key = f"window fit {plan.seed} {target}"

    def search() -> Sized:
        try:
            return size_to_tokens(build, sizer.count, target, side="below", max_calls=MAX_TOKENIZE_CALLS,
                                  rate=sizer.rate)
        except SizingError as exc:
            if exc.closest is not None and abs(exc.closest.tokens - target) <= SLACK_TOKENS:
                return exc.closest
            if exc.closest is None:
                raise
            # A tokenizer that splits filler words into several tokens (a small vocabulary) skips
            # the target with whole pieces: pad the nearest shorter prompt with one-token words.
            return pad_to_tokens(build, sizer.count, target, exc.closest, max_calls=PAD_CALLS)

    with sizing(where):
        return sizer.about(key, f"window fit {target}", build, target, search, exact=True,
                           counted=counted or sizer.recorded(f"{key} counted"))


def _over(sizer, run_id: str, fit_target: int, target: int, where: str) -> Sized:
    """The fitting prompt padded with one-token words until the server counts ``target`` (or the
    nearest above, at most ``SLACK_TOKENS``), sized once per run."""
    fit = _fitting(sizer, run_id, fit_target, where)
    plan = plan_haystack(haystack_seed(run_id, "window", "fit"), 0.5, distractors=0)
    build = Haystack(plan).build

    def pad() -> Sized:
        try:
            return pad_to_tokens(build, sizer.count, target, fit, max_calls=PAD_CALLS)
        except SizingError as exc:
            if exc.closest is not None and target <= exc.closest.tokens <= target + SLACK_TOKENS:
                return exc.closest
            # Pad words that do not add one token each: search the filler from above instead.
            return size_to_tokens(build, sizer.count, target, side="above", max_calls=MAX_TOKENIZE_CALLS,
                                  rate=sizer.rate)

    with sizing(where):
        return sizer.sized(f"window over {plan.seed} {target}", pad, build)


def test_prompt_that_fits_is_answered(qualify_sizer, qualify_ask, qualify_profile, qualify_run, qualify_record,
                                      qualify_repetition):
    window, budget = qualify_profile.limits.window_tokens, _budget(qualify_profile)
    target = window - budget
    where = f"window {window}, repetition {qualify_repetition}: prompt of window − answer budget ({target} tokens)"
    sized = _fitting(qualify_sizer, qualify_run.run_id, target, where)
    calls = sized.calls
    how = "counted" if sized.counted else "computed, proven by usage.prompt_tokens"
    qualify_record.props(window_tokens=window, fit_prompt_tokens=sized.tokens, tokenize_calls=calls, fit_sizing=how)
    timeout_s = qualify_profile.timeouts.for_prompt(target)
    suffix = ""
    if not sized.counted:
        # A computed size is proven (or refuted) by the answer's usage before anything else is judged:
        # a refusal or a count off the target is the harness's miss, not the server's.
        refused: EndpointError | None = None
        try:
            answer = qualify_ask(sized.messages, timeout_s=timeout_s, check_finish=False)
        except EndpointError as exc:
            refused = exc
        if refused is None and qualify_sizer.confirm(sized, answer.prompt_tokens, SLACK_TOKENS, below_only=True):
            qualify_record.finish(answer)
            _judge_fit(answer, sized, target, where)
            return
        seen = (f"refused with HTTP {refused.status}" if refused is not None
                else f"refuted by usage.prompt_tokens {answer.prompt_tokens}")
        how = f"computed as {sized.tokens}, {seen}; counted"
        sized = _fitting(qualify_sizer, qualify_run.run_id, target, where, counted=True)
        calls += sized.calls
        suffix = "-counted"  # asked again under its own salt: no shared prefix with the first
        qualify_record.retime()
        qualify_record.props(fit_prompt_tokens=sized.tokens, tokenize_calls=calls, fit_sizing=how)
    try:
        # Recorded with its visible content and finish "stop".
        answer = qualify_ask(sized.messages, timeout_s=timeout_s, salt_suffix=suffix)
    except EndpointError as exc:
        fail(where, f"refused with HTTP {exc.status} although {sized.tokens} + {budget} answer tokens fit the window: "
                    f"{error_message(exc.body)[:200]!r}")
    _judge_fit(answer, sized, target, where)


def _judge_fit(answer, sized: Sized, target: int, where: str) -> None:  # type: ignore[no-untyped-def]
    if answer.prompt_tokens is not None and answer.prompt_tokens > target:
        fail(where, f"the server counted {answer.prompt_tokens} prompt tokens, /tokenize {sized.tokens}")
    held(where, "answered")


def test_prompt_over_window_is_refused(qualify_client, qualify_sizer, qualify_profile, qualify_run, qualify_record,
                                      qualify_salt, qualify_repetition, request):
    window, budget = qualify_profile.limits.window_tokens, _budget(qualify_profile)
    target = window + 1
    where = f"window {window}, repetition {qualify_repetition}"
    sized = _over(qualify_sizer, qualify_run.run_id, window - budget, target, where)
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
    stated = refusal_tokens(message)  # recorded, never graded: vLLM states a lower bound (docs/real-vllm.md)
    if stated is not None:
        qualify_record.props(overwindow_stated_tokens=stated[0], overwindow_stated_exact=stated[1])
    verdict = check_overwindow_refusal(status, message, window, sized.tokens)
    live = liveness.check(qualify_client, qualify_profile, after="the over-window refusal") if verdict.ok else None
    if live is not None:
        qualify_record.props(**live.properties())
    # The robustness module's over-window class relies on this proof (one giant prompt, not two).
    proven = verdict.ok and live is not None and live.ok
    detail = (f"{sized.tokens}-token prompt over the {window}-token window refused with HTTP {status}"
              + (", then still serving" if proven else f": {verdict.reason if not verdict.ok else live.reason}"))
    record_proof(qualify_run.run_dir, Proof(OVER_WINDOW_REFUSED, request.node.nodeid, proven, detail))
    qualify_record.props(proves=OVER_WINDOW_REFUSED)
    require(verdict, where)
    if not live.ok:
        fail(where, live.reason)
