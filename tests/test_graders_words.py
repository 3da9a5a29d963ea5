"""The word rules every grader shares (graders/text.py): words as words, numbers as numbers, a
mention the answer itself negates or ranks below is not a claim, two candidates are a miss. And
the rules as the tool and needle graders apply them."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_qualify.fixture_data import tool_fixtures
from pytest_qualify.graders.needle import grade_needle
from pytest_qualify.graders.text import (
    grade_short_answer, hedged_numbers, numbers_in, states,
)
from pytest_qualify.graders.recall import Fact, fact_present


def number_stated(text: str, value: int) -> bool:
    return fact_present(text, Fact("n", str(value), "number"))


def phrase_stated(text: str, phrase: str) -> bool:
    return fact_present(text, Fact("p", phrase))
from pytest_qualify.graders.tools import RawCall, grade_call, normalize_string


word = st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=3, max_size=10)
decoration = st.sampled_from(["{}", "**{}**", "`{}`", "{}.", "The answer is {}.", "> {}", "_{}_", "{} (final)",
                              "# {}", "\"{}\"", "{}!", "Answer: {}"])
@given(word, decoration)
def test_property_a_word_is_found_in_any_decoration(w, style):
    assert states(style.format(w), w)
    assert states(style.format(w.upper()), w)
@given(word, word)
def test_property_a_word_glued_to_letters_is_another_word(w, glue):
    assert not states(f"{glue}{w}", w)
    assert states(f"{w}{glue}", w) == (glue in ("s", "es"))
@given(word, st.sampled_from(["not {}", "not the {}", "rather than {}", "instead of {}", "({} is only the second)",
                              "{} is not it", "never {}"]))
def test_property_a_negated_mention_is_not_a_claim(w, style):
    assert not states(style.format(w), w)
@given(word, st.sampled_from(["No, {}.", "Not sure, but {}.", "{}, not the other one."]))
def test_property_a_negation_does_not_reach_across_a_clause(w, style):
    assert states(style.format(w), w)
@given(st.integers(min_value=0, max_value=10**6), st.sampled_from(["-", "\u2212", "\u2013", "\u2014"]),
       st.sampled_from(["{} °C", "{}°C", "at {} degrees", "**{}**"]))
def test_property_a_typographic_minus_is_a_minus(n, dash, style):
    text = style.format(f"{dash}{n}")
    assert number_stated(text, -n)
    assert -n in numbers_in(text)
    assert n == 0 or not number_stated(text, n)
@given(st.integers(min_value=1, max_value=10**6), st.integers(min_value=1, max_value=10**6),
       st.sampled_from(["{} or {}", "{} or maybe {}", "{} (perhaps {})", "{}/{}", "{}, or possibly {}"]))
def test_property_two_numbers_for_one_fact_are_a_hedge(a, b, style):
    text = style.format(a, b)
    verdict = grade_short_answer(text, [str(a)])
    assert verdict.ok == (a == b)
    assert bool(hedged_numbers(text)) == (a != b)
@given(st.integers(min_value=1, max_value=10**6), st.sampled_from(["{}", "The sum is {}.", "12 + 30 = {}", "**{}**"]))
def test_property_one_number_in_working_is_no_hedge(n, style):
    assert grade_short_answer(style.format(n), [str(n)]).ok


def test_phrase_stated_skips_negated_mentions():
    assert phrase_stated("batch B-1907 (not B-1970)", "B-1907")
    assert not phrase_stated("batch B-1907 (not B-1970)", "B-1970")
    assert not number_stated("freezer 12, not 21", 21) and number_stated("freezer 12 or 21", 21)


# -- tools: BFCL's optional-parameter rule, read from the shipped tool set -------------------------

TOOLS = tool_fixtures()
OPTIONAL_WITH_DEFAULT = [
    (case, key, prop)
    for case in TOOLS.cases
    for key, prop in TOOLS.schemas[case.calls[0].name].get("properties", {}).items()
    if "default" in prop and key not in case.calls[0].arguments and len(case.calls) == 1
]


def _plain(case):
    from pytest_qualify.graders.tools import canonical_arguments

    return canonical_arguments(case.calls[0].arguments)


@pytest.mark.parametrize("case,key,prop", OPTIONAL_WITH_DEFAULT,
                         ids=[f"{c.id}-{k}" for c, k, _ in OPTIONAL_WITH_DEFAULT])
def test_unasked_optional_argument_may_be_omitted_null_or_default(case, key, prop):
    name, schemas = case.calls[0].name, TOOLS.schemas
    args = _plain(case)
    for value in (None, prop["default"]):
        verdict = grade_call(RawCall(name, json.dumps({**args, key: value})), case.calls[0], schemas)
        assert verdict.ok, (key, value, verdict.reason)
    others = [v for v in prop.get("enum", ()) if v != prop["default"]]
    for value in others:
        verdict = grade_call(RawCall(name, json.dumps({**args, key: value})), case.calls[0], schemas)
        assert not verdict.ok and f"unexpected_param: argument {key}=" in verdict.reason


def test_the_unasked_optional_arguments_of_the_issue_are_checked():
    assert {k for _, k, _ in OPTIONAL_WITH_DEFAULT} >= {"attendees", "seating", "reminder"}
@given(st.integers(min_value=1, max_value=999), st.integers(min_value=0, max_value=99))
def test_property_a_dot_between_digits_is_part_of_the_number(a, b):
    assert normalize_string(f"HTTP {a}.{b} error") != normalize_string(f"HTTP {a}{b} error")
    assert normalize_string(f"HTTP {a}{b} error.") == normalize_string(f"http-{a}{b}-error")


# -- needle: two candidates, padding and dash-joined identifiers ----------------------------------
@given(st.integers(min_value=1_000_000, max_value=9_999_999), st.integers(min_value=1_000_000, max_value=9_999_999),
       st.sampled_from(["{} or maybe {}", "{} (or {})", "Either {} or {}", "{}; possibly {}"]))
def test_property_a_second_value_of_the_needles_form_is_a_hedge(value, other, style):
    verdict = grade_needle(style.format(value, other), str(value))
    assert verdict.ok == (value == other)
@given(st.integers(min_value=1_000_000, max_value=9_999_999), st.sampled_from(["0{}", "00{}", "{}-8", "9-{}", "{}0"]))
def test_property_a_longer_identifier_is_not_the_value(value, style):
    assert not grade_needle(style.format(value), str(value)).ok


