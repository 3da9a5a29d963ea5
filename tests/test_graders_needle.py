"""The needle grader: exact values by meaning, never a near miss, a distractor or part of a longer number."""

from __future__ import annotations

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from pytest_qualify.graders.needle import grade_needle, numbers_in, value_in

VALUE = "4417236"
DISTRACTORS = {"cobalt": "9182735", "teal": "5550193"}


@pytest.mark.parametrize(
    "answer",
    [
        "4417236",
        "The access code for the amber vault is 4417236.",
        "**4,417,236**",
        "4 417 236",
        "4\u202f417\u202f236",
        "4.417.236",
        "4417236.00",
        "4,417,236.0",
        "`4417236`",
        "```\n4417236\n```",
        "```text\nThe code: 4417236\n```",
        "Code: 4417236",
        "  4417236  \n",
        "It is 4417236 (seven digits).",
    ],
)
def test_accepts_the_value_written_in_equal_forms(answer):
    verdict = grade_needle(answer, VALUE, DISTRACTORS, key="amber")
    assert verdict.ok, verdict.reason
    assert "4417236" in verdict.reason


@pytest.mark.parametrize(
    "answer, why",
    [
        ("4417263", "swaps two characters"),
        ("4417237", "one character off"),
        ("4,417,237", "one character off"),
        ("44172360", "lacks"),
        ("14417236", "lacks"),
        ("4417236.5", "lacks"),
        ("A4417236", "lacks"),
        ("4417236B", "lacks"),
        ("441723", "lacks"),
        ("441 7236", "lacks"),
        ("The code is 9182735.", "distractor value '9182735' (key 'cobalt')"),
        ("4417236 or maybe 5550193", "distractor value '5550193' (key 'teal') as well as the needle"),
        ("I could not find it.", "lacks"),
    ],
)
def test_rejects_near_misses_distractors_and_longer_numbers(answer, why):
    verdict = grade_needle(answer, VALUE, DISTRACTORS, key="amber")
    assert not verdict.ok
    assert why in verdict.reason
    assert "4417236" in verdict.reason and "'amber'" in verdict.reason


@pytest.mark.parametrize("answer", [None, "", "   \n\t"])
def test_empty_answer(answer):
    verdict = grade_needle(answer, VALUE, DISTRACTORS)
    assert not verdict.ok and verdict.reason == "empty answer"


@pytest.mark.parametrize("answer", ["QXT-4821", "qxt-4821", "QXT4821", "QXT 4821", "badge **QXT-4821**.", "`qxt-4821`"])
def test_codes_accept_case_and_separator_variants(answer):
    assert grade_needle(answer, "QXT-4821", ["NTY-7048"]).ok


@pytest.mark.parametrize("answer", ["QXT-4812", "QXT-4822", "QXY-4821", "XQXT-4821", "QXT-48210", "NTY-7048", "QXT-4821 NTY-7048"])
def test_codes_reject_near_misses_and_distractors(answer):
    assert not grade_needle(answer, "QXT-4821", ["NTY-7048"]).ok


def test_numbers_in_reads_groupings_and_decimals():
    assert numbers_in("1,234,567 and 1 234 567 and 1.234.567,00") == ["1234567", "1234567", "1234567"]
    assert numbers_in("1234567.5") == ["1234567.5"]
    assert numbers_in("42 1234567") == ["42", "1234567"]
    assert numbers_in("ID1234567") == []


# -- properties ---------------------------------------------------------------------------------

values = st.integers(min_value=1_000_000, max_value=9_999_999).map(str)
# Prose without digits: whatever a model writes around the value.
prose = st.text(alphabet=st.sampled_from(list("abcdefghij XYZ.,:;!?()-\n'\"*_")), max_size=40)
separators = st.sampled_from(["", ",", " ", ".", "\u202f", "\u00a0", "_", "'"])


def grouped(value: str, sep: str) -> str:
    head = len(value) % 3 or 3
    groups = [value[:head]] + [value[i : i + 3] for i in range(head, len(value), 3)]
    return sep.join(groups)


def wrap(text: str, style: int) -> str:
    return [text, f"**{text}**", f"`{text}`", f"```\n{text}\n```", f'"{text}"', f"({text})"][style]
@given(values, separators, prose, prose, st.integers(0, 5))
def test_property_value_in_any_grouping_with_prose_is_accepted(value, sep, before, after, style):
    answer = f"{before} {wrap(grouped(value, sep), style)} {after}"
    assert grade_needle(answer, value).ok, answer
@given(values, st.integers(0, 6), st.integers(1, 9), prose)
def test_property_one_digit_off_is_rejected(value, position, delta, before):
    digit = (int(value[position]) + delta) % 10
    assume(position > 0 or digit != 0)
    wrong = value[:position] + str(digit) + value[position + 1 :]
    verdict = grade_needle(f"{before} {wrong}", value)
    assert not verdict.ok and "one character off" in verdict.reason
@given(values, st.integers(0, 5))
def test_property_swapped_digits_are_rejected(value, position):
    assume(value[position] != value[position + 1])
    wrong = value[:position] + value[position + 1] + value[position] + value[position + 2 :]
    assume(wrong[0] != "0")
    assert not grade_needle(wrong, value).ok
@given(values, st.sampled_from("0123456789"), st.booleans(), separators)
def test_property_value_inside_a_longer_number_is_rejected(value, extra, in_front, sep):
    longer = extra + value if in_front else value + extra
    assume(longer.lstrip("0") != value)
    assert not grade_needle(grouped(longer, sep), value).ok
@given(values, values, prose)
def test_property_a_distractor_value_is_rejected_even_beside_the_needle(value, other, before):
    assume(value != other)
    assert not grade_needle(f"{before} {other}", value, {"k": other}).ok
    assert not grade_needle(f"{value} {before} {other}", value, {"k": other}).ok
@given(values, st.integers(1, 6))
def test_property_truncated_value_is_rejected(value, cut):
    assert not grade_needle(value[:-cut], value).ok
@given(st.text(alphabet=" \n\t\u00a0", max_size=10))
def test_property_blank_is_empty(blank):
    assert grade_needle(blank, "1234567").reason == "empty answer"


codes = st.tuples(
    st.text(alphabet="ABCDEFGHJKLMNPQRSTUVWXYZ", min_size=3, max_size=3), st.integers(0, 9999)
).map(lambda t: f"{t[0]}-{t[1]:04d}")
@given(codes, st.sampled_from(["-", "", " "]), st.booleans(), prose, prose)
def test_property_codes_in_any_case_and_separator_are_accepted(code, sep, lower, before, after):
    written = code.replace("-", sep)
    written = written.lower() if lower else written
    assert value_in(f"{before} {written} {after}", code)
    assert grade_needle(f"{before} {written} {after}", code).ok
@given(codes, st.integers(4, 7), st.integers(1, 9))
def test_property_code_one_digit_off_is_rejected(code, position, delta):
    wrong = code[:position] + str((int(code[position]) + delta) % 10) + code[position + 1 :]
    assert not grade_needle(wrong, code).ok
