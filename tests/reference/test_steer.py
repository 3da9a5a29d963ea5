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

from ..fake_vllm import fake_command
from pytest_qualify.gate import decide as gate_mod
from pytest_qualify.profiles import module_registry
from pytest_qualify.reference import steer, steer_forcing, steer_log
from pytest_qualify.reference.steer_forcing import (
    Forced, SteerError, force, kept_for_cut, raised_max_tokens, regex_escape, render_tool_calls, request_key,
    steered_body, text_constraint,
)
from pytest_qualify.reference.steer_log import SteerRecord, Unforced, incomplete_reasons
from pytest_qualify.reference.steer_observing import Observed, StreamReader, held, held_cut

from ..judging import judge

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
    assert steer_forcing.tokens_needed(178) >= 344
    assert steer_forcing.requested_max_tokens({"max_tokens": 256}) == 256
    assert steer_forcing.requested_max_tokens({"max_completion_tokens": 9}) == 9
    assert steer_forcing.requested_max_tokens({"max_tokens": True}) is None


def test_a_caller_limit_below_the_forced_answer_is_kept_for_a_cut():
    # Below what vLLM spent on this very request before under the caller's own limit (178): the
    # same spelling again at temperature 0 does not fit (the integrity module halves it: 89).
    assert kept_for_cut(89, 178) == 89
    assert kept_for_cut(120, 178) == 120
    # An ordinary limit the answer fits is no cut; nothing spent yet, nothing kept: a short limit
    # is then a budget (mm-cpu-steered's 16 tokens), raised as before.
    assert kept_for_cut(256, 178) is None
    assert kept_for_cut(178, 178) is None
    assert kept_for_cut(16, None) is None
    assert kept_for_cut(None, 178) is None


def test_an_ordinary_limit_short_of_a_random_spelling_is_still_raised():
    need = steer_forcing.tokens_needed(5)  # 26
    assert raised_max_tokens(16, need, 16_000) == need  # smoke's 16-token limit, a 5-token answer
    assert raised_max_tokens(256, need, 16_000) is None  # already enough
    assert raised_max_tokens(16, need, 20) == 20  # never past the window
    assert raised_max_tokens(16, need, 10) is None  # no room to raise into: the caller's stands
    assert raised_max_tokens(None, need, 16_000) == need  # vLLM's default would be the whole room
    assert raised_max_tokens(None, need, 20) is None


def test_the_request_key_ignores_limit_stream_and_salt_only():
    body = {"messages": [{"role": "user", "content": "q"}], "temperature": 0, "max_tokens": 256, "cache_salt": "a"}
    same = {**body, "max_tokens": 89, "stream": True, "stream_options": {"include_usage": True}, "cache_salt": "b"}
    assert request_key(body) == request_key(same)
    assert request_key(body) != request_key({**body, "temperature": 1})
    assert request_key(body) != request_key({**body, "messages": [{"role": "user", "content": "Q"}]})


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


# -- a cut answer: a start of the forced one, ended by the caller's limit ---------------------------

FLIGHT = {"origin": "FRA", "destination": "SIN", "departure_date": "2026-07-02", "cabin": "business"}
CALL = force(None, [("search_flights", FLIGHT)], None, "qwen3_coder")
PARALLEL = force(None, [("get_weather", {"city": "Nairobi"}), ("get_weather", {"city": "Paris"})], None, "qwen3_coder")
SUM = force("12 + 30 = 42.\nANSWER: 42", [], None, "hermes")


