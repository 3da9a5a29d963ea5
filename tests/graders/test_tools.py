"""graders/tools.py: BFCL-style call grading, unit and property tests on accepted and rejected forms."""

from __future__ import annotations

import json

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from pytest_qualify.client.answer import ToolCall
from pytest_qualify.tasks.fixture_data import tool_fixtures
from pytest_qualify.graders.tools import (
    ExpectedCall, RawCall, call_in_text, canonical_arguments, compare_value, grade_call, grade_calls, grade_no_call,
    grade_stream_shape, normalize_string, same_calls,
)

# Examples are judged by their outcome only: a loaded CI machine must not fail a slow one.

FIXTURES = tool_fixtures()
SCHEMAS = FIXTURES.schemas
ALL_CASES = FIXTURES.cases + FIXTURES.parallel + tuple(FIXTURES.round_trip)


def call(name: str, args: object) -> ToolCall:
    return ToolCall(name, args if isinstance(args, str) else json.dumps(args))


def canonical_calls(expected: tuple[ExpectedCall, ...]) -> list[ToolCall]:
    return [call(e.name, canonical_arguments(e.arguments)) for e in expected]


WEATHER = ExpectedCall("get_weather", {"city": "Lisbon", "unit": "celsius", "days": {"$one_of": [None, 1]}})
FLIGHT = FIXTURES.tool_case("flights_fra_sin_family").calls[0]
FLIGHT_ARGS = canonical_arguments(FLIGHT.arguments)


# -- the fixtures themselves ----------------------------------------------------------------------


def test_fixture_has_twenty_cases_and_the_extras():
    assert len(FIXTURES.cases) == 20
    assert FIXTURES.irrelevance and FIXTURES.parallel and FIXTURES.round_trip and FIXTURES.streaming
    assert all(len(c.calls) > 1 for c in FIXTURES.parallel)


@pytest.mark.parametrize("case", ALL_CASES, ids=[c.id for c in ALL_CASES])
def test_every_case_accepts_its_own_canonical_calls(case):
    # Also proves each expected call is valid against its tool's schema.
    verdict = grade_calls(canonical_calls(case.calls), case.calls, SCHEMAS)
    assert verdict.ok, verdict.reason


def test_tool_set_is_realistic():
    schemas = FIXTURES.schemas
    assert len(schemas) >= 5
    kinds = json.dumps(list(schemas.values()))
    assert '"enum"' in kinds and '"array"' in kinds and '"properties": {"adults"' in kinds


# -- accepted forms ---------------------------------------------------------------------------------


@pytest.mark.parametrize("city", ["Lisbon", "lisbon", "LISBON", " Lisbon ", "Lisbon."])
def test_string_values_ignore_case_whitespace_and_punctuation(city):
    assert grade_call(call("get_weather", {"city": city, "unit": "celsius"}), WEATHER, SCHEMAS).ok


def test_optional_argument_may_be_left_out_or_given():
    assert grade_call(call("get_weather", {"city": "Lisbon", "unit": "celsius"}), WEATHER, SCHEMAS).ok
    assert grade_call(call("get_weather", {"city": "Lisbon", "unit": "celsius", "days": 1}), WEATHER, SCHEMAS).ok


def test_int_for_float_and_float_for_int():
    expected = FIXTURES.tool_case("thermostat_bedroom_cool").calls[0]  # temperature 68.0
    args = canonical_arguments(expected.arguments)
    assert grade_call(call("set_thermostat", {**args, "temperature": 68}), expected, SCHEMAS).ok
    assert grade_call(call("set_thermostat", {**args, "temperature": 68.0}), expected, SCHEMAS).ok
    # An integral float in an integer field means the same number.
    assert grade_call(call("search_flights", {**FLIGHT_ARGS, "passengers": {"adults": 2.0, "children": 1}}),
                      FLIGHT, SCHEMAS).ok


