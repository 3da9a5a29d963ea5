"""The value rules of the tool and needle graders: BFCL's optional arguments, a number as written,
an identifier as a whole."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_qualify.tasks.fixture_data import tool_fixtures
from pytest_qualify.graders.needle import grade_needle
from pytest_qualify.graders.tools import RawCall, grade_call, normalize_string


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
    assert not verdict.ok  # the slot holds two candidates (even the same one twice is not the value alone)
@given(st.integers(min_value=1_000_000, max_value=9_999_999), st.sampled_from(["0{}", "00{}", "{}-8", "9-{}", "{}0"]))
def test_property_a_longer_identifier_is_not_the_value(value, style):
    assert not grade_needle(style.format(value), str(value)).ok




# -- a number as written: digits grouped by dots only where no dot can be a decimal point ---------

@pytest.mark.parametrize("written,value", [
    ("6.120.457", "6120457"), ("6.120,5", "6120.5"), ("1.299,50", "1299.50"), ("6,120,457", "6120457"),
    ("6.120", "6.120"), ("1\u202f299.50", "1299.50"),
])
def test_parse_number_reads_dot_groups_only_where_they_cannot_be_a_decimal_point(written, value):
    from decimal import Decimal

    from pytest_qualify.graders.text import parse_number

    assert parse_number(written) == Decimal(value)


@pytest.mark.parametrize("written", ["6.120.45", "6.120.457.1", "61.20.457", "6.120,457.5", "6.120.457 6"])
def test_parse_number_reads_no_number_where_dots_group_nothing(written):
    from pytest_qualify.graders.text import parse_number

    assert parse_number(written) is None


@given(st.integers(min_value=1_000_000, max_value=9_999_999))
def test_property_a_needle_grouped_by_dots_is_the_needle(value):
    assert grade_needle(f"{value:,}".replace(",", "."), str(value)).ok
    assert not grade_needle(f"{value:,}".replace(",", ".", 1), str(value)).ok  # "1.234,567": 1234.567, a decimal comma