@pytest.mark.parametrize("forced, observed, limit", [
    # vLLM 0.32.0, streamed: the text so far, finish 'length'
    (SUM, Observed("12 + 30 = ", [], None, "length", 10), 10),
    (SUM, Observed(None, [], None, "length", None), 1),  # nothing visible yet, no usage asked
    # the call so far: its arguments as text cut inside a value, or closed by the parser
    (CALL, Observed(None, [["search_flights", '{"origin": "FRA", "destination": "SI']], None, "length", 89), 89),
    (CALL, Observed(None, [["search_flights", '{"origin": "FRA", "destination": "SI"}']], None, "length"), 89),
    (CALL, Observed(None, [["search_flights", "{}"]], None, "length", 26), 26),
    (CALL, Observed("<tool_call>\n<function=search", [], None, "length", 8), 8),  # before the parser saw a call
    # vLLM 0.32.0, not streamed: the whole parameters so far, finish 'tool_calls' with the limit spent
    # (the engine's own report of the cut: the plugin's integrity row judges it)
    (CALL, Observed(None, [["search_flights", '{"origin": "FRA", "destination": "SIN", "departure_date": "2026-07-02"}']],
                    None, "tool_calls", 89), 89),
    (PARALLEL, Observed(None, [["get_weather", '{"city": "Nairobi"}'], ["get_weather", '{"city": "Pa']], None,
                        "length", 40), 40),
])
def test_a_start_of_the_forced_answer_cut_by_the_limit_is_held(forced, observed, limit):
    assert held_cut(forced, observed, limit) is None


@pytest.mark.parametrize("forced, observed, limit, why", [
    # a start of the answer that ended by itself, not by the limit
    (SUM, Observed("12 + 30 = ", [], None, "stop", 6), 10, "finish_reason 'stop'"),
    (CALL, Observed(None, [["search_flights", '{"origin": "FRA"}']], None, "stop", 89), 89, "finish_reason 'stop'"),
    # another finish without the whole limit spent (or no usage to show it)
    (CALL, Observed(None, [["search_flights", '{"origin": "FRA"}']], None, "tool_calls", 40), 89, "40 completion"),
    (CALL, Observed(None, [["search_flights", '{"origin": "FRA"}']], None, "tool_calls", None), 89, "None completion"),
    # different text
    (SUM, Observed("12 + 31 = ", [], None, "length", 10), 10, "is not the start"),
    (SUM, Observed("12 + 30 = 42.\nANSWER: 42 and more", [], None, "length", 10), 10, "is not the start"),
    (CALL, Observed(None, [["search_flight", "{}"]], None, "length", 26), 26, "not the start of the forced"),
    (CALL, Observed(None, [["search_flights", '{"origin": "FRB"}']], None, "length", 40), 40, "arguments"),
    (CALL, Observed(None, [["search_flights", '{"destination": "SIN"}']], None, "length", 40), 40, "arguments"),
    (CALL, Observed(None, [["search_flights", '{"origin": "FRA", "cabin": "bus']], None, "length", 40), 40, "arguments"),
    (CALL, Observed(None, [["search_flights", "{}"]] * 2, None, "length", 40), 40, "not the start of the forced"),
    (PARALLEL, Observed(None, [["get_weather", '{"city": "Nair'], ["get_weather", "{}"]], None, "length", 40), 40,
     "arguments"),
    (CALL, Observed("Sure.", [["search_flights", "{}"]], None, "length", 40), 40, "content 'Sure.'"),
    (SUM, Observed("12 + ", [], "hmm", "length", 10), 10, "reasoning"),
])
def test_anything_else_after_a_cut_is_not_held(forced, observed, limit, why):
    reason = held_cut(forced, observed, limit)
    assert reason is not None and why in reason, reason


# -- the log the run's end reads ------------------------------------------------------------------

def _log(tmp_path, *records: SteerRecord):
    path = tmp_path / steer_log.STEER_LOG
    path.write_text("".join(json.dumps(r.__dict__) + "\n" for r in records))
    return path


def test_a_steering_whose_answers_held_leaves_no_reason(tmp_path):
    path = _log(tmp_path, SteerRecord(1, 200, False, True, True, forced_text="Paris", prompt="capital?"),
                SteerRecord(2, 400, False, False, None, f"{steer_log.PASSTHROUGH} the reference server would refuse it"),
                SteerRecord(3, 400, True, True, None, prompt="too long"),
                SteerRecord(4, 200, False, False, None, Unforced.passthrough("the caller sent its own constraint").reason,
                            passed_through=True))
    assert incomplete_reasons(path) == []