@pytest.mark.parametrize("written", ["3", "3.0", "3.00"])
def test_numbers_written_as_strings_compare_by_value_where_the_schema_allows_strings(written):
    schemas = {"set_version": {"type": "object", "properties": {"major": {"type": "string"}}}}
    assert grade_call(call("set_version", {"major": written}), ExpectedCall("set_version", {"major": "3"}), schemas).ok
    assert grade_call(call("set_version", {"major": written}), ExpectedCall("set_version", {"major": 3.0}), schemas).ok


def test_unordered_list_in_any_order():
    case = FIXTURES.tool_case("ticket_login_regression")
    args = canonical_arguments(case.calls[0].arguments)
    for labels in (["regression", "auth"], ["auth", "regression"], ["Auth", "Regression"]):
        assert grade_call(call("create_ticket", {**args, "labels": labels}), case.calls[0], SCHEMAS).ok


def test_parallel_calls_match_in_any_order():
    case = FIXTURES.parallel[0]
    calls = canonical_calls(case.calls)
    assert grade_calls(calls, case.calls, SCHEMAS).ok
    assert grade_calls(calls[::-1], case.calls, SCHEMAS).ok


def test_argument_key_order_does_not_matter():
    text = json.dumps(dict(reversed(list(FLIGHT_ARGS.items()))))
    assert grade_call(ToolCall("search_flights", text), FLIGHT, SCHEMAS).ok


# -- rejected forms, each with its named kind -----------------------------------------------------


def test_wrong_function():
    verdict = grade_call(call("get_weather", FLIGHT_ARGS), FLIGHT, SCHEMAS)
    assert not verdict.ok and verdict.reason.startswith("wrong_function") and "search_flights" in verdict.reason


@pytest.mark.parametrize("text", ['{"origin": "FRA", "destination": "SI', "origin=FRA", "[1, 2]", "null"])
def test_invalid_json(text):
    verdict = grade_call(ToolCall("search_flights", text), FLIGHT, SCHEMAS)
    assert not verdict.ok and verdict.reason.startswith("format: invalid_json") and verdict.is_format


# What a non-conforming server sends in place of the arguments' JSON string: each a format failure
# that says what came, never an exception (the API's function.arguments is a string holding JSON).
NON_CONFORMING_ARGUMENTS = [
    (FLIGHT_ARGS, "came as a JSON object"),
    (None, "arguments are null"),
    ([FLIGHT_ARGS], "came as a JSON array"),
    (3, "came as a JSON number"),
    (True, "came as a JSON boolean"),
    ("origin=FRA, destination=SIN", "are not JSON"),
    ("[1, 2]", "arguments are a JSON array, not an object"),
    ("null", "arguments are a JSON null, not an object"),
    ('"{\\"origin\\": \\"FRA\\"}"', "arguments are a JSON string, not an object"),  # JSON text encoded twice
]


@pytest.mark.parametrize("arguments,said", NON_CONFORMING_ARGUMENTS, ids=[s for _, s in NON_CONFORMING_ARGUMENTS])
def test_non_conforming_arguments_are_a_format_failure_with_their_reason(arguments, said):
    for verdict in (grade_call(ToolCall("search_flights", arguments), FLIGHT, SCHEMAS),
                    grade_calls([ToolCall("search_flights", arguments)], (FLIGHT,), SCHEMAS)):
        assert not verdict.ok and verdict.is_format, verdict.reason
        assert verdict.reason.startswith("format: invalid_json: ") and said in verdict.reason, verdict.reason
        assert "(search_flights)" in verdict.reason
    # A second, conforming call beside it is still graded, and the pair is compared without error.
    pair = grade_calls([ToolCall("search_flights", arguments), call("search_flights", FLIGHT_ARGS)], (FLIGHT, FLIGHT), SCHEMAS)
    assert not pair.ok and pair.is_format and said in pair.reason
    assert not same_calls([ToolCall("search_flights", arguments)], [call("search_flights", FLIGHT_ARGS)]).ok


