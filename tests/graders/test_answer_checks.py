"""graders/answer_checks.py: the checks every answer of ``qualify_ask`` goes through, as one pure
function: finish state, then a stream's shape, then the module's length band; the first failure
stops them, and what was checked is returned as the properties to record."""

from __future__ import annotations

from pytest_qualify.client.answer import Answer, StreamShape, ToolCall
from pytest_qualify.graders.answer_checks import check_answer
from pytest_qualify.graders.contract import Contract
from pytest_qualify.profiles import LengthBand

BAND = LengthBand("finish", 1, 20)
PLANET = Contract.of({"form": "reply", "accept": ["Jupiter"]})
SUM = Contract.of({"form": "line", "accept": ["42"], "kind": "number"})
USAGE = {"prompt_tokens": 5, "completion_tokens": 3}


def _answer(content="Jupiter", finish="stop", stream=None, calls=()):
    return Answer(content, None, tuple(calls), finish, USAGE, stream is not None, stream=stream)


def _shape(**kw):
    fields = {"chunks": 3, "content_deltas": 2, "finish_chunks": 1, "usage_chunks": 1, "usage_asked": True, **kw}
    return StreamShape(**fields)


def test_a_good_answer_records_every_check_it_passed():
    checks = check_answer(_answer(stream=_shape()), band=BAND, contract=PLANET)
    assert checks.ok and dict(checks.properties) == {
        "finish_reason": "stop", "finish_check": "ok", "stream_check": "ok", "length_chars": 7,
        "length_measured": "visible answer"}
    assert dict(check_answer(_answer()).properties) == {"finish_reason": "stop", "finish_check": "ok"}


def test_the_band_applies_only_under_a_named_contract_and_never_to_invited_working():
    padded = _answer(content="Jupiter" + " " * 40)
    # No contract named (the reasoning module's answers): no band, whatever the length.
    assert check_answer(padded, band=BAND).ok and "length_chars" not in dict(check_answer(padded, band=BAND).properties)
    working = "12 + 30: the tens make 40, the units 2, so 42. " * 10
    worked = check_answer(_answer(content=working + "\nANSWER: 42"), band=BAND, contract=SUM)
    assert worked.ok and dict(worked.properties)["length_measured"] == "answer line"
    after = check_answer(_answer(content="ANSWER: 42" + " " * 40), band=BAND, contract=SUM)
    assert after.failure.startswith("length band: ") and dict(after.properties)["length_chars"] == 50


def test_a_bad_finish_stops_the_checks():
    checks = check_answer(_answer(finish="length", stream=_shape(finish_chunks=2)), band=BAND)
    assert checks.failure.startswith("finish state: ") and "stream_check" not in dict(checks.properties)
    assert dict(checks.properties)["finish_check"] == checks.failure.removeprefix("finish state: ")


def test_a_broken_stream_and_a_long_answer_fail_with_their_rule():
    two_finishes = check_answer(_answer(stream=_shape(finish_chunks=2)), band=BAND)
    assert two_finishes.failure.startswith("stream contract: ") and "length_chars" not in dict(two_finishes.properties)
    padded = check_answer(_answer(content="Jupiter" + " " * 40), band=BAND, contract=PLANET)
    assert padded.failure.startswith("length band: ") and dict(padded.properties)["length_chars"] == 47


def test_a_tool_turn_may_end_in_calls_and_calls_have_no_length_band():
    call = ToolCall("get_weather", '{"city": "Paris"}')
    assert not check_answer(_answer(content=None, finish="tool_calls", calls=[call])).ok
    checks = check_answer(_answer(content=None, finish="tool_calls", calls=[call]), tool_turn=True, band=BAND,
                          contract=PLANET)
    assert checks.ok and "length_chars" not in dict(checks.properties)
