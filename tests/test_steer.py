"""The steering proxy's pure parts (reference/steer.py) without vLLM: regex escaping, the constraint
for a text, tool calls in the served model's syntax, the steered request, a stream read as it
passes, the check that the forced answer came back, the log the run's end reads; then the whole
launch path (proxy in front of a launched server, its log, the gate) with the fake vLLM, whose
answers are the oracles' own.
"""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, strategies as st

from .fake_vllm import fake_command
from pytest_qualify.gate import decide as gate_mod
from pytest_qualify.profiles import module_registry
from pytest_qualify.reference import steer
from pytest_qualify.reference.steer import (
    Forced, Observed, SteerError, SteerRecord, StreamReader, force, held, incomplete_reasons, regex_escape,
    render_tool_calls, steered_body, text_constraint,
)

DIFF = "--- a/app.py\n+++ b/app.py\n@@ -1,2 +1,2 @@\n-x = (1 + 2) * 3\n+x = [1, 2]\n \tdone = True\n"


# -- regex escaping and the constraint for a text --------------------------------------------------

@given(st.text(max_size=200))
def test_escaped_regex_matches_exactly_the_text(text):
    pattern = re.compile(regex_escape(text))
    assert pattern.fullmatch(text)
    assert not pattern.fullmatch(text + "x")
    if text:
        assert not pattern.fullmatch(text[:-1])


def test_escaped_regex_writes_control_characters_as_escapes():
    escaped = regex_escape(DIFF)
    assert "\n" not in escaped and "\t" not in escaped
    assert escaped.startswith(r"\-\-\-") is False  # '-' is not a metacharacter outside a class
    assert r"\(1 \+ 2\) \* 3" in escaped and r"\[1, 2\]" in escaped and r"\n" in escaped and r"\t" in escaped


def test_a_single_line_is_a_choice_and_lines_are_a_regex():
    assert text_constraint("Paris") == {"choice": ["Paris"]}
    assert text_constraint('{"city": "Lisbon", "days": 3}') == {"choice": ['{"city": "Lisbon", "days": 3}']}
    assert text_constraint(DIFF) == {"regex": regex_escape(DIFF)}
    with pytest.raises(SteerError, match="empty answer"):
        text_constraint("")


# -- tool calls in the served model's syntax ------------------------------------------------------

def test_qwen3_coder_calls_as_the_template_writes_them():
    text = render_tool_calls([("get_weather", {"city": "Lisbon", "days": 3, "metric": True, "tags": ["a"]})],
                             "qwen3_coder")
    assert text == ("<tool_call>\n<function=get_weather>\n<parameter=city>\nLisbon\n</parameter>\n"
                    "<parameter=days>\n3\n</parameter>\n<parameter=metric>\ntrue\n</parameter>\n"
                    '<parameter=tags>\n["a"]\n</parameter>\n</function>\n</tool_call>')


def test_hermes_calls_are_json_in_tool_call_tags_and_parallel_calls_are_blocks():
    text = render_tool_calls([("a", '{"x": 1}'), ("b", {"y": "é"})], "hermes")
    blocks = re.findall(r"<tool_call>\n(.*?)\n</tool_call>", text, re.S)
    assert [json.loads(b) for b in blocks] == [{"name": "a", "arguments": {"x": 1}},
                                              {"name": "b", "arguments": {"y": "é"}}]
    assert text.count("\n</tool_call>\n<tool_call>") == 1


def test_unknown_syntax_and_non_object_arguments_are_refused():
    with pytest.raises(SteerError, match="unknown tool-call syntax"):
        render_tool_calls([("a", {})], "mistral")
    with pytest.raises(SteerError, match="JSON object"):
        render_tool_calls([("a", "[1]")], "hermes")


def test_force_tool_calls_text_and_what_cannot_be_forced():
    forced = force(None, [("get_weather", {"city": "Lisbon"})], None, "hermes")
    assert forced.content is None and forced.calls == (("get_weather", {"city": "Lisbon"}),)
    assert forced.structured_outputs == {"regex": regex_escape(forced.text)}
    assert force("Paris", [], None, "hermes") == Forced("Paris", "Paris", (), {"choice": ["Paris"]})
    with pytest.raises(SteerError, match="reasoning"):
        force("Paris", [], "I think", "hermes")