def test_the_object_sent_as_an_object_is_refused_although_its_values_are_right():
    # The values are the expected ones, so only the wire form is wrong: a client that reads the
    # string (every OpenAI SDK) would fail on this answer, and that is what the verdict says.
    verdict = grade_calls([ToolCall("search_flights", FLIGHT_ARGS)], (FLIGHT,), SCHEMAS)
    assert not verdict.ok and "not as a string holding JSON" in verdict.reason


def test_an_empty_arguments_string_reads_as_no_arguments():
    assert grade_call(ToolCall("search_flights", ""), FLIGHT, SCHEMAS).reason.startswith("missing_required")


def test_missing_required_and_unexpected_param():
    args = {k: v for k, v in FLIGHT_ARGS.items() if k != "cabin"}
    missing = grade_call(call("search_flights", args), FLIGHT, SCHEMAS)
    assert not missing.ok and "missing_required: argument cabin" in missing.reason
    extra = grade_call(call("search_flights", {**FLIGHT_ARGS, "pets": 1}), FLIGHT, SCHEMAS)
    assert not extra.ok and "unexpected_param: argument pets=1" in extra.reason
    nested = grade_call(call("search_flights", {**FLIGHT_ARGS, "passengers": {"adults": 2}}), FLIGHT, SCHEMAS)
    assert not nested.ok and "missing_required: argument passengers.children" in nested.reason


def test_schema_violation_names_the_field():
    verdict = grade_call(call("search_flights", {**FLIGHT_ARGS, "cabin": "Business Class"}), FLIGHT, SCHEMAS)
    assert not verdict.ok and verdict.reason.startswith("schema_violation: cabin")
    as_text = grade_call(call("search_flights", {**FLIGHT_ARGS, "passengers": {"adults": "2", "children": 1}}),
                         FLIGHT, SCHEMAS)
    assert not as_text.ok and as_text.reason.startswith("schema_violation: passengers.adults")
    # An explicit null for an optional argument means "left out" to the schema check too (BFCL).
    explicit_null = grade_call(call("get_weather", {"city": "Lisbon", "unit": "celsius", "days": None}), WEATHER, SCHEMAS)
    assert explicit_null.ok, explicit_null.reason
    required_null = grade_call(call("get_weather", {"city": None, "unit": "celsius"}), WEATHER, SCHEMAS)
    assert not required_null.ok


@pytest.mark.parametrize("field,value", [
    ("origin", "FRB"), ("departure_date", "2026-07-03"), ("return_date", "2026-07-09"), ("cabin", "first"),
])
def test_near_miss_values_are_wrong_values(field, value):
    verdict = grade_call(call("search_flights", {**FLIGHT_ARGS, field: value}), FLIGHT, SCHEMAS)
    assert not verdict.ok and verdict.reason.startswith("wrong_value") and field in verdict.reason and value in verdict.reason


def test_nested_near_miss_names_the_path():
    verdict = grade_call(call("search_flights", {**FLIGHT_ARGS, "passengers": {"adults": 2, "children": 2}}), FLIGHT, SCHEMAS)
    assert not verdict.ok and "argument passengers.children: expected 1, got 2" in verdict.reason


def test_wrong_count_and_distractor_in_parallel_calls():
    case = FIXTURES.parallel[0]
    calls = canonical_calls(case.calls)
    assert grade_calls(calls[:1], case.calls, SCHEMAS).reason.startswith("wrong_count: expected 2")
    assert grade_calls(calls + calls[:1], case.calls, SCHEMAS).reason.startswith("wrong_count")
    twice_paris = [calls[0], calls[0]]
    verdict = grade_calls(twice_paris, case.calls, SCHEMAS)
    assert not verdict.ok and "Nairobi" in verdict.reason


