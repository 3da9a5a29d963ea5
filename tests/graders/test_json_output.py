"""Deterministic JSON: one JSON value (bare or fenced), valid against the schema, with the expected values."""

from __future__ import annotations

import json

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from pytest_qualify.tasks.fixture_data import json_tasks
from pytest_qualify.graders.json_output import (
    JsonAnswerError,
    check_json_answer,
    check_same_value,
    parse_json_answer,
)

SCHEMA = {
    "type": "object",
    "required": ["order_id", "customer", "quantity", "unit_price", "currency", "tags"],
    "additionalProperties": False,
    "properties": {
        "order_id": {"type": "integer"},
        "customer": {"type": "string"},
        "quantity": {"type": "integer", "minimum": 1},
        "unit_price": {"type": "number"},
        "currency": {"type": "string", "enum": ["EUR", "USD"]},
        "tags": {"type": "array", "items": {"type": "string"}},
        "note": {"type": "string"},
    },
}
EXPECTED = {"order_id": 88213, "customer": "Dana Whitfield", "quantity": 3, "unit_price": 19.5, "currency": "EUR", "tags": ["a", "b"]}
GOOD = dict(EXPECTED)


def grade(content, unordered=()):
    return check_json_answer(content, SCHEMA, EXPECTED, unordered=unordered)


@pytest.mark.parametrize(
    "content",
    [
        json.dumps(GOOD),
        json.dumps(GOOD, indent=2),
        "\n  " + json.dumps(GOOD) + "\n",
        "```json\n" + json.dumps(GOOD) + "\n```",
        "```\n" + json.dumps(GOOD, indent=2) + "\n```",
        json.dumps({**GOOD, "customer": "dana  WHITFIELD"}),
        json.dumps({**GOOD, "unit_price": 19.50, "quantity": 3}),
        json.dumps(dict(reversed(list(GOOD.items())))),
        json.dumps({**GOOD, "note": "free text is not graded"}),
    ],
)
def test_accepts_valid_json_with_expected_values(content):
    verdict = grade(content)
    assert verdict.ok, verdict.reason


def test_fence_is_reported():
    assert parse_json_answer("```json\n{}\n```").fenced
    assert not parse_json_answer("{}").fenced
    assert "code fence" in grade("```json\n" + json.dumps(GOOD) + "\n```").reason


@pytest.mark.parametrize(
    "content, why",
    [
        (None, "empty answer"),
        ("", "empty answer"),
        ("Here is the JSON: " + json.dumps(GOOD), "not valid JSON"),
        (json.dumps(GOOD) + "\nHope this helps!", "extra text"),
        (json.dumps(GOOD)[:-10], "truncated"),
        (json.dumps({**GOOD, "quantity": "3"}), "$.quantity"),
        (json.dumps({**GOOD, "currency": "JPY"}), "$.currency"),
        (json.dumps({**GOOD, "extra": 1}), "Additional properties"),
        (json.dumps({k: v for k, v in GOOD.items() if k != "tags"}), "'tags' is a required property"),
        (json.dumps({**GOOD, "order_id": 88214}), "field 'order_id' is 88214, expected 88213"),
        (json.dumps({**GOOD, "customer": "Dana Whitfeld"}), "field 'customer'"),
        (json.dumps({**GOOD, "unit_price": 19.05}), "field 'unit_price'"),
        (json.dumps({**GOOD, "tags": ["b", "a"]}), "field 'tags'"),
        ("[1, 2]", "does not validate"),
    ],
)
def test_rejects(content, why):
    verdict = grade(content)
    assert not verdict.ok and why in verdict.reason, verdict.reason


def test_unordered_arrays_compare_as_multisets():
    assert grade(json.dumps({**GOOD, "tags": ["b", "a"]}), unordered=["tags"]).ok
    assert not grade(json.dumps({**GOOD, "tags": ["a", "a"]}), unordered=["tags"]).ok


def test_booleans_are_not_numbers():
    schema = {"type": "object", "properties": {"p": {}}}
    assert not check_json_answer('{"p": 1}', schema, {"p": True}).ok
    assert not check_json_answer('{"p": true}', schema, {"p": 1}).ok
    assert check_json_answer('{"p": true}', schema, {"p": True}).ok


def test_same_value_compares_parsed_answers():
    # Layout, key order and a fence are not a different computation; a value is.
    assert check_same_value('{"a": 1, "b": [1, 2]}', '```json\n{"b": [1, 2],\n "a": 1.0}\n```').ok
    verdict = check_same_value('{"a": 1, "b": [1, 2]}', '{"a": 1, "b": [2, 1]}')
    assert not verdict.ok and "field 'b'" in verdict.reason
    verdict = check_same_value('{"a": true}', '{"a": 1}')
    assert not verdict.ok and "different values" in verdict.reason
    assert not check_same_value('{"a": 1}', '{"a": 1').ok


def test_fixture_tasks_ground_truth_passes_its_own_grader():
    tasks = json_tasks()
    assert len(tasks) >= 5
    for task in tasks:
        truth = {**task.get("free", {}), **task["expected"]}
        verdict = check_json_answer(json.dumps(truth), task["schema"], task["expected"], unordered=task.get("unordered", ()))
        assert verdict.ok, (task["id"], verdict.reason)


def test_parse_error_type():
    with pytest.raises(JsonAnswerError, match="empty answer"):
        parse_json_answer("  ")


# -- properties ---------------------------------------------------------------------------------

names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz ", min_size=1, max_size=20).filter(lambda s: s.strip())
@given(st.integers(1, 10**9), names, st.integers(1, 1000), st.sampled_from([None, 0, 2, 4]), st.booleans(), st.booleans())
def test_property_formatting_and_case_do_not_matter(order_id, customer, quantity, indent, fence, upper):
    expected = {"order_id": order_id, "customer": customer, "quantity": quantity, "unit_price": 1.25, "currency": "USD", "tags": []}
    value = {**expected, "customer": "  " + (customer.upper() if upper else customer) + " ", "unit_price": 1.250}
    text = json.dumps(value, indent=indent)
    if fence:
        text = f"```json\n{text}\n```"
    assert check_json_answer(text, SCHEMA, expected).ok
@given(st.integers(1, 10**9), st.integers(1, 10**9))
def test_property_a_different_number_is_rejected(want, got):
    assume(want != got)
    value = {**GOOD, "order_id": got}
    assert not check_json_answer(json.dumps(value), SCHEMA, {**EXPECTED, "order_id": want}).ok
@given(st.integers(1, len(json.dumps(GOOD)) - 1))
def test_property_any_truncation_is_rejected(cut):
    text = json.dumps(GOOD)[:cut]
    assert not grade(text).ok
@given(st.text(alphabet="abcdefghij XYZ.:!", min_size=1, max_size=30).filter(lambda s: s.strip()))
def test_property_prose_around_json_is_rejected(prose):
    assert not grade(prose + " " + json.dumps(GOOD)).ok
    assert not grade(json.dumps(GOOD) + " " + prose).ok
@given(json_values := st.recursive(
    st.none() | st.booleans() | st.integers(-1000, 1000) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3), max_leaves=8),
    json_values, st.sampled_from([None, 1, 2]))
def test_property_same_value_iff_parsed_values_equal(a, b, indent):
    # Any layout of the same value is the same computation; any other value is not.
    same = json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    assert check_same_value(json.dumps(a), json.dumps(b, indent=indent)).ok == same
