"""graders/load.py and tasks/load.py: every mix item graded by its own module's grader (its fixture's
truth accepted, a near miss rejected), answers held to concurrency 1, the probe's length rule, and
the per-level figures with vLLM bench's definitions."""

from __future__ import annotations

import json

import pytest

from pytest_qualify.client.answer import Answer, ToolCall
from pytest_qualify.graders.load import (
    ProbeTiming, check_probe_length, grade_item, held_to_first, level_figures, recorded,
)
from pytest_qualify.profiles import LOAD_MIX
from pytest_qualify.tasks.load import Probe, level_plan, load_items

ITEMS = load_items(LOAD_MIX)


def answer(content: str | None = None, calls: tuple[ToolCall, ...] = (), finish: str = "stop") -> Answer:
    return Answer(content=content, reasoning=None, tool_calls=calls, finish_reason=finish,
                  usage={"completion_tokens": 5}, streamed=False)


def truth(item) -> Answer:
    """The answer the reference server's oracles give the item's request (its fixture's ground truth)."""
    from pytest_qualify.profiles import load_profile
    from pytest_qualify.reference import oracle
    from pytest_qualify.reference.faults import Faults

    body = {"messages": list(item.messages), **item.params}
    reply = oracle.answer(oracle.ChatRequest(body), oracle.OracleContext(load_profile("small"), Faults()))
    calls = tuple(ToolCall(n, a if isinstance(a, str) else json.dumps(a), f"call_{i}")
                  for i, (n, a) in enumerate(reply.tool_calls))
    return answer(reply.content, calls, "tool_calls" if calls else "stop")


def test_the_mix_interleaves_every_module_and_each_level_sends_the_same_requests():
    assert {i.module for i in ITEMS[:4]} == set(LOAD_MIX)
    assert len({i.key for i in ITEMS}) == len(ITEMS)
    assert [i.key for i in level_plan(ITEMS, 40)] == [i.key for i in level_plan(ITEMS, 40)]
    assert level_plan(ITEMS, 40)[len(ITEMS)] == ITEMS[0]  # past the mix it starts again
    tools = next(i for i in ITEMS if i.module == "tools")
    assert tools.tool_turn and tools.params["tool_choice"] == "auto"
    json_item = next(i for i in ITEMS if i.module == "json")
    assert json_item.params["response_format"]["type"] == "json_schema"


@pytest.mark.parametrize("item", ITEMS, ids=[i.key for i in ITEMS])
def test_each_items_truth_passes_its_own_grader(item):
    verdict = grade_item(item, truth(item))
    assert verdict.ok, verdict.reason


@pytest.mark.parametrize("module", LOAD_MIX)
def test_a_near_miss_fails_its_grader_with_its_reason(module):
    item = next(i for i in ITEMS if i.module == module)
    if module == "tools":
        call = item.case.calls[0]
        wrong = {**call.arguments, **{k: "Atlantis" for k, v in call.arguments.items() if isinstance(v, str)}}
        bad = answer(None, (ToolCall(call.name, json.dumps(wrong), "c"),), "tool_calls")
    else:
        bad = answer("I do not know.")
    verdict = grade_item(item, bad)
    assert not verdict.ok and verdict.reason


def test_a_tool_turn_without_its_call_fails_on_the_finish_state_first():
    item = next(i for i in ITEMS if i.module == "tools")
    verdict = grade_item(item, answer("", finish="length"))
    assert not verdict.ok and verdict.reason.startswith("finish state:")


def test_an_answer_under_load_is_held_to_its_answer_at_concurrency_1():
    first = recorded(answer('{"a": 1}'), "c1")
    assert held_to_first(recorded(answer('{"a": 1}'), "c4"), first).ok
    changed = held_to_first(recorded(answer('{\n  "a": 1\n}'), "c4"), first)
    assert not changed.ok and "content changed" in changed.reason
    calls = recorded(answer(None, (ToolCall("f", '{"x":1}', "id1"),), "tool_calls"), "c1")
    # Tool calls compare as parsed values: whitespace and call ids are not the answer.
    assert held_to_first(recorded(answer(None, (ToolCall("f", '{"x": 1}', "id2"),), "tool_calls"), "c2"), calls).ok


def test_the_probe_must_decode_exactly_the_tokens_it_asked_for():
    assert check_probe_length(64, 64).ok
    short = check_probe_length(12, 64)
    assert not short.ok and "exactly 64 tokens" in short.reason and "got 12" in short.reason
    assert not check_probe_length(None, 64).ok
    params = Probe(64).params
    assert params["max_tokens"] == params["min_tokens"] == 64 and params["ignore_eos"] is True and params["stream"]


def test_level_figures_follow_vllm_bench():
    probes = [ProbeTiming(0.1, 1.1, 11, (0.1, 0.1, 0.1)), ProbeTiming(0.3, 2.3, 11, (0.2, 0.2))]
    f = level_figures(probes, completed=10, output_tokens=200, wall_s=4.0, goodput_ttft_s_max=0.2,
                      goodput_tpot_s_max=0.5, queue={"sum": 1.5, "count": 10})
    assert f["tpot_s_p50"] == pytest.approx(0.15)  # (1.0/10 + 2.0/10) / 2
    assert f["ttft_s_p50"] == pytest.approx(0.2) and f["ttft_s_p99"] == pytest.approx(0.298)
    assert f["itl_s_p50"] == pytest.approx(0.1) and f["itl_s_p99"] == pytest.approx(0.2)
    assert f["requests_per_s"] == 2.5 and f["output_tok_s"] == 50.0
    assert f["queue_time_s_mean"] == 0.15 and f["queue_requests"] == 10
    assert f["goodput"] == 0.5  # the second probe's TTFT is over the limit
    none = level_figures([], completed=0, output_tokens=0, wall_s=1.0)
    assert none["ttft_s_p50"] is None and none["goodput"] is None and none["queue_time_s_mean"] is None


def test_a_probe_must_end_length_and_hold_the_stream_contract():
    from pytest_qualify.client.answer import StreamShape

    from pytest_qualify.graders.load import check_probe

    def probe_answer(finish: str, finish_chunks: int = 1, tokens: int = 16) -> Answer:
        shape = StreamShape(chunks=6, content_deltas=4, finish_chunks=finish_chunks, usage_chunks=1, usage_asked=True,
                            tool_deltas=())
        return Answer(content="1 2 3", reasoning=None, tool_calls=(), finish_reason=finish,
                      usage={"completion_tokens": tokens}, streamed=True, stream=shape)

    assert check_probe(probe_answer("length"), 16).ok
    stopped = check_probe(probe_answer("stop"), 16)
    assert not stopped.ok and "not 'length'" in stopped.reason
    two = check_probe(probe_answer("length", finish_chunks=2), 16)
    assert not two.ok and two.reason.startswith("stream contract:")
    assert not check_probe(probe_answer("length", tokens=15), 16).ok


def test_the_streamed_tool_cases_are_in_the_mix_streamed():
    streamed = [i for i in ITEMS if i.id.endswith("@stream")]
    assert streamed and all(i.module == "tools" and i.params["stream"] is True for i in streamed)
    assert any(i.id.endswith("@stream") for i in level_plan(ITEMS, 12))  # the small profiles send one
