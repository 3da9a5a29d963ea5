"""Protocol module 5 — tool calls with ``tool_choice: "auto"`` over a realistic tool set.

Twenty single-call cases, no call when no tool fits, a parallel call, the round trip (the tool's
result sent back, the final answer uses it) and streamed deltas that reassemble into the same
calls as the non-streamed answer. Cases, tool set and expected calls: ``fixtures/tools/``. Answers
in text follow their contract, stated in the prompt: the no-tool-fits answer is the whole reply, the
round trip's final answer one JSON object with the amount and its currency.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from pytest_qualify.checks import require
from pytest_qualify.tasks.fixture_data import tool_fixtures
from pytest_qualify.graders.tools import grade_calls, grade_no_call, grade_stream_shape, same_calls

pytestmark = pytest.mark.qualify_module("tools")

FIXTURES = tool_fixtures()
SCHEMAS = FIXTURES.schemas
# Every turn offers the whole tool set and lets the model choose.
OFFERED = {"tools": list(FIXTURES.tools), "tool_choice": "auto"}


def _messages(prompt: str) -> list[dict[str, Any]]:
    return [{"role": "system", "content": FIXTURES.system}, {"role": "user", "content": prompt}]


# The twenty single-call cases and the parallel case: every expected call, in any order, exactly.
CALL_CASES = FIXTURES.cases + FIXTURES.parallel


@pytest.mark.parametrize("case", CALL_CASES, ids=[c.id for c in CALL_CASES])
def test_tool_call(case, qualify_ask, qualify_record, qualify_repetition):
    answer = qualify_ask(_messages(case.prompt), tool_turn=True, **OFFERED)
    qualify_record.props(case=case.id, tool_calls=len(answer.tool_calls))
    require(grade_calls(answer.tool_calls, case.calls, SCHEMAS, answer.content),
            f"case {case.id}, repetition {qualify_repetition}")


@pytest.mark.parametrize("case", FIXTURES.irrelevance, ids=[c.id for c in FIXTURES.irrelevance])
def test_no_tool_fits(case, qualify_ask, qualify_record, qualify_repetition):
    answer = qualify_ask(_messages(case.prompt), tool_turn=True, **OFFERED)
    qualify_record.props(case=case.id, tool_calls=len(answer.tool_calls))
    where = f"case {case.id}, repetition {qualify_repetition}"
    require(grade_no_call(answer.tool_calls, answer.content), where)
    require(case.grade(answer.content), where)


@pytest.mark.parametrize("case", FIXTURES.round_trip, ids=[c.id for c in FIXTURES.round_trip])
def test_round_trip(case, qualify_ask, qualify_record, qualify_salt, qualify_repetition):
    where = f"case {case.id}, repetition {qualify_repetition}"
    messages = _messages(case.prompt)
    first = qualify_ask(messages, tool_turn=True, **OFFERED)
    require(grade_calls(first.tool_calls, case.calls, SCHEMAS, first.content), f"{where}, tool call")

    # A fresh value each repetition: the final answer can only carry it by reading the tool result.
    value = round(random.Random(qualify_salt).uniform(*case.result_range), 2)
    call = first.tool_calls[0]
    call_id = call.id or "call_0"
    messages += [
        {"role": "assistant", "content": first.content or "", "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}},
        ]},
        {"role": "tool", "tool_call_id": call_id, "content": json.dumps({**case.result, case.result_field: value})},
    ]
    final = qualify_ask(messages, **OFFERED)  # not a tool turn: after the tool result it must answer in text
    qualify_record.props(case=case.id, tool_result=value)
    # The contract's JSON object: the amount by value ("176.30" = 176.3) and its currency, nothing else read.
    require(case.final_contract(value).grade(final.content), f"{where}, final answer after the tool result {value}")


@pytest.mark.parametrize("case_id", FIXTURES.streaming, ids=list(FIXTURES.streaming))
def test_streamed_calls(case_id, qualify_ask, qualify_record, qualify_repetition):
    case = FIXTURES.tool_case(case_id)
    where = f"case {case.id}, repetition {qualify_repetition}"
    plain = qualify_ask(_messages(case.prompt), tool_turn=True, **OFFERED)
    streamed = qualify_ask(_messages(case.prompt), tool_turn=True, stream=True, **OFFERED)
    qualify_record.props(case=case.id, tool_name_deltas=",".join(map(str, streamed.tool_name_deltas)))
    require(grade_stream_shape(streamed.tool_name_deltas, streamed.finish_reason), f"{where}, streamed")
    require(grade_calls(streamed.tool_calls, case.calls, SCHEMAS, streamed.content), f"{where}, streamed")
    require(same_calls(streamed.tool_calls, plain.tool_calls), where)
