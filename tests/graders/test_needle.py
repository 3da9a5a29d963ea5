"""The needle grader: the whole reply is the needle's value (the question's contract); a sentence,
a near miss, a distractor or a longer number in the slot is a miss, and the reason says which."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_qualify.graders.needle import grade_needle
from pytest_qualify.tasks.haystack import needle_spec

VALUE = "4417236"
DISTRACTORS = {"cobalt": "9182735", "teal": "5550193"}
CONTRACT = next(t for t in needle_spec().templates if t.kind == "number").contract(VALUE)


def grade(answer):
    return grade_needle(answer, VALUE, DISTRACTORS, key="amber", contract=CONTRACT)


@pytest.mark.parametrize("answer", [
    "4417236", "**4,417,236**", "`4417236`", "```\n4417236\n```", "> 4417236", "  4417236  \n",
    "4417236.", "Answer: **4417236**", "Here is the code:\n4417236", '"4417236"',
])
def test_accepts_the_value_in_formatting_noise(answer):
    verdict = grade(answer)
    assert verdict.ok, verdict.reason


@pytest.mark.parametrize("answer, why", [
    ("4417263", "swaps two characters"),
    ("4417237", "one character off"),
    ("44172360", "lacks"),
    ("04417236", "lacks"),
    ("4417236.5", "lacks"),
    ("4417236-8", "lacks"),
    ("The access code for the amber vault is 4417236.", "lacks"),
    ("9182735", "gives distractor value '9182735' (key 'cobalt')"),
    ("4417236 or maybe 5550193", "lacks"),
    ("I could not find it.", "lacks"),
])
def test_rejects_anything_but_the_value(answer, why):
    verdict = grade(answer)
    assert not verdict.ok and why in verdict.reason
    assert "4417236" in verdict.reason and "'amber'" in verdict.reason
    assert not verdict.is_format


@pytest.mark.parametrize("answer", [None, "", "   \n\t", "4417236\n\nIt is in the third paragraph."])
def test_no_single_value_is_a_format_failure(answer):
    verdict = grade(answer)
    assert not verdict.ok and verdict.is_format, verdict.reason


CODE = next(t for t in needle_spec().templates if t.kind == "code").contract("QXT-4821")


@pytest.mark.parametrize("answer", ["QXT-4821", "qxt-4821", "QXT4821", "QXT 4821", "**QXT-4821**.", "`qxt-4821`"])
def test_codes_accept_case_and_separator_variants(answer):
    assert grade_needle(answer, "QXT-4821", ["NTY-7048"], contract=CODE).ok


@pytest.mark.parametrize("answer", ["QXT-4812", "QXT-4822", "QXY-4821", "XQXT-4821", "QXT-48210", "NTY-7048", "QXT-4821 NTY-7048"])
def test_codes_reject_near_misses_and_distractors(answer):
    assert not grade_needle(answer, "QXT-4821", ["NTY-7048"], contract=CODE).ok


@given(st.integers(min_value=1_000_000, max_value=9_999_999), st.integers(min_value=0, max_value=6),
       st.integers(min_value=1, max_value=9))
def test_property_one_digit_off_is_rejected(value, position, delta):
    text = str(value)
    other = text[:position] + str((int(text[position]) + delta) % 10) + text[position + 1:]
    verdict = grade_needle(other, text)
    assert verdict.ok == (other == text)


@given(st.integers(min_value=1_000_000, max_value=9_999_999), st.sampled_from(["{}", "**{}**", "`{}`", "{}.", "Answer: {}"]),
       st.booleans())
def test_property_the_value_in_any_noise_and_grouping_passes(value, style, grouped):
    written = f"{value:,}" if grouped else str(value)
    assert grade_needle(style.format(written), str(value)).ok


GROUP_SPACES = ["\u2009", "\u202f", "\u00a0"]  # thin, narrow no-break, no-break


@given(st.integers(min_value=1_000, max_value=9_999_999), st.sampled_from(GROUP_SPACES),
       st.sampled_from(["{}", "**{}**", "`{}`", "{}.", "Answer: {}"]))
def test_property_digits_grouped_by_a_thin_or_no_break_space_read_as_the_comma_grouped_value(value, space, style):
    written = f"{value:,}".replace(",", space)
    assert grade_needle(style.format(written), str(value)).ok, written


@given(st.integers(min_value=1_000, max_value=9_999_999), st.sampled_from(GROUP_SPACES),
       st.sampled_from(["short tail", "long head", "plain space", "mixed", "wrong place"]))
def test_property_a_space_that_is_no_digit_grouping_keeps_two_numbers_apart(value, space, how):
    # Only groups of three after 1-3 digits, one kind of space throughout, join; anything else is
    # two numbers in the slot, and never the needle.
    grouped = f"{value:,}"
    if how == "short tail":
        written = grouped.replace(",", space)[:-1]
    elif how == "long head":
        written = str(value)[:-3] + "0" + space + str(value)[-3:]
    elif how == "plain space":
        written = grouped.replace(",", " ")
    elif how == "mixed":
        other = GROUP_SPACES[(GROUP_SPACES.index(space) + 1) % 3]
        written = grouped.replace(",", space, 1).replace(",", other)
        if written.count(space) + written.count(other) < 2:
            written = str(value)[:-2] + space + str(value)[-2:]
    else:
        written = str(value)[:-2] + space + str(value)[-2:]
    assert not grade_needle(written, str(value)).ok, repr(written)
