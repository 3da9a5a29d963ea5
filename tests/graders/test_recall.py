"""graders/recall.py: the facts as fields of one JSON object under the conversation's contract;
unit and property tests on the shipped conversations."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_qualify.tasks.fixture_data import recall_fixtures
from pytest_qualify.graders.recall import grade_recall

FIXTURES = recall_fixtures()
CONVERSATIONS = FIXTURES.conversations
BY_ID = {c.id: c for c in CONVERSATIONS}
ONCALL, TRIP, LAB = BY_ID["oncall_handover"], BY_ID["trip_booking"], BY_ID["lab_samples"]


def grade(conv, value) -> object:
    content = value if isinstance(value, str) else json.dumps(value)
    return grade_recall(content, conv.contract, conv.near_misses)


@pytest.mark.parametrize("conv", CONVERSATIONS, ids=[c.id for c in CONVERSATIONS])
def test_each_conversation_states_its_contract_and_passes_its_truth(conv):
    assert len(conv.turns) >= 3 and conv.near_misses
    assert conv.contract.form == "json" and set(conv.truth) == set(conv.contract.fields)
    last = conv.messages(FIXTURES.system)[-1]["content"]
    assert last.startswith(conv.question) and all(f'"{name}"' in last for name in conv.contract.fields)
    assert grade(conv, dict(conv.truth)).ok


@pytest.mark.parametrize("conv", CONVERSATIONS, ids=[c.id for c in CONVERSATIONS])
def test_each_near_miss_in_its_field_is_a_named_miss(conv):
    for name, value in conv.near_misses.items():
        verdict = grade(conv, {**conv.truth, name: value})
        assert not verdict.ok and not verdict.is_format
        assert f"field {name!r} holds the near-miss value" in verdict.reason


def test_the_issue_examples():
    # Swapped attribution: my sister's hotel given as mine, in prose or in the fields.
    prose = "Your sister is at the Hotel Aurelia and you're at the Hotel Aurora, booking KX7-42Q, budget 2,350 euros."
    verdict = grade(TRIP, prose)
    assert not verdict.ok and verdict.is_format
    swapped = {**TRIP.truth, "my_hotel": "Hotel Aurora", "sister_hotel": "Hotel Aurelia"}
    verdict = grade(TRIP, swapped)
    assert not verdict.ok and "field 'my_hotel' is 'Hotel Aurora'" in verdict.reason
    # "No" is no negation once each fact has its field.
    assert grade(ONCALL, {"name": "Ingrid Vasquez", "employee_number": "48213", "door_code": "7Q-5531"}).ok
    assert grade(ONCALL, {"name": "Ingrid Vasquez", "employee_number": 48213, "door_code": "7q 5531"}).ok


@pytest.mark.parametrize("value", [
    {"batch": "B-1907", "freezer": 12, "temperature_c": -80, "study_lead": "Dr. Okafor"},
    {"batch": "b1907", "freezer": "12", "temperature_c": "\u221280 °C", "study_lead": "Okafor"},
    {"study_lead": "DR OKAFOR", "temperature_c": -80.0, "freezer": 12.0, "batch": "B 1907", "note": "not B-1970"},
])
def test_accepted_forms_are_the_fixture_data(value):
    assert grade(LAB, value).ok, grade(LAB, value).reason


@pytest.mark.parametrize("value, why, fmt", [
    ({"batch": "B-1907", "freezer": 12, "temperature_c": 80, "study_lead": "Okafor"}, "field 'temperature_c' is '80'", False),
    ({"batch": "B-1907", "freezer": "12 or 21", "temperature_c": -80, "study_lead": "Okafor"}, "holds 2 candidates", False),
    ({"batch": "B-19070", "freezer": 12, "temperature_c": -80, "study_lead": "Okafor"}, "field 'batch'", False),
    ({"batch": "B-1907", "freezer": 12, "temperature_c": -80}, "study_lead", True),
    ({"batch": "B-1907", "freezer": [12], "temperature_c": -80, "study_lead": "Okafor"}, "freezer", True),
    ("Batch B-1907, freezer 12, -80 °C, Dr. Okafor.", "not one JSON object", True),
])
def test_misses_and_format_failures(value, why, fmt):
    verdict = grade(LAB, value)
    assert not verdict.ok and why in verdict.reason
    assert verdict.is_format is fmt, verdict.reason


@given(st.integers(min_value=-200, max_value=200))
def test_property_only_the_temperature_itself_passes(n):
    assert grade(LAB, {**LAB.truth, "temperature_c": n}).ok == (n == -80)


@given(st.sampled_from(["-", " ", ""]), st.booleans())
def test_property_a_code_field_takes_any_separator_and_case(sep, lower):
    code = f"7Q{sep}5531"
    assert grade(ONCALL, {**ONCALL.truth, "door_code": code.lower() if lower else code}).ok
