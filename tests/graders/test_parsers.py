"""The parsers module's exactness, parity and incrementality: what they must accept and reject."""

from __future__ import annotations

import pytest

from pytest_qualify.graders.parsers import (
    CaseOutcome, Expected, Seen, exactness, figures, grade_case, incremental, json_equal, parity,
)

CALL = ("get_weather", {"city": "Oslo", "days": 3})
ARGS = '{"city": "Oslo", "days": 3}'


def _seen(calls=(("get_weather", ARGS),), content=None, reasoning=None, finish="tool_calls", **stream):
    return Seen(content, reasoning, tuple(calls), finish, **stream)


@pytest.mark.parametrize("a, b", [
    (1, 1.0), (0, -0.0), ({"a": [1, {"b": None}]}, {"a": [1.0, {"b": None}]}), ("", ""), (10**20, float(10**20)),
])
def test_json_equal_accepts(a, b):
    assert json_equal(a, b) and json_equal(b, a)


@pytest.mark.parametrize("a, b", [
    (True, 1), (False, 0), (None, "null"), (None, 0), ("1", 1), ([1, 2], [2, 1]), ({"a": 1}, {"a": 1, "b": None}),
    ("Oslo", "oslo"), ("a", "a "), ({"a": [1]}, {"a": 1}),
])
def test_json_equal_rejects(a, b):
    assert not json_equal(a, b) and not json_equal(b, a)


ACCEPTED = [
    ("the same call", Expected((CALL,), None, None), _seen()),
    ("arguments in another key order and spacing", Expected((CALL,), None, None),
     _seen((("get_weather", '{"days":3,"city":"Oslo"}'),))),
    ("an integer written as a float", Expected((CALL,), None, None),
     _seen((("get_weather", '{"city": "Oslo", "days": 3.0}'),))),
    ("content beside the call with the template's line break", Expected((CALL,), "Checking.", None),
     _seen(content="Checking.\n")),
    ("no content as None or empty", Expected((CALL,), None, None), _seen(content="")),
    ("a reasoning split with the template's line breaks", Expected((), "Paris.", "Think."),
     _seen((), content="\n\nParis.", reasoning="\nThink.\n", finish="stop")),
    ("whitespace-only content, exactly", Expected((), "\n\n", None), _seen((), content="\n\n", finish="stop")),
    ("text starting like a tool call", Expected((), "<tool", None), _seen((), content="<tool", finish="stop")),
]

REJECTED = [
    ("another function", Expected((CALL,), None, None), _seen((("get_time", ARGS),)), "tool calls"),
    ("one argument shifted", Expected((CALL,), None, None),
     _seen((("get_weather", '{"city": "Oslo", "days": 4}'),)), ".days 4 instead of 3"),
    ("a boolean for a number", Expected((("f", {"n": 1}),), None, None), _seen((("f", '{"n": true}'),)), ".n"),
    ("a number as a string", Expected((("f", {"n": 1}),), None, None), _seen((("f", '{"n": "1"}'),)), ".n"),
    ("an argument missing", Expected((CALL,), None, None), _seen((("get_weather", '{"city": "Oslo"}'),)),
     ".days missing"),
    ("an argument added", Expected((CALL,), None, None),
     _seen((("get_weather", '{"city": "Oslo", "days": 3, "unit": "celsius"}'),)), "was not forced"),
    ("arguments that are not JSON", Expected((CALL,), None, None), _seen((("get_weather", '{"city": "Oslo"'),)),
     "not JSON"),
    ("a parallel call lost", Expected((CALL, CALL), None, None), _seen(), "tool calls"),
    ("finish stop after a call", Expected((CALL,), None, None), _seen(finish="stop"), "finish_reason"),
    ("finish tool_calls without a call", Expected((), "Hi.", None), _seen((), content="Hi."), "finish_reason"),
    ("the call's markup left in the content", Expected((CALL,), None, None),
     _seen(content="<tool_call>\n<function=get_weather>"), "markup"),
    ("the call in the content instead of tool_calls", Expected((CALL,), None, None),
     _seen((), content='<tool_call>{"name": "get_weather"}</tool_call>'), "tool calls"),
    ("reasoning left in the content", Expected((), "Paris.", "Think."),
     _seen((), content="<think>Think.</think>Paris.", finish="stop"), "reasoning"),
    ("the answer in the reasoning field", Expected((), "Paris.", "Think."),
     _seen((), content=None, reasoning="Think.</think>Paris.", finish="stop"), "reasoning"),
    ("reasoning where none was forced", Expected((), "Paris.", None),
     _seen((), content="Paris.", reasoning="Hmm.", finish="stop"), "where none was forced"),
    ("whitespace-only content dropped", Expected((), "\n\n", None), _seen((), content=None, finish="stop"), "content"),
    ("leading whitespace stripped", Expected((), "  Hi.", None), _seen((), content="Hi.", finish="stop"), "content"),
    ("content beside a call changed", Expected((CALL,), "Checking.", None), _seen(content="Checking"), "content"),
]


@pytest.mark.parametrize("what, expected, seen", ACCEPTED, ids=[a[0] for a in ACCEPTED])
def test_exactness_accepts(what, expected, seen):
    assert exactness(expected, seen) is None


@pytest.mark.parametrize("what, expected, seen, words", REJECTED, ids=[r[0] for r in REJECTED])
def test_exactness_rejects(what, expected, seen, words):
    problem = exactness(expected, seen)
    assert problem is not None and words in problem


def test_parity_holds_the_stream_to_the_plain_answer():
    plain = _seen(content="Checking.")
    assert parity(plain, _seen(content="Checking.\n"), beside_markup=True) is None
    assert "days" in parity(plain, _seen((("get_weather", '{"city": "Oslo", "days": 4}'),)), beside_markup=True)
    assert "finish_reason" in parity(plain, _seen(finish="length"), beside_markup=True)
    alone = _seen((), content="\n\n", finish="stop")
    assert parity(alone, _seen((), content="\n\n", finish="stop"), beside_markup=False) is None
    assert "content" in parity(alone, _seen((), content="\n", finish="stop"), beside_markup=False)


def test_incremental_only_where_a_call_is_long_enough_to_tell():
    long_call = ("send_message", {"to": "a", "body": "x" * 60})
    expected = Expected((long_call,), None, None)
    assert incremental(expected, _seen(argument_deltas=(7,))) is True
    assert incremental(expected, _seen(argument_deltas=(1,))) is False
    assert incremental(Expected((CALL,), None, None), _seen(argument_deltas=(1,))) is None


def test_grade_case_records_how_the_content_came_and_counts_figures():
    expected = Expected((), "\n" * 8, None)
    plain = _seen((), content="\n" * 8, finish="stop")
    held = _seen((), content="\n" * 8, finish="stop", content_chunks=1, whole_at_finish=True)
    outcome = grade_case("held-1", expected, plain, held)
    assert outcome.exact and outcome.parity is None and outcome.chunking["held"] is True
    shifted = grade_case("call-1", Expected((CALL,), None, None), _seen(),
                         _seen((("get_weather", '{"city": "Oslo", "days": 4}'),)))
    assert not shifted.exact and shifted.plain is None and "days" in shifted.streamed
    assert any(d.startswith("parity:") for d in shifted.deviations)
    figs = figures([outcome, shifted])
    assert (figs.cases, figs.exact, figs.parity, figs.held) == (2, 1, 1, 1)
    assert isinstance(outcome, CaseOutcome) and outcome.as_dict()["case"] == "held-1"