# -- the steered request ----------------------------------------------------------------------------

def test_steered_body_replaces_response_format_strips_kwargs_and_raises_max_tokens():
    body = {"model": "m", "messages": [{"role": "user", "content": "q"}], "max_tokens": 16,
            "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {}}},
            "chat_template_kwargs": {"enable_thinking": True}}
    forced = force('{"a": 1}', [], None, "hermes")
    out, changes = steered_body(body, forced, strip_chat_template_kwargs=True, max_tokens=40)
    assert "response_format" not in out and "chat_template_kwargs" not in out
    assert out["structured_outputs"] == {"choice": ['{"a": 1}']} and out["max_tokens"] == 40
    assert body["max_tokens"] == 16 and "response_format" in body  # the caller's request is untouched
    assert any("response_format json_schema replaced" in c for c in changes)
    assert any("chat_template_kwargs" in c and "stripped" in c for c in changes)
    assert "max_tokens 16 raised to 40" in changes
    kept, changes = steered_body(body, forced, strip_chat_template_kwargs=False, max_tokens=None)
    assert kept["chat_template_kwargs"] == {"enable_thinking": True} and kept["max_tokens"] == 16


def test_tokens_needed_is_about_twice_the_minimal_count():
    assert steer.tokens_needed(178) >= 344
    assert steer.requested_max_tokens({"max_tokens": 256}) == 256
    assert steer.requested_max_tokens({"max_completion_tokens": 9}) == 9
    assert steer.requested_max_tokens({"max_tokens": True}) is None


# -- what came back -----------------------------------------------------------------------------

def _sse(*chunks: dict) -> bytes:
    return b"".join(f"data: {json.dumps(c)}\n\n".encode() for c in chunks) + b"data: [DONE]\n\n"