def test_a_pass_through_is_a_field_of_the_record_not_a_word_of_its_reason(tmp_path):
    # An unforced 200 answer worded like a pass-through but not one still left a random model's text graded.
    path = _log(tmp_path, SteerRecord(1, 200, False, True, True),
                SteerRecord(2, 200, False, False, None, f"{steer_log.PASSTHROUGH} as worded", prompt="q"))
    assert incomplete_reasons(path) == [f"steering: request 2 (no stream, prompt 'q'): not forced: "
                                        f"{steer_log.PASSTHROUGH} as worded"]


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
    steer.check_faults(["wrong_tool_args", "drop_needle", "timed_answer_differs"])
    # The HTTP side's faults, and an oracle's faults in how an answer is served, would change nothing.
    for name in ("latency", "pad_answer", "stream_drops_tail", "result_cache", "finish_length", "cached_tokens",
                 "tool_name_repeated_in_stream", "malformed_500"):
        with pytest.raises(SteerError, match=name):
            steer.check_faults([name])


def test_a_faults_steerability_is_where_it_is_declared():
    from pytest_qualify.reference.faults import SERVER_FAULTS, fault_specs
    from pytest_qualify.reference.oracle import oracle_modules

    specs = fault_specs()
    answer_faults = {name for mod in oracle_modules() for name in getattr(mod, "FAULTS", {})}
    served = {name for mod in oracle_modules() for name in getattr(mod, "SERVED_FAULTS", {})}
    assert answer_faults and served and not answer_faults & served and not answer_faults & set(SERVER_FAULTS)
    assert {name for name, spec in specs.items() if spec.steerable} == answer_faults


# -- the gate: a void steering is INCOMPLETE, whatever the items did -------------------------------

def _item(outcome: str) -> gate_mod.ItemResult:
    return gate_mod.ItemResult("suites/test_smoke.py::test_short[rep1of1]", "smoke", "test_short", 1, 1, outcome=outcome,
                               reason="wrong answer")


def test_void_answers_make_failed_items_incomplete_but_a_dead_server_still_fails():
    modules = module_registry()
    void = ["steering: request 2 ...: forced answer did not hold"]
    verdict = judge([_item("failed")], modules, ["smoke"], answers_void=void)
    assert verdict.verdict == gate_mod.INCOMPLETE and verdict.incomplete == tuple(void)
    assert judge([_item("passed")], modules, ["smoke"], answers_void=void).verdict == gate_mod.INCOMPLETE
    died = judge([_item("failed")], modules, ["smoke"], answers_void=void, run_problems=["server died"])
    assert died.verdict == gate_mod.FAIL
    assert judge([_item("failed")], modules, ["smoke"]).verdict == gate_mod.FAIL


# -- the launch path, end to end, with the fake vLLM (the oracles' answers, no constraint applied) ---

STEER_TABLE = '[steer]\ntool_call_syntax = "hermes"\nstrip_chat_template_kwargs = true\n\n[modules]'


def _steered_profile(tmp_path, modules):
    from ..helpers import write_profile

    path = write_profile(tmp_path, modules, name="steered.toml")
    path.write_text(path.read_text().replace("[modules]", STEER_TABLE, 1))
    return path


def test_a_launched_steered_profile_starts_the_proxy_and_logs_every_forced_answer(qualify_pytest, tmp_path):
    from ..helpers import suite

    # No json module: the fake answers a JSON task only under its response_format, which steering
    # replaces by a constraint the fake does not apply (real vLLM does: test_real_vllm_steered.py).
    profile = _steered_profile(tmp_path, ("smoke", "tools", "recall"))
    result = qualify_pytest("--qualify-serve-command", fake_command(), profile=profile, endpoint=None,
                            suites=suite("smoke", "tools", "recall"), timeout=300)
    out = result.stdout.str()
    assert "qualify: steering: " in out and "steering proxy ready at" in out, out[-3000:]
    assert result.ret == 0, out[-3000:]
    rows = [json.loads(line) for line in (qualify_pytest.run_dir() / steer_log.STEER_LOG).read_text().splitlines()]
    forced = [r for r in rows if r["forced"]]
    assert forced and all(r["held"] for r in forced if r["status"] == 200), rows
    assert any(r["stream"] for r in forced) and any("<tool_call>" in (r["forced_text"] or "") for r in forced)


