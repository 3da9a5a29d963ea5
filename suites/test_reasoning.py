"""Protocol module 10 — reasoning leakage.

With thinking disabled in the profile: no reasoning field (``reasoning_content`` / ``reasoning``),
no ``<think>``-style or template markers in the content, no reasoning tokens in the usage — streamed and not. A caller's ``chat_template_kwargs.enable_thinking`` must have no
effect unless the profile says thinking is overridable: the same request is asked without it first,
and the answer with it must show what that one shows (no reasoning tokens, no reasoning text, no
whitespace reasoning the first answer did not have, no visible answer lost to a budget spent on
reasoning). When it took effect, the reason says so.

With thinking enabled the contract turns around: reasoning may be returned, but only in its own
field, never in the visible content; an answer that returns no reasoning at all (no field, no
reasoning tokens) while its content holds working besides the prompt's answer slot, or on the
answer's own line ("Let me think step by step: ... The answer is: 42"), is a leak (the parser
stripped or missed the markers). Nothing is stripped before grading.

The module judges what the engine leaks, not the visible working a prompt invited: each prompt's
answer contract (``fixtures/reasoning.toml``) is stated and its slot checked, and that check is
recorded (``answer_check``), never deciding.
"""

from __future__ import annotations

import pytest

from pytest_qualify.checks import require
from pytest_qualify.tasks.fixture_data import reasoning_prompts
from pytest_qualify.graders.reasoning import check_no_reasoning, check_override_had_no_effect, check_reasoning_separated

pytestmark = pytest.mark.qualify_module("reasoning")

PROMPTS = reasoning_prompts()
STREAM = pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])


def _reasoning_parser(args: tuple[str, ...]) -> str | None:
    """The ``--reasoning-parser`` a launched recipe names (None in attach mode: not known here)."""
    for i, arg in enumerate(args):
        if arg.startswith("--reasoning-parser="):
            return arg.split("=", 1)[1]
        if arg == "--reasoning-parser" and i + 1 < len(args):
            return args[i + 1]
    return None


def _grade(answer, thinking_on: bool, where: str, prompt, parser: str | None) -> None:
    if thinking_on:
        # No reasoning back at all while the content holds working besides its slot is a leak too:
        # a parser that stripped or missed the markers left the reasoning in the content.
        require(check_reasoning_separated(answer.content, answer.reasoning, answer.reasoning_tokens,
                                          contract=prompt.contract, parser=parser), where)
    else:
        require(check_no_reasoning(answer.content, answer.reasoning, answer.reasoning_tokens), where)


def _record(qualify_record, answer, prompt) -> None:
    visible = prompt.grade(answer.content)
    qualify_record.props(
        reasoning_chars=len(answer.reasoning or ""),
        reasoning_tokens=answer.reasoning_tokens if answer.reasoning_tokens is not None else "not reported",
        answer_check="ok" if visible.ok else visible.reason,  # recorded: the leak decides, not the answer
    )


def _leak_check(qualify_record, thinking_on: bool, where: str, prompt, parser: str | None):
    """The module's own check, handed to qualify_ask so it runs before the finish-state check."""

    def check(answer) -> None:
        _record(qualify_record, answer, prompt)
        _grade(answer, thinking_on, where, prompt, parser)

    return check


@STREAM
@pytest.mark.parametrize("prompt", PROMPTS, ids=[p.id for p in PROMPTS])
def test_no_reasoning_leak(prompt, stream, qualify_ask, qualify_profile, qualify_record, qualify_repetition):
    thinking = qualify_profile.thinking
    where = f"prompt {prompt.id}, {'streamed' if stream else 'not streamed'}, repetition {qualify_repetition}, thinking {'enabled' if thinking.enabled else 'disabled'}"
    # The leak is graded before the finish state: reasoning that used up the budget is a leak first.
    qualify_ask(prompt.prompt, stream=stream,
                grade=_leak_check(qualify_record, thinking.enabled, where, prompt, _reasoning_parser(qualify_profile.serve.args)))


@STREAM
def test_thinking_override(stream, qualify_ask, qualify_profile, qualify_record, qualify_repetition):
    thinking = qualify_profile.thinking
    requested = not thinking.enabled  # the caller asks for the opposite of the profile
    effective = requested if thinking.overridable else thinking.enabled
    where = (f"chat_template_kwargs enable_thinking={requested} with thinking {'enabled' if thinking.enabled else 'disabled'}"
             f" and {'' if thinking.overridable else 'not '}overridable, {'streamed' if stream else 'not streamed'}, "
             f"repetition {qualify_repetition}")
    prompt = PROMPTS[0]
    # Recorded before asking: an answer that fails its finish state still shows what was asked.
    qualify_record.props(thinking_requested=requested, thinking_expected=effective)
    if thinking.overridable:
        qualify_ask(prompt.prompt, stream=stream, chat_template_kwargs={"enable_thinking": requested},
                    grade=_leak_check(qualify_record, effective, where, prompt, _reasoning_parser(qualify_profile.serve.args)))
        return
    # Not overridable: what the override may not change is what the same request shows without it
    # (a disabled template's empty think block is whitespace in both, and no leak).
    # The baseline is a measurement, not this item's answer: its own leak or finish state is
    # test_no_reasoning_leak's to judge (on a model that writes to the budget it ends "length", and
    # grading it here would hide whether the override took effect).
    baseline = qualify_ask(prompt.prompt, stream=stream, check_finish=False)
    qualify_record.props(baseline_reasoning_chars=len(baseline.reasoning or ""), baseline_finish_reason=baseline.finish_reason)

    def override_check(answer) -> None:
        _record(qualify_record, answer, prompt)
        # Graded before the finish state: a budget spent on reasoning is the override taking effect.
        require(check_override_had_no_effect(answer, baseline, requested), where)
        _grade(answer, effective, where, prompt, _reasoning_parser(qualify_profile.serve.args))

    qualify_ask(prompt.prompt, stream=stream, chat_template_kwargs={"enable_thinking": requested}, grade=override_check)