STREAM = _sse(
    {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]},
    {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "c0", "type": "function",
                                                          "function": {"name": "get_weather", "arguments": ""}}]}}]},
    {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": '{"city": '}}]}}]},
    {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": '"Lisbon"}'}}]}}]},
    {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
    {"choices": [], "usage": {"completion_tokens": 21}},
)


@given(st.lists(st.integers(min_value=1, max_value=len(STREAM) - 1), max_size=8))
def test_a_stream_is_read_whatever_its_byte_boundaries(cuts):
    reader = StreamReader()
    edges = [0, *sorted(set(cuts)), len(STREAM)]
    for start, end in zip(edges, edges[1:]):
        reader.feed(STREAM[start:end])
    assert reader.observed == Observed(None, [["get_weather", '{"city": "Lisbon"}']], None, "tool_calls", 21)
    assert held(force(None, [("get_weather", {"city": "Lisbon"})], None, "qwen3_coder"), reader.observed) is None


def test_held_accepts_exactly_the_forced_text():
    forced = force("Paris", [], None, "hermes")
    assert held(forced, Observed("Paris", [], None, "stop")) is None
    response = {"choices": [{"message": {"content": "Paris", "tool_calls": []}, "finish_reason": "stop"}],
                "usage": {"completion_tokens": 2}}
    assert held(forced, Observed.from_response(response)) is None


@pytest.mark.parametrize("observed, why", [
    (Observed("Paris ", [], None, "stop"), "content 'Paris '"),
    (Observed("Pari", [], None, "length"), "content 'Pari'"),
    (Observed("Paris", [], None, "length"), "finish_reason 'length'"),
    (Observed("Paris", [], "hmm", "stop"), "reasoning 'hmm'"),
    (Observed(None, [["f", "{}"]], None, "tool_calls"), "tool calls"),
])
def test_held_rejects_anything_else_for_a_text(observed, why):
    assert why in held(force("Paris", [], None, "hermes"), observed)


@pytest.mark.parametrize("observed, why", [
    (Observed(None, [["get_weather", '{"city": "Lisboa"}']], None, "tool_calls"), "instead of the forced"),
    (Observed(None, [], None, "stop"), "instead of the forced"),
    (Observed("<tool_call>", [], None, "stop"), "instead of the forced"),
    (Observed("Sure.", [["get_weather", '{"city": "Lisbon"}']], None, "tool_calls"), "content 'Sure.'"),
    (Observed(None, [["get_weather", '{"city": "Lisbon"}']], None, "stop"), "finish_reason 'stop'"),
    (Observed(None, [["get_weather", '{"city": "Lisbon"}']] * 2, None, "tool_calls"), "instead of the forced"),
])
def test_held_rejects_anything_else_for_tool_calls(observed, why):
    assert why in held(force(None, [("get_weather", {"city": "Lisbon"})], None, "qwen3_coder"), observed)


# -- the log the run's end reads ------------------------------------------------------------------

def _log(tmp_path, *records: SteerRecord):
    path = tmp_path / steer.STEER_LOG
    path.write_text("".join(json.dumps(r.__dict__) + "\n" for r in records))
    return path


def test_a_steering_whose_answers_held_leaves_no_reason(tmp_path):
    path = _log(tmp_path, SteerRecord(1, 200, False, True, True, forced_text="Paris", prompt="capital?"),
                SteerRecord(2, 400, False, False, None, f"{steer.PASSTHROUGH} the reference server would refuse it"),
                SteerRecord(3, 400, True, True, None, prompt="too long"))
    assert incomplete_reasons(path) == []


def test_an_answer_that_did_not_hold_or_was_not_forced_is_a_reason(tmp_path):
    path = _log(tmp_path, SteerRecord(1, 200, False, True, True),
                SteerRecord(2, 200, True, True, False, "content 'Pari' instead of the forced 'Paris'", prompt="capital?"),
                SteerRecord(3, 200, False, False, None, "the oracle could not answer it: KeyError: 'x'", prompt="q"))
    reasons = incomplete_reasons(path)
    assert reasons == [
        "steering: request 2 (stream, prompt 'capital?'): forced answer did not hold: content 'Pari' instead of "
        "the forced 'Paris'",
        "steering: request 3 (no stream, prompt 'q'): not forced: the oracle could not answer it: KeyError: 'x'",
    ]


def test_no_log_or_nothing_forced_is_a_reason(tmp_path):
    assert "no log" in incomplete_reasons(tmp_path / "missing.jsonl")[0]
    path = _log(tmp_path, SteerRecord(1, 400, False, True, None))
    assert incomplete_reasons(path) == ["steering: no forced answer came back from vLLM in 1 chat requests"]


def test_server_side_faults_cannot_be_steered():
    steer.check_faults(["wrong_tool_args", "drop_needle"])
    with pytest.raises(SteerError, match="latency"):
        steer.check_faults(["latency"])


# -- the gate: a void steering is INCOMPLETE, whatever the items did -------------------------------

def _item(outcome: str) -> gate_mod.ItemResult:
    return gate_mod.ItemResult("suites/test_smoke.py::test_short[rep1of1]", "smoke", "test_short", 1, 1, outcome=outcome,
                               reason="wrong answer")


def test_void_answers_make_failed_items_incomplete_but_a_dead_server_still_fails():
    modules = module_registry()
    void = ["steering: request 2 ...: forced answer did not hold"]
    verdict = gate_mod.evaluate([_item("failed")], modules, ["smoke"], answers_void=void)
    assert verdict.verdict == gate_mod.INCOMPLETE and verdict.incomplete == tuple(void)
    assert gate_mod.evaluate([_item("passed")], modules, ["smoke"], answers_void=void).verdict == gate_mod.INCOMPLETE
    died = gate_mod.evaluate([_item("failed")], modules, ["smoke"], answers_void=void, run_problems=["server died"])
    assert died.verdict == gate_mod.FAIL
    assert gate_mod.evaluate([_item("failed")], modules, ["smoke"]).verdict == gate_mod.FAIL


# -- the launch path, end to end, with the fake vLLM (the oracles' answers, no constraint applied) ---

STEER_TABLE = '[steer]\ntool_call_syntax = "hermes"\nstrip_chat_template_kwargs = true\n\n[modules]'


def _steered_profile(tmp_path, modules):
    from .helpers import write_profile

    path = write_profile(tmp_path, modules, name="steered.toml")
    path.write_text(path.read_text().replace("[modules]", STEER_TABLE, 1))
    return path


def test_a_launched_steered_profile_starts_the_proxy_and_logs_every_forced_answer(qualify_pytest, tmp_path):
    from .helpers import suite

    # No json module: the fake answers a JSON task only under its response_format, which steering
    # replaces by a constraint the fake does not apply (real vLLM does: test_real_vllm_steered.py).
    profile = _steered_profile(tmp_path, ("smoke", "tools", "recall"))
    result = qualify_pytest("--qualify-serve-command", fake_command(), profile=profile, endpoint=None,
                            suites=suite("smoke", "tools", "recall"), timeout=300)
    out = result.stdout.str()
    assert "qualify: steering: " in out and "steering proxy ready at" in out, out[-3000:]
    assert result.ret == 0, out[-3000:]
    rows = [json.loads(line) for line in (qualify_pytest.run_dir() / steer.STEER_LOG).read_text().splitlines()]
    forced = [r for r in rows if r["forced"]]
    assert forced and all(r["held"] for r in forced if r["status"] == 200), rows
    assert any(r["stream"] for r in forced) and any("<tool_call>" in (r["forced_text"] or "") for r in forced)


def test_a_forced_answer_that_does_not_come_back_leaves_the_run_incomplete(qualify_pytest, tmp_path):
    from .helpers import suite

    # The proxy forces wrong arguments; the fake vLLM applies no constraint and answers the right
    # ones: the forced answer did not hold, so nothing was judged.
    profile = _steered_profile(tmp_path, ("tools",))
    result = qualify_pytest("--qualify-serve-command", fake_command(), profile=profile, endpoint=None,
                            faults=("wrong_tool_args",), suites=suite("tools"), timeout=300)
    out = result.stdout.str()
    assert result.ret == 2, out[-3000:]
    summary = qualify_pytest.summary()
    assert summary["verdict"]["result"] == "INCOMPLETE"
    assert any("forced answer did not hold: tool calls" in r for r in summary["verdict"]["reasons"]), summary["verdict"]


# -- lane-keyed faults: the lane as the steered vLLM counts it, and proof that the fault engaged -----

def _lane_prompt() -> tuple[list, str]:
    from pytest_qualify.tasks.haystack import Haystack, plan_haystack

    plan = plan_haystack("steer-lane-fault", 0.5)
    return Haystack(plan).build(4), plan.target.value


@pytest.mark.parametrize("fault, count, changed", [
    ("drop_needle=3K", 3072, True),       # the lane by the server's count, however short the text
    ("drop_needle=3K", 1024, False),      # another lane: the right value
    ("drop_needle=3K", None, False),      # the count failed: no lane, nothing changed
    ("fail_repetition=1", 2048 + 5, True),  # within the lane's tolerance
])
def test_lane_faults_pick_the_lane_by_the_servers_count(fault, count, changed):
    from pytest_qualify.profiles import load_profile
    from pytest_qualify.reference import oracle, oracle_context
    from pytest_qualify.reference.faults import Faults

    messages, value = _lane_prompt()
    seen = []
    ctx = oracle.OracleContext(load_profile("small"), Faults.parse([fault]),
                               count_chat=lambda m, t: seen.append(m) or count)
    reply = oracle_context.answer(oracle.ChatRequest({"messages": messages}), ctx)
    assert seen == [messages]
    assert (value not in reply.content) is changed, reply.content
    assert reply.faults == ((fault.partition("=")[0],) if changed else ())


def test_a_lane_fault_that_changed_no_forced_answer_leaves_the_run_incomplete(tmp_path):
    engaged = _log(tmp_path, SteerRecord(1, 200, True, True, True, forced_text="4417", faults=("drop_needle",)))
    assert incomplete_reasons(engaged, ("drop_needle=240K", "wrong_tool_args")) == []
    idle = _log(tmp_path, SteerRecord(1, 200, True, True, True, forced_text="4471"))
    assert incomplete_reasons(idle, ("wrong_tool_args",)) == []  # not lane-keyed: its own items show it
    reasons = incomplete_reasons(idle, ("drop_needle=240K", "fail_repetition"))
    assert [r.split(" never")[0] for r in reasons] == ["steering: fault drop_needle=240K",
                                                       "steering: fault fail_repetition"], reasons
    # A fault that changed an answer which did not come back proved nothing either.
    broken = _log(tmp_path, SteerRecord(1, 200, True, True, False, "content differs", faults=("drop_needle",)))
    assert any("drop_needle never changed" in r for r in incomplete_reasons(broken, ("drop_needle",)))
