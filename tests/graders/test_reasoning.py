"""Reasoning leakage: fields, markers and usage, judged on the content exactly as returned."""

from __future__ import annotations

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from pytest_qualify.graders.reasoning import check_no_reasoning, check_reasoning_separated, reasoning_markers


@pytest.mark.parametrize("content", ["Blue", "It arrives at 5 pm.", "8", "The answer: thinking about it is optional.", None, ""])
def test_clean_answers_pass(content):
    verdict = check_no_reasoning(content, None, None)
    assert verdict.ok, verdict.reason


def test_zero_reasoning_tokens_and_empty_field_pass():
    assert check_no_reasoning("Blue", "", 0).ok


@pytest.mark.parametrize(
    "content",
    [
        "<think>\nThe sky is blue.\n</think>\n\nBlue",
        "</think>Blue",
        "Blue<think></think>",
        "<THINK>x</THINK> Blue",
        "<thinking>hmm</thinking>Blue",
        "<|begin_of_thought|>x<|end_of_thought|>Blue",
        "[THINK]x[/THINK]Blue",
        "◁think▷x◁/think▷Blue",
        "<|channel|>analysis<|message|>x<|end|>Blue",
    ],
)
def test_markers_in_content_fail(content):
    verdict = check_no_reasoning(content, None, None)
    assert not verdict.ok and "reasoning markers in the visible content" in verdict.reason


def test_reasoning_field_fails_and_is_shown():
    verdict = check_no_reasoning("Blue", "The user asks about the sky.", None)
    assert not verdict.ok and "reasoning field populated" in verdict.reason and "The user asks" in verdict.reason


def test_reasoning_tokens_fail():
    verdict = check_no_reasoning("Blue", None, 37)
    assert not verdict.ok and "37 reasoning tokens" in verdict.reason


def test_all_problems_are_named_together():
    verdict = check_no_reasoning("<think>x</think>Blue", "x", 5)
    assert verdict.reason.count(";") == 2


def test_thinking_enabled_allows_the_field_but_not_markers():
    assert check_reasoning_separated("Blue", "The sky is blue.").ok
    assert check_reasoning_separated("Blue", None).ok
    assert not check_reasoning_separated("<think>x</think>Blue", "x").ok


plain = st.text(alphabet=st.characters(blacklist_characters="<>[]◁▷|:"), max_size=80)
marker = st.sampled_from(["<think>", "</think>", "<thinking>", "</ think>", "[THINK]", "<|begin_of_thought|>", "◁think▷"])
@given(plain)
def test_property_text_without_markers_passes(text):
    assume(not text.lstrip().lower().startswith(("thought", "reasoning", "chain of thought", "thinking process")))
    assert check_no_reasoning(text, None, None).ok
@given(plain, marker, plain, st.booleans())
def test_property_a_marker_anywhere_fails(before, mark, after, upper):
    mark = mark.upper() if upper else mark
    content = before + mark + after
    assert reasoning_markers(content)
    assert not check_no_reasoning(content, None, None).ok
    assert not check_reasoning_separated(content, "x").ok
@given(st.text(min_size=1).filter(lambda s: s.strip()), plain)
def test_property_any_reasoning_text_fails(reasoning, content):
    assume(not reasoning_markers(content))
    assert not check_no_reasoning(content, reasoning, None).ok
@given(st.integers(min_value=1, max_value=100_000))
def test_property_any_reasoning_tokens_fail(tokens):
    assert not check_no_reasoning("Blue", None, tokens).ok
@given(st.sampled_from(["Thinking Process", "thought process", "REASONING", "Chain of thought", "Thoughts", "Working"]),
       st.sampled_from(["", "**", "## "]), plain)
def test_property_prose_working_is_not_a_leak(word, decoration, rest):
    # Working written as prose is the visible answer to a prompt that asked for it ("Think it
    # through, then answer briefly"), not the engine's reasoning reaching the caller.
    content = f"{decoration}{word}:{decoration} {rest}"
    assert check_no_reasoning(content, None, None).ok
    assert check_reasoning_separated(content, "hidden reasoning").ok


def test_the_prompt_that_invites_working_keeps_a_working_answer_passing():
    # The module keeps a prompt that asks for visible working; its reference answer shows the
    # working as prose, and that is not a leak.
    from pytest_qualify.tasks.fixture_data import reasoning_prompts

    inviting = [p for p in reasoning_prompts() if "think it through" in p.text.lower()]
    assert inviting, "no reasoning prompt invites visible working"
    for prompt in inviting:
        assert "**Reasoning:**" in prompt.answer
        assert check_no_reasoning(prompt.answer, None, None).ok
