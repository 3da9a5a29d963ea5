"""graders/integrity.py: each rule accepts a conforming answer or stream and rejects each breach
with a reason that names it."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_qualify.client.answer import StreamShape, ToolCall, ToolDelta
from pytest_qualify.graders.integrity import (
    MEASURABLE_S, RecordedAnswer, check_cut_call, check_length_band, check_no_result_cache, check_same_answers, too_fast,
    check_stream_shape, check_tool_deltas, compare_stream_plain, parsed_calls,
)


@dataclass(frozen=True)
class A:
    content: str | None = "Jupiter"
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str | None = "stop"
    usage: dict[str, Any] = field(default_factory=lambda: {"completion_tokens": 3})


CALL = ToolCall("get_weather", '{"city": "Paris", "unit": "celsius"}', "call_1")


def shape(**kw: Any) -> StreamShape:
    base = dict(chunks=4, content_deltas=2, finish_chunks=1, usage_chunks=1, usage_asked=True, tool_deltas=())
    return StreamShape(**{**base, **kw})


def deltas_of(*calls: tuple[str, str], pieces: int = 3) -> tuple[ToolDelta, ...]:
    """Conforming deltas: a first delta with id, type and name, then the arguments in pieces."""
    out = []
    for i, (name, args) in enumerate(calls):
        out.append(ToolDelta(i, f"call_{i}", "function", name, ""))
        step = max(1, len(args) // pieces)
        out += [ToolDelta(i, None, None, None, args[k:k + step]) for k in range(0, len(args), step)]
    return tuple(out)


# -- stream versus plain ---------------------------------------------------------------------------


def test_equal_answers_are_accepted():
    assert compare_stream_plain(A(), A())
    same_call_other_spacing = ToolCall("get_weather", '{"unit":"celsius","city":"Paris"}', "call_9")
    assert compare_stream_plain(A(None, (CALL,), "tool_calls"), A(None, (same_call_other_spacing,), "tool_calls"))
    # A stream without usage (include_usage false) is compared on everything else.
    assert compare_stream_plain(A(usage={}), A())


@pytest.mark.parametrize("streamed, words", [
    (A(content="Jupite"), "streamed content 'Jupite' differs from the non-streamed 'Jupiter'"),
    (A(finish_reason="length"), "streamed finish_reason 'length' differs"),
    (A(usage={"completion_tokens": 4}), "completion_tokens 4 differs from the non-streamed 3"),
    (A(None, (ToolCall("get_weather", '{"city": "Lyon", "unit": "celsius"}'),), "stop"), "streamed calls"),
])
def test_each_difference_is_rejected_and_named(streamed, words):
    verdict = compare_stream_plain(streamed, A())
    assert not verdict and words in verdict.reason


def test_several_differences_are_all_named():
    verdict = compare_stream_plain(A(content="x", finish_reason="length"), A())
    assert "content" in verdict.reason and "finish_reason" in verdict.reason


# -- stream shape ----------------------------------------------------------------------------------


def test_conforming_shapes_are_accepted():
    assert check_stream_shape(shape(), 3)
    assert check_stream_shape(shape(usage_asked=False, usage_chunks=0), None)
    assert check_stream_shape(shape(content_deltas=3), 3)  # one token per delta is the limit
    assert check_stream_shape(shape(content_deltas=0, tool_deltas=deltas_of(("get_weather", CALL.arguments))), 20)
    parallel = deltas_of(("get_weather", '{"city": "Paris"}'), ("get_weather", '{"city": "Nairobi"}'))
    assert check_stream_shape(shape(tool_deltas=parallel), 40)


@pytest.mark.parametrize("bad, words", [
    (shape(finish_chunks=2), "2 chunks carried a finish_reason"),
    (shape(finish_chunks=0), "0 chunks carried a finish_reason"),
    (shape(usage_chunks=0), "no usage chunk although"),
    (shape(usage_asked=False), "carried usage although stream_options.include_usage did not ask"),
    (shape(usage_chunks=2), "2 chunks carried usage"),
    (shape(content_deltas=4), "4 content deltas for 3 completion tokens"),
])
def test_each_shape_breach_is_rejected(bad, words):
    verdict = check_stream_shape(bad, 3)
    assert not verdict and words in verdict.reason


def test_tool_delta_breaches():
    good = deltas_of(("get_weather", CALL.arguments))
    assert check_tool_deltas(good) == []
    bare = (replace(good[0], id=None, type=None),) + good[1:]
    assert check_tool_deltas(bare) == ["the first delta of tool call 0 lacks id, type"]
    nameless = (replace(good[0], name=None),) + good[1:]
    assert "lacks function.name" in check_tool_deltas(nameless)[0]
    wrong_type = (replace(good[0], type="tool"),) + good[1:]
    assert "type 'tool', expected 'function'" in check_tool_deltas(wrong_type)[0]
    shifted = (good[0],) + tuple(replace(d, index=1) for d in good[1:])
    problems = check_tool_deltas(shifted)
    assert len(problems) == 1 and "adds arguments under index 1, which no call started" in problems[0]
    skipped = tuple(replace(d, index=1) for d in good)
    assert "starts call index 1 after 0 call(s)" in check_tool_deltas(skipped)[0]
    no_index = (replace(good[0], index=None),)
    assert "no integer index" in check_tool_deltas(no_index)[0]
    new_id = good[:2] + (replace(good[2], id="call_other"),) + good[3:]
    assert "changes its id" in check_tool_deltas(new_id)[0]
    broken = deltas_of(("get_weather", '{"city": "Par'))
    assert "do not parse as JSON" in check_tool_deltas(broken)[0]
    # A call cut by max_tokens cannot parse; the shape check lets it through when the finish says so.
    assert check_stream_shape(shape(tool_deltas=broken), 20, "length")
    assert not check_stream_shape(shape(tool_deltas=broken), 20, "tool_calls")


def test_arguments_streamed_as_a_json_value_are_named_not_concatenated():
    # A server that streams the arguments as an object (not as pieces of JSON text) breaks the
    # delta rule; the check names it and still reads the rest of the stream.
    sent = (ToolDelta(0, "call_0", "function", "get_weather", ""), ToolDelta(0, None, None, None, {"city": "Paris"}))
    problems = check_tool_deltas(sent)
    assert len(problems) == 1 and "tool-call delta 2 carries arguments as dict" in problems[0], problems
    assert "not as a piece of JSON text" in problems[0]


def test_calls_whose_arguments_are_not_json_text_compare_without_error():
    as_object = ToolCall("get_weather", {"city": "Paris", "unit": "celsius"}, "call_1")
    as_null = ToolCall("get_weather", None, "call_1")
    verdict = compare_stream_plain(A(None, (as_object,), "tool_calls"), A(None, (CALL,), "tool_calls"))
    assert not verdict and "differ" in verdict.reason
    assert not compare_stream_plain(A(None, (as_null,), "tool_calls"), A(None, (CALL,), "tool_calls"))
    assert parsed_calls([as_null]) == (("get_weather", "invalid: arguments are null, expected a string holding a JSON object"),)


@given(st.lists(st.text(min_size=1, max_size=8), min_size=1, max_size=6))
def test_any_split_of_valid_arguments_is_accepted(pieces):
    args = json.dumps({"note": "".join(pieces)})
    deltas = (ToolDelta(0, "c", "function", "f", ""),) + tuple(ToolDelta(0, None, None, None, p) for p in
                                                                [args[: len(args) // 2], args[len(args) // 2:]])
    assert check_tool_deltas(deltas) == []


# -- cut tool call ---------------------------------------------------------------------------------


def test_cut_call_rule():
    assert check_cut_call("length", 10, 21)
    verdict = check_cut_call("tool_calls", 10, 21)
    assert not verdict and "ended with finish_reason 'tool_calls', expected 'length'" in verdict.reason
    assert not check_cut_call("stop", 10, 21)
    assert "nothing to judge" in check_cut_call("length", 21, 21).reason


# -- answers held through the run -------------------------------------------------------------------


def test_same_answers_rule():
    now = RecordedAnswer("now", False, "Jupiter", (), "stop")
    same = [RecordedAnswer("test_finish_state[planet-streamed]", True, "Jupiter", (), "stop")]
    assert check_same_answers(now, same)
    other = same + [RecordedAnswer("test_finish_state[planet-plain]", False, "JUPITER", (), "stop")]
    verdict = check_same_answers(now, other)
    assert not verdict and "'Jupiter'" in verdict.reason and "'JUPITER'" in verdict.reason
    assert "test_finish_state[planet-plain]" in verdict.reason
    calls = parsed_calls([CALL])
    assert not check_same_answers(RecordedAnswer("now", False, None, calls, "tool_calls"),
                                  [RecordedAnswer("t", True, None, (), "tool_calls")])
    # No content and empty content are one visible answer (vLLM: "" beside a named call, plain; none streamed).
    assert check_same_answers(RecordedAnswer("now", False, "", calls, "length"),
                              [RecordedAnswer("t", True, None, calls, "length")])
    assert not check_same_answers(RecordedAnswer("now", False, "", calls, "length"),
                                  [RecordedAnswer("t", True, " ", calls, "length")])


def test_recorded_answers_round_trip_through_json():
    rec = RecordedAnswer("t", True, "x", parsed_calls([CALL]), "tool_calls")
    back = RecordedAnswer.from_dict(json.loads(json.dumps(rec.as_dict())))
    assert back == rec
    # Calls compare as parsed values, in any order.
    a = parsed_calls([CALL, ToolCall("f", '{"a": 1}')])
    b = parsed_calls([ToolCall("f", '{"a": 1.0}'), ToolCall("get_weather", '{"unit": "celsius", "city": "Paris"}')])
    assert a == b


# -- no result caching ------------------------------------------------------------------------------


def test_no_result_cache_rule():
    assert check_no_result_cache([0, 0, 0], 1.4, [1.5, 1.6], 0.5)
    assert check_no_result_cache([None, None, None], 1.4, [1.5, 1.6], 0.5)  # not reported: time alone
    fast = check_no_result_cache([0, 0, 0], 0.01, [1.5, 1.6], 0.5)
    assert not fast and "0.01 of a fresh one's 1.500 s" in fast.reason and "ratio >= 0.5" in fast.reason
    hit = check_no_result_cache([0, 0, 4096], 1.4, [1.5, 1.6], 0.5)
    assert not hit and "4096 cached prompt tokens under a fresh cache_salt" in hit.reason
    # A deployment whose cache does not honour salts: hits are not judged, time still is.
    assert check_no_result_cache([0, 0, 4096], 1.4, [1.5, 1.6], 0.5, salted=False)
    # Below the measurable time the ratio is noise: said so, not judged.
    tiny = check_no_result_cache([0, 0, 0], 0.001, [MEASURABLE_S / 2, 0.5], 0.5)
    assert tiny and "too fast to judge" in tiny.reason


def test_a_second_round_confirms_or_clears_a_fast_repeat():
    # Round 1 looked cached (both fresh requests slowed by a busy machine): the suite asks a third
    # fresh prompt and the repeat again. A cache is fast every time: still caught, over both rounds.
    assert too_fast([0.05], [0.2, 0.25], 0.5)
    cache = check_no_result_cache([0] * 5, [0.01, 0.012], [0.2, 0.25, 0.1], 0.5)
    assert not cache and "took 0.012 s in each of 2 rounds, 0.12 of a fresh one's 0.100 s" in cache.reason
    # Noise: the second round's repeat took its real time: the slowest repeat clears it.
    noise = check_no_result_cache([0] * 5, [0.05, 0.09], [0.2, 0.25, 0.1], 0.5)
    assert noise and "ratio 0.90 (limit >= 0.5) in each of 2 rounds" in noise.reason
    assert not too_fast([0.05, 0.09], [0.2, 0.25, 0.1], 0.5)
    # One time or a list: the same rule.
    assert too_fast(0.01, [1.5], 0.5) == too_fast([0.01], [1.5], 0.5) is True
    assert not too_fast([0.001], [MEASURABLE_S / 2], 0.5)  # unmeasurable: never "too fast"


# -- length band -----------------------------------------------------------------------------------


def test_length_band_rule():
    assert check_length_band("Jupiter", 1, 400, "finish")
    padded = check_length_band("Jupiter" + " " * 1000, 1, 400, "finish")
    assert not padded and "1007 characters is longer than the finish band [1, 400]: padded" in padded.reason
    empty = check_length_band("", 1, 400, "finish")
    assert not empty and "truncated" in empty.reason
    assert not check_length_band(None, 1, 400, "smoke")


def test_a_repeat_the_engine_never_counted_is_a_cache():
    # However fast the server is anyway, its own /metrics show whether the engine saw the repeat.
    verdict = check_no_result_cache([0, 0, 0], 0.001, [0.002, 0.002], 0.5, prompt_tokens=1035, engine_prompt_tokens=0)
    assert not verdict and "counted 0 prompt tokens while the repeated request of 1035" in verdict.reason
    assert check_no_result_cache([0, 0, 0], 0.001, [0.002, 0.002], 0.5, prompt_tokens=1035, engine_prompt_tokens=1035)
    # Other requests between the scrapes (xdist workers) only add to the count.
    assert check_no_result_cache([0, 0, 0], 1.0, [1.0, 1.1], 0.5, prompt_tokens=1035, engine_prompt_tokens=5000)
    assert check_no_result_cache([0, 0, 0], 1.0, [1.0, 1.1], 0.5, prompt_tokens=1035, engine_prompt_tokens=None)


# -- held-out variants: each breach the rules above must also catch, and what they must let through --


@dataclass(frozen=True)
class R(A):
    reasoning: str | None = None


@pytest.mark.parametrize("streamed, words", [
    # A usage chunk without the count: nothing to compare, which is itself the breach.
    (A(usage={"prompt_tokens": 9}), "the streamed usage carries no completion_tokens"),
    (A(usage={"completion_tokens": "3"}), "the streamed usage carries no completion_tokens"),
    # The stream path read another prompt (a system prompt added on one path only).
    (A(usage={"completion_tokens": 3, "prompt_tokens": 40}), "streamed usage.prompt_tokens 40 differs from the "
                                                             "non-streamed 30"),
    # Only whitespace, or one more token: not the same visible answer.
    (A(content="Jupiter "), "streamed content 'Jupiter ' differs"),
    (A(content=" Jupiter"), "streamed content ' Jupiter' differs"),
    (A(content="Jupiter."), "streamed content 'Jupiter.' differs"),
    (A(finish_reason=None), "streamed finish_reason None differs"),
    # A boolean streamed where the plain answer has a number (Python's True == 1 must not hide it).
    (A(None, (ToolCall("f", '{"a": true}'),), "tool_calls"), "differ in a value's JSON type"),
])
def test_held_out_stream_differences_are_rejected(streamed, words):
    plain = A(usage={"completion_tokens": 3, "prompt_tokens": 30})
    if streamed.tool_calls:
        plain = A(None, (ToolCall("f", '{"a": 1}'),), "tool_calls", usage=plain.usage)
    verdict = compare_stream_plain(streamed, plain)
    assert not verdict and words in verdict.reason, verdict.reason


def test_reasoning_moved_between_paths_is_rejected_and_the_field_name_is_free():
    # The client reads both field names (reasoning_content, reasoning): a rename is not a breach,
    # reasoning on one path only (a parser that runs only when streaming) is.
    assert compare_stream_plain(R(reasoning="think"), R(reasoning="think"))
    assert compare_stream_plain(R(), A())
    verdict = compare_stream_plain(R(reasoning=None, content="think Jupiter"), R(reasoning="think"))
    assert not verdict and "streamed reasoning None differs from the non-streamed 'think'" in verdict.reason
    assert "streamed content 'think Jupiter' differs" in verdict.reason
    assert not compare_stream_plain(R(reasoning="think"), R())


def test_conforming_call_encodings_are_accepted():
    plain = A(None, (ToolCall("f", '{"a": 1, "b": [1, 2], "c": {"x": "y"}}'),), "tool_calls")
    for args in ('{"c":{"x":"y"},"b":[1,2],"a":1}', '{"a": 1.0, "b": [1.0, 2], "c": {"x": "y"}}',
                 '{\n  "b": [1, 2],\n  "a": 1,\n  "c": {"x": "y"}\n}'):
        assert compare_stream_plain(A(None, (ToolCall("f", args, "call_x"),), "tool_calls"), plain), args
    # Parallel calls in either order, and with 1 / 1.0 in them, are the same answer to hold.
    a = parsed_calls([ToolCall("f", '{"a": 1.0}'), ToolCall("f", '{"a": 0.5}')])
    b = parsed_calls([ToolCall("f", '{"a": 0.5}'), ToolCall("f", '{"a": 1}')])
    assert check_same_answers(RecordedAnswer("now", False, None, a, "tool_calls"),
                              [RecordedAnswer("t", True, None, b, "tool_calls")])
    t = parsed_calls([ToolCall("f", '{"a": true}'), ToolCall("f", '{"a": 0.5}')])
    assert not check_same_answers(RecordedAnswer("now", False, None, t, "tool_calls"),
                                  [RecordedAnswer("t", True, None, b, "tool_calls")])


@pytest.mark.parametrize("bad, words", [
    (shape(output_after_finish=1), "1 chunk(s) carried content, reasoning or a tool call after the finish chunk"),
    (shape(usage_before_finish=1), "usage came before the finish chunk"),
    (shape(done=False), "the stream ended without 'data: [DONE]'"),
    (shape(finish_chunks=0, usage_chunks=1), "0 chunks carried a finish_reason"),  # finish null at the end
])
def test_held_out_shape_breaches_are_rejected(bad, words):
    verdict = check_stream_shape(bad, 3)
    assert not verdict and words in verdict.reason


def test_conforming_vllm_shapes_are_accepted():
    # Done seen, or not observable (another SDK): both judge nothing.
    assert check_stream_shape(shape(done=True), 3) and check_stream_shape(shape(done=None), 3)
    # No usage asked: none sent, the plain answer's count bounds the deltas.
    assert check_stream_shape(shape(usage_asked=False, usage_chunks=0, content_deltas=3), 3)


def test_held_out_tool_delta_variants():
    good = deltas_of(("get_weather", CALL.arguments))
    only_id = (replace(good[0], id=None),) + good[1:]
    assert check_tool_deltas(only_id) == ["the first delta of tool call 0 lacks id"]
    only_type = (replace(good[0], type=None),) + good[1:]
    assert check_tool_deltas(only_type) == ["the first delta of tool call 0 lacks type"]
    # The name coming in the second delta: the first lacks it.
    late_name = (replace(good[0], name=None), replace(good[1], name="get_weather")) + good[2:]
    assert "lacks function.name" in check_tool_deltas(late_name)[0]
    # Two calls: index 0 then 2.
    two = deltas_of(("get_weather", '{"city": "Paris"}'), ("get_weather", '{"city": "Nairobi"}'))
    skipped = tuple(replace(d, index=2) if d.index == 1 else d for d in two)
    assert "starts call index 2 after 1 call(s) (expected index 1)" in check_tool_deltas(skipped)[0]
    # Index 0 reused for the second call (a new id under it): named, and the arguments cannot parse.
    reused = tuple(replace(d, index=0) for d in two)
    problems = check_tool_deltas(reused)
    assert any("changes its id" in p for p in problems) and any("do not parse as JSON" in p for p in problems)
    # Repeating the call's own id on later deltas is not a change.
    repeated_id = (good[0],) + tuple(replace(d, id=good[0].id) for d in good[1:])
    assert check_tool_deltas(repeated_id) == []
    # A first delta that carries the arguments too.
    whole = (ToolDelta(0, "c0", "function", "get_weather", CALL.arguments),)
    assert check_tool_deltas(whole) == []


def test_held_out_cut_call_and_band_edges():
    assert not check_cut_call("stop", 5, 11) and not check_cut_call(None, 5, 11)
    assert check_length_band("x" * 400, 1, 400, "finish")
    assert not check_length_band("x" * 401, 1, 400, "finish")
    assert check_length_band("x", 1, 400, "finish")
    edge = check_length_band("xx", 3, 400, "finish")
    assert not edge and "visible answer of 2 characters is shorter than the finish band [3, 400]" in edge.reason
    # Whitespace padding counts: the band measures what the client was sent.
    assert not check_length_band("Jupiter" + "\n" * 394, 1, 400, "finish")


def test_held_out_cache_variants():
    # A hit on the first fresh request (a cache that ignores salts) is a hit too.
    hit = check_no_result_cache([128, 0, 0], 1.4, [1.5, 1.6], 0.5)
    assert not hit and "128 cached prompt tokens" in hit.reason
    # Just inside and just outside the ratio.
    assert check_no_result_cache([0, 0, 0], 0.75, [1.5, 1.6], 0.5)
    assert not check_no_result_cache([0, 0, 0], 0.74, [1.5, 1.6], 0.5)
    # The engine counted a part of the repeat only: some of it came from elsewhere.
    part = check_no_result_cache([0, 0, 0], 1.4, [1.5, 1.6], 0.5, prompt_tokens=1035, engine_prompt_tokens=35)
    assert not part and "counted 35 prompt tokens" in part.reason
