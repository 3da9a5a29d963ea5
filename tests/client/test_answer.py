"""client/answer.py: an answer as the server sent it. A tool call's ``arguments`` that are not the
API's JSON string (an object, null) are kept as they came, for the tools grader to refuse by name,
never turned into "" (which would read as a call with no arguments) and never a crash."""

from __future__ import annotations

import pytest

from pytest_qualify.client.answer import StreamAssembly, from_response
from pytest_qualify.client.timing import Timeline
from pytest_qualify.graders.tools import ExpectedCall, grade_calls

WEATHER = ExpectedCall("get_weather", {"city": "Paris"})
SCHEMAS = {"get_weather": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


def _plain(arguments: object) -> dict:
    return {"choices": [{"finish_reason": "tool_calls", "message": {"content": None, "tool_calls": [
        {"id": "call_0", "type": "function", "function": {"name": "get_weather", "arguments": arguments}}]}}]}


@pytest.mark.parametrize("arguments", [{"city": "Paris"}, None, ["Paris"]])
def test_plain_arguments_that_are_not_a_string_are_kept_as_sent(arguments):
    (call,) = from_response(_plain(arguments), 0.1).tool_calls
    assert call.arguments == arguments and call.parsed_arguments() == arguments
    verdict = grade_calls([call], (WEATHER,), SCHEMAS)
    assert not verdict.ok and verdict.is_format and "invalid_json" in verdict.reason


def test_a_conforming_call_reads_as_before():
    (call,) = from_response(_plain('{"city": "Paris"}'), 0.1).tool_calls
    assert call.parsed_arguments() == {"city": "Paris"} and grade_calls([call], (WEATHER,), SCHEMAS).ok


def test_streamed_arguments_sent_as_an_object_are_kept_as_they_came():
    assembly = StreamAssembly(usage_asked=False)
    timeline = Timeline.start()
    first = {"index": 0, "id": "call_0", "type": "function", "function": {"name": "get_weather", "arguments": ""}}
    rest = {"index": 0, "function": {"arguments": {"city": "Paris"}}}
    for delta in ({"tool_calls": [first]}, {"tool_calls": [rest]}):
        assembly.add({"choices": [{"index": 0, "delta": delta, "finish_reason": None}]}, timeline)
    assembly.add({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}, timeline)
    answer = assembly.answer(timeline, True)
    (call,) = answer.tool_calls
    assert call.arguments == {"city": "Paris"}
    verdict = grade_calls(answer.tool_calls, (WEATHER,), SCHEMAS)
    assert not verdict.ok and "came as a JSON object" in verdict.reason
