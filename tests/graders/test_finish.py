"""The shared finish-state check: visible content and an allowed finish_reason, on every answer."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_qualify.client.answer import Answer, ToolCall
from pytest_qualify.graders.finish import check_finish


@dataclass(frozen=True)
class Fake:
    content: str | None
    finish_reason: str | None
    tool_calls: tuple = ()
    reasoning: str | None = None
    usage: dict = field(default_factory=dict)

    @property
    def completion_tokens(self):
        return self.usage.get("completion_tokens")


CALL = ToolCall("get_weather", '{"city": "Oslo"}', "call_1")


def test_plain_answer_with_stop_passes():
    verdict = check_finish(Fake("Jupiter", "stop"))
    assert verdict.ok and "stop" in verdict.reason


def test_real_answer_record_is_accepted():
    answer = Answer(content="Paris", reasoning=None, tool_calls=(), finish_reason="stop",
                    usage={"completion_tokens": 2}, streamed=True)
    assert check_finish(answer).ok


def test_length_fails_with_budget_exhausted():
    verdict = check_finish(Fake("Jupiter is the larg", "length", usage={"completion_tokens": 256}))
    assert not verdict.ok
    assert verdict.reason == "answer budget exhausted (finish_reason 'length' after 256 completion tokens)"


def test_length_fails_on_tool_turns_too():
    assert "answer budget exhausted" in check_finish(Fake(None, "length", (CALL,)), expect_tool=True).reason


@pytest.mark.parametrize("content", [None, "", "  \n "])
def test_empty_content_fails(content):
    verdict = check_finish(Fake(content, "stop"))
    assert not verdict.ok and verdict.reason.startswith("empty answer")


def test_empty_content_with_reasoning_says_where_the_output_went():
    verdict = check_finish(Fake("", "stop", reasoning="Let me think..."))
    assert "reasoning field" in verdict.reason


def test_missing_finish_reason_fails():
    assert "no finish_reason" in check_finish(Fake("Paris", None)).reason


@pytest.mark.parametrize("finish", ["content_filter", "abort", "error", "tool_calls"])
def test_other_finish_reasons_fail_on_plain_answers(finish):
    verdict = check_finish(Fake("Paris", finish, (CALL,) if finish == "tool_calls" else ()))
    assert not verdict.ok and repr(finish) in verdict.reason


def test_tool_turn_with_calls_and_no_content_passes():
    assert check_finish(Fake(None, "tool_calls", (CALL,)), expect_tool=True).ok
    assert check_finish(Fake("", "stop", (CALL,)), expect_tool=True).ok


def test_tool_turn_answered_in_text_needs_content_and_stop():
    assert check_finish(Fake("No tool fits; it is 12 degrees.", "stop"), expect_tool=True).ok
    assert not check_finish(Fake("", "stop"), expect_tool=True).ok


def test_tool_calls_finish_without_calls_fails():
    assert "without any tool call" in check_finish(Fake("", "tool_calls"), expect_tool=True).reason


def test_calls_on_a_plain_turn_fail():
    assert not check_finish(Fake("Sure", "stop", (CALL,))).ok


visible = st.text(min_size=1).filter(lambda s: s.strip())
@given(visible, st.booleans())
def test_property_any_visible_content_with_stop_passes(content, tool_turn):
    assert check_finish(Fake(content, "stop"), expect_tool=tool_turn).ok
@given(st.one_of(st.none(), st.text(alphabet=" \n\t\r\u00a0"), visible), st.booleans(), st.integers(1, 10_000))
def test_property_length_always_fails(content, tool_turn, tokens):
    verdict = check_finish(Fake(content, "length", usage={"completion_tokens": tokens}), expect_tool=tool_turn)
    assert not verdict.ok and f"after {tokens} completion tokens" in verdict.reason
@given(st.text(alphabet=" \n\t\r\u00a0\u2003"))
def test_property_whitespace_only_is_empty(content):
    assert check_finish(Fake(content, "stop")).reason.startswith("empty answer")
@given(st.text(min_size=1).filter(lambda s: s not in ("stop", "tool_calls")), visible)
def test_property_unknown_finish_reasons_fail(finish, content):
    assert not check_finish(Fake(content, finish), expect_tool=True).ok