def test_no_calls_but_a_call_written_as_text():
    content = 'I will look that up.\n```json\n{"name": "get_weather", "arguments": {"city": "Lisbon"}}\n```'
    verdict = grade_calls([], (WEATHER,), SCHEMAS, content)
    assert not verdict.ok and "wrong_count" in verdict.reason and "written as text" in verdict.reason
    assert verdict.is_format  # the call is in the wrong channel: the contract's form, not a fact
    assert not grade_calls([], (WEATHER,), SCHEMAS, "It is sunny in Lisbon.").is_format
    assert call_in_text('<tool_call>{"name": "f", "arguments": "{}"}</tool_call>') == RawCall("f", "{}")
    assert call_in_text('{"function": {"name": "g", "parameters": {"a": 1}}}') == RawCall("g", '{"a": 1}')
    assert call_in_text("The answer is {not json}.") is None


def test_irrelevance_needs_a_text_answer_and_no_call():
    assert grade_no_call([], "144").ok
    assert not grade_no_call([call("get_weather", {})], None).ok
    assert "content holds one" in grade_no_call([], '{"name": "get_weather", "arguments": {}}').reason
    assert not grade_no_call([], "  ").ok


def test_streamed_calls_compare_as_parsed_json():
    plain = [ToolCall("f", '{"a": 1, "b": [1, 2]}')]
    assert same_calls([ToolCall("f", '{"b":[1,2],"a":1}')], plain).ok
    assert not same_calls([ToolCall("f", '{"a": 2, "b": [1, 2]}')], plain).ok
    assert not same_calls([], plain).ok


def test_stream_shape():
    assert grade_stream_shape((1, 1), "tool_calls").ok
    assert "call 1 in 2 deltas" in grade_stream_shape((2,), "tool_calls").reason
    assert "finish_reason 'stop'" in grade_stream_shape((1,), "stop").reason
    assert grade_stream_shape((), "stop").ok  # no calls: grade_calls judges that


# -- properties -----------------------------------------------------------------------------------

SINGLE = FIXTURES.cases


def _free_text_fields(expected: ExpectedCall) -> list[str]:
    props = SCHEMAS[expected.name]["properties"]
    args = canonical_arguments(expected.arguments)
    return [k for k, v in args.items()
            if isinstance(v, str) and "enum" not in props[k] and "pattern" not in props[k]]


variant = st.sampled_from([str.lower, str.upper, str.title, lambda s: f"  {s} ", lambda s: s + ".",
                           lambda s: s.replace(" ", "  "), lambda s: s.replace(" ", "-")])
@given(case=st.sampled_from(SINGLE), change=variant, data=st.data())
def test_property_free_text_variants_are_accepted(case, change, data):
    expected = case.calls[0]
    fields = _free_text_fields(expected)
    assume(fields)
    field = data.draw(st.sampled_from(fields))
    args = canonical_arguments(expected.arguments)
    args[field] = change(args[field])
    verdict = grade_call(call(expected.name, args), expected, SCHEMAS)
    assert verdict.ok, verdict.reason
@given(case=st.sampled_from(SINGLE), data=st.data())
def test_property_changed_number_is_rejected(case, data):
    expected = case.calls[0]
    args = canonical_arguments(expected.arguments)
    numeric = [k for k, v in args.items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
    assume(numeric)
    field = data.draw(st.sampled_from(numeric))
    delta = data.draw(st.integers(min_value=-3, max_value=3).filter(bool))
    args[field] = args[field] + delta
    verdict = grade_call(call(expected.name, args), expected, SCHEMAS)
    assert not verdict.ok
    assert verdict.reason.startswith(("wrong_value", "schema_violation")), verdict.reason
@given(case=st.sampled_from(SINGLE), data=st.data(), junk=st.text(alphabet="abcxyz0123456789", min_size=1, max_size=6))
def test_property_changed_string_is_rejected(case, data, junk):
    expected = case.calls[0]
    fields = _free_text_fields(expected)
    assume(fields)
    field = data.draw(st.sampled_from(fields))
    args = canonical_arguments(expected.arguments)
    args[field] = args[field] + junk
    verdict = grade_call(call(expected.name, args), expected, SCHEMAS)
    assert not verdict.ok and verdict.reason.startswith("wrong_value"), verdict.reason
@given(case=st.sampled_from(SINGLE), cut=st.integers(min_value=1))
def test_property_truncated_arguments_are_invalid_json(case, cut):
    expected = case.calls[0]
    text = json.dumps(canonical_arguments(expected.arguments))
    prefix = text[: 1 + cut % (len(text) - 1)]
    verdict = grade_call(ToolCall(expected.name, prefix), expected, SCHEMAS)
    assert not verdict.ok and verdict.reason.startswith("format: invalid_json") and verdict.is_format, verdict.reason
@given(case=st.sampled_from(SINGLE), key=st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=12),
       value=st.one_of(st.integers(), st.text(max_size=5), st.booleans()))