def test_a_forced_answer_that_does_not_come_back_leaves_the_run_incomplete(qualify_pytest, tmp_path):
    from ..helpers import suite

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
    assert_no_item_failed(qualify_pytest, summary)


def assert_no_item_failed(qualify_pytest, summary: dict) -> list[dict]:
    """A void steered run judged nothing, so no item failed in any reader: an item that failed is
    skipped "not judged: …" in both JUnit files and NOT JUDGED in report.html, never a <failure> or
    a FAIL badge. Returns the items that failed."""
    import xml.etree.ElementTree as ET

    from pytest_qualify.evidence.junit import GATE_CLASSNAME, classname_and_name

    failed = [i for i in summary["items"] if i["outcome"] in ("failed", "rerun")]
    assert all(i.get("not_judged", "").startswith("not judged: steering: ") for i in failed), failed
    for name, path in (("bundle", qualify_pytest.run_dir() / "junit.xml"), ("--junitxml", qualify_pytest.junit)):
        cases = {(tc.get("classname"), tc.get("name")): tc for tc in ET.parse(path).getroot().iter("testcase")
                 if tc.get("classname") != GATE_CLASSNAME}
        assert len(cases) == len(summary["items"]) and not any(tc.find("failure") is not None for tc in cases.values()), name
        for i in failed:
            outcomes = [(c.tag, c.get("message")) for c in cases[classname_and_name(i["nodeid"])]
                        if c.tag in ("failure", "error", "skipped")]
            assert outcomes == [("skipped", i["not_judged"])], (name, outcomes)
    page = (qualify_pytest.run_dir() / "report.html").read_text()
    assert 'b-fail">FAIL</span> <strong>' not in page and "<h2>Failed items" not in page
    return failed


def test_an_item_that_failed_in_a_void_steered_run_is_not_judged_in_every_junit_file_and_the_page(qualify_pytest, tmp_path):
    from ..helpers import suite

    # The upstream breaks streamed tool calls (its own fault, which no steering applies) and the
    # proxy's forced answers do not come back: the streamed items fail, but nothing was judged.
    profile = _steered_profile(tmp_path, ("tools",))
    result = qualify_pytest("--qualify-serve-command", fake_command("--fault", "stream_tool_index"), profile=profile,
                            endpoint=None, faults=("wrong_tool_args",), suites=suite("tools"), timeout=300)
    assert result.ret == 2, result.stdout.str()[-3000:]
    summary = qualify_pytest.summary()
    assert summary["verdict"]["result"] == "INCOMPLETE" and summary["gate"][0]["verdict"] == "INCOMPLETE"
    assert assert_no_item_failed(qualify_pytest, summary)  # some item failed, and it reads not judged


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


# -- the proxy's limits, end to end against a stub upstream -------------------------------------------

def _stub_upstream(text: str, seen: list):
    """An upstream that spells ``text`` two tokens a word (like a random model under a grammar), cuts it
    at ``max_tokens`` (finish 'length') and records every chat request it got."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    words = list(re.finditer(r"\S+", text))

    class Stub(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _send(self, payload):
            data = json.dumps(payload).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):  # noqa: N802
            self._send({"data": [{"id": "m", "max_model_len": 4096}]})

        def do_POST(self):  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if self.path == "/tokenize":
                return self._send({"count": len(body["prompt"].split()) if "prompt" in body else 40})
            seen.append(body)
            limit, spelled = body["max_tokens"], 2 * len(words) + 1
            if spelled > limit:
                content, finish, used = text[:words[limit // 2 - 1].end()] if limit >= 2 else "", "length", limit
            else:
                content, finish, used = text, "stop", spelled
            self._send({"choices": [{"message": {"content": content}, "finish_reason": finish}],
                        "usage": {"completion_tokens": used}})

    server = ThreadingHTTPServer(("127.0.0.1", 0), Stub)
    import threading
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_the_proxy_keeps_a_deliberate_small_limit_and_raises_an_ordinary_one(tmp_path):
    import socket
    import threading
    import time

    import httpx

    from pytest_qualify.profiles import load_profile
    from pytest_qualify.reference.faults import Faults
    from pytest_qualify.tasks.fixture_data import finish_prompts

    prompt = next(q for q in finish_prompts() if q.id == "sum").prompt
    text = "12 + 30 = 42.\nANSWER: 42"  # the oracle's answer: 7 words, so 7 tokens at least, 15 as the stub spells it
    seen: list = []
    upstream = _stub_upstream(text, seen)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    log = tmp_path / steer_log.STEER_LOG
    config = steer.SteerConfig(f"http://127.0.0.1:{upstream.server_port}", "hermes", True, log)
    threading.Thread(target=steer.serve_steer, args=("127.0.0.1", port, config, load_profile("small"), Faults.parse([])),
                     daemon=True).start()
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10)
    deadline = time.monotonic() + 10
    while True:
        try:
            client.get("/health")
            break
        except httpx.HTTPError:
            assert time.monotonic() < deadline, "the proxy did not start"
            time.sleep(0.05)

    def ask(max_tokens, **extra):
        body = {"model": "m", "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
                "temperature": 0, **extra}
        return client.post("/v1/chat/completions", json=body).json()["choices"][0]

    try:
        assert ask(16)["message"]["content"] == text  # ordinary: fits 7 tokens, not 15 → raised to 2*7+16
        assert ask(256)["finish_reason"] == "stop"  # the caller's own limit: vLLM spent 15 tokens on it
        cut = ask(10)  # below those 15: the caller's cut, kept
        assert cut["finish_reason"] == "length" and text.startswith(cut["message"]["content"])
        # Another request, nothing spent known for it: a short limit is a budget, raised as ever.
        assert ask(5, seed=2)["finish_reason"] == "stop"
        assert ask(12, seed=2)["finish_reason"] == "stop"
    finally:
        client.close()
        upstream.shutdown()
    assert [b["max_tokens"] for b in seen] == [30, 256, 10, 30, 30]
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(r["held"], r["cut"], r["finish"]) for r in rows] == [
        (True, None, None), (True, None, None), (True, 10, "length"), (True, None, None), (True, None, None)]
    assert "max_tokens 16 raised to 30" in rows[0]["changes"] and "max_tokens 5 raised to 30" in rows[3]["changes"]
    assert "max_tokens 12 raised to 30" in rows[4]["changes"]
    assert any("max_tokens 10 kept" in c for c in rows[2]["changes"])
    assert incomplete_reasons(log) == []


def test_the_proxy_keeps_connections_alive_and_counts_each_payload_once(tmp_path):
    # The stub answers HTTP/1.1 and keeps connections open, except right after a 5xx, when it closes
    # the connection without saying so (as vLLM does): the proxy sends the next request once more.
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from pytest_qualify.profiles import load_profile
    from pytest_qualify.reference.faults import Faults

    hits: list[tuple[str, int]] = []  # (path, the client's port: one per connection)

    class Stub(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):  # noqa: ANN002
            pass

        def do_POST(self):  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            hits.append((self.path, self.client_address[1]))
            status, payload = (500, b'{"error": "boom"}') if body.get("prompt") == "fail" else (
                200, json.dumps({"count": len(str(body.get("prompt", "")).split())}).encode())
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
            if status >= 500:
                self.close_connection = True  # closed, and the response did not say so

    upstream = ThreadingHTTPServer(("127.0.0.1", 0), Stub)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    config = steer.SteerConfig(f"http://127.0.0.1:{upstream.server_port}", "hermes", True, tmp_path / "steer.jsonl")
    state = steer.SteerState(config, load_profile("small"), Faults.parse([]))
    try:
        assert state.count({"prompt": "one two three"}) == 3
        assert state.count({"prompt": "one two three"}) == 3  # counted once
        assert state.count({"prompt": "one two"}) == 2
        assert state.counts_asked == 2 and len(hits) == 2
        assert len({port for _, port in hits}) == 1  # one kept-alive connection
        assert state.count({"prompt": "fail"}) is None  # a refusal is not kept
        assert state.count({"prompt": "four five six seven"}) == 4  # on a new connection, sent once more
        assert state.count({"prompt": "fail"}) is None and state.counts_asked == 5
    finally:
        state.http.close()
        upstream.shutdown()