def test_property_extra_argument_is_unexpected(case, key, value):
    expected = case.calls[0]
    args = canonical_arguments(expected.arguments)
    assume(key not in expected.arguments)
    verdict = grade_call(call(expected.name, {**args, key: value}), expected, SCHEMAS)
    assert not verdict.ok and verdict.reason.startswith("unexpected_param"), verdict.reason
@given(order=st.permutations(range(2)))
def test_property_parallel_order_is_free(order):
    case = FIXTURES.parallel[0]
    calls = canonical_calls(case.calls)
    assert grade_calls([calls[i] for i in order], case.calls, SCHEMAS).ok


@settings(max_examples=200)
@given(text=st.text(max_size=30))
def test_property_normalize_string_is_idempotent_and_case_blind(text):
    once = normalize_string(text)
    assert normalize_string(once) == once
    assert normalize_string(text.upper()) == normalize_string(text.lower()) or not text.isascii()


STRING_SCHEMA = {"set_version": {"type": "object", "properties": {"major": {"type": "string"}}}}
NUMBER_SCHEMA = {"set_level": {"type": "object", "properties": {"level": {"type": "number"}}}}
@given(n=st.integers(min_value=-10**6, max_value=10**6),
       written=st.sampled_from([lambda n: n, lambda n: float(n)]),
       expected=st.sampled_from([lambda n: n, lambda n: float(n)]))
def test_property_equal_numbers_in_any_json_form(n, written, expected):
    want = ExpectedCall("set_level", {"level": expected(n)})
    assert grade_call(call("set_level", {"level": written(n)}), want, NUMBER_SCHEMA).ok
@given(n=st.integers(min_value=0, max_value=10**6),
       written=st.sampled_from(["{}", "{}.0", "{}.00"]), expected=st.sampled_from(["{}", "{}.0"]))
def test_property_equal_numbers_written_as_strings(n, written, expected):
    want = ExpectedCall("set_version", {"major": expected.format(n)})
    assert grade_call(call("set_version", {"major": written.format(n)}), want, STRING_SCHEMA).ok
    near = ExpectedCall("set_version", {"major": str(n + 1)})
    assert not grade_call(call("set_version", {"major": written.format(n)}), near, STRING_SCHEMA).ok
@given(n=st.integers(min_value=0, max_value=10**6))
def test_property_number_as_string_violates_a_number_schema(n):
    want = ExpectedCall("set_level", {"level": n})
    verdict = grade_call(call("set_level", {"level": str(n)}), want, NUMBER_SCHEMA)
    assert not verdict.ok and verdict.reason.startswith("schema_violation")


@pytest.mark.parametrize("given,same", [
    ("1,250", True), ("1\u2009250", True), ("1\u202f250", True), ("1\u00a0250", True),
    ("1 250", False), ("1\u202f25", False), ("12\u202f50", False),
])
def test_a_number_grouped_by_a_thin_or_no_break_space_compares_as_the_comma_grouped_one(given, same):
    assert (compare_value(1250, given, "amount") == []) is same, given
