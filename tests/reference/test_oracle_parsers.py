"""The reference server's forced answers: a one-text ``structured_outputs`` constraint is generated
as written and read back as vLLM's parsers read it (reference/oracle_parsers.py), so the parsers
module passes on it; and its fault, one argument shifted in 1 forced tool-call answer of 1,000, is
caught by the module's grading, naming the case."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import ExitStack
from http.server import ThreadingHTTPServer

import pytest

from pytest_qualify.client.endpoint import QualifyClient
from pytest_qualify.profiles import load_profile
from pytest_qualify.reference.faults import Faults
from pytest_qualify.reference.oracle_parsers import SHIFT_PERIOD, coerce, parse, shift
from pytest_qualify.reference.state import ReferenceState
from pytest_qualify.tasks import parsers
from .in_thread import serving

PROFILE = load_profile("262k")  # --tool-call-parser qwen3_coder --reasoning-parser qwen3
TOOLS = parsers.corpus_tools()


@pytest.fixture
def serve() -> Iterator:
    with ExitStack() as servers:
        def start(*faults: str) -> tuple[QualifyClient, ReferenceState]:
            state = ReferenceState(PROFILE, Faults.parse(faults), None, 0.0, 0.0)
            url = servers.enter_context(serving(state))
            return QualifyClient(url, None, PROFILE.deployment.served_name, 60.0), state

        yield start


def _ask(client: QualifyClient, case: parsers.ParserCase) -> parsers.Asked:
    def chat(messages, **params):  # type: ignore[no-untyped-def]
        return client.chat(messages, temperature=0, seed=1, **params)

    return parsers.ask_case(chat, case, "qwen3_coder", {}, thinking_off=False, label="reference",
                            model=client.model)


def test_parse_reads_the_qwen3_coder_syntax_as_vllm_does():
    case = parsers.ParserCase.of({"id": "x", "kind": "after_content", "note": "", "content": "Checking.", "calls": [
        {"name": "update_settings", "arguments": {"enabled": True, "volume": 2.5, "note": None,
                                                 "tags": ["<b>", "a&b"], "limits": {"min": -1, "max": 7}}},
        {"name": "send_message", "arguments": {"to": "\nnull", "body": "5"}},
    ]})
    reasoning, content, calls = parse(parsers.model_text(case, "qwen3_coder"), syntax="qwen3_coder",
                                      reasoning_parser="qwen3", thinking=False, tools=TOOLS)
    assert reasoning is None and content == "Checking."
    assert calls == [(c.name, dict(c.arguments)) for c in case.calls]


def test_parse_splits_reasoning_and_hermes_calls():
    case = parsers.ParserCase.of({"id": "x", "kind": "after_reasoning", "note": "", "reasoning": "Think <a>.",
                                  "calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}]})
    text = parsers.model_text(case, "hermes")
    reasoning, content, calls = parse(text, syntax="hermes", reasoning_parser="qwen3", thinking=True, tools=TOOLS)
    assert reasoning == "\nThink <a>.\n" and content is None and calls == [("get_weather", {"city": "Oslo"})]
    # Thinking off: the parser never enters reasoning; the text is content, a stray end marker dropped.
    assert parse("<think>\nA\n</think>\n\nB", syntax=None, reasoning_parser="qwen3", thinking=False,
                 tools=()) == (None, "<think>\nA\n\n\nB", [])


@pytest.mark.parametrize("text, schema, value", [
    ("null", {"type": ["string", "null"]}, None), ("null", {"type": "string"}, "null"), ("3", {"type": "integer"}, 3),
    ("2.0", {"type": "number"}, 2), ("2.5", {"type": "number"}, 2.5), ("inf", {"type": "number"}, "inf"),
    ("true", {"type": "boolean"}, True), ("[1]", {"type": "array"}, [1]), ('{"a": 1}', {"type": "object"}, {"a": 1}),
    ("007", {"type": "string"}, "007"), ("x", {"type": "integer"}, "x"),
])
def test_coerce_follows_vllms_schema_types(text, schema, value):
    got = coerce(text, schema)
    assert got == value and type(got) is type(value)


def test_shift_changes_one_value_of_any_type():
    for args in ({"a": True}, {"a": 1}, {"a": ""}, {"a": {}}, {"a": []}, {"a": None}, {}, {"a": [{"b": 1.5}]}):
        assert shift(args) != args


def test_every_kind_comes_back_exactly_and_whitespace_is_held(serve):
    client, _ = serve()
    by_kind: dict[str, list[parsers.ParserCase]] = {}
    for case in parsers.corpus():
        if case.kind != "long_string":
            by_kind.setdefault(case.kind, []).append(case)
    asked = [_ask(client, case) for cases in by_kind.values() for case in cases[:25]]
    assert [a.case.id for a in asked if a.deviates] == []
    blank = [a for a in asked if a.case.kind == "held" and not (a.case.content or "").strip()]
    assert blank and all(a.outcome.chunking["content_chunks_streamed"] == 1 and a.outcome.chunking["whole_at_finish"]
                         for a in blank)


def test_one_argument_shifted_in_a_thousand_is_caught(serve):
    client, state = serve("parser_shift_argument")
    calls = [c for c in parsers.corpus() if c.kind == "call"][:SHIFT_PERIOD // 2]  # 1,000 forced tool-call answers
    deviating = [a for a in (_ask(client, case) for case in calls) if a.deviates]
    assert [a.case.id for a in deviating] == [calls[-1].id]  # the 1,000th answer: the last case, streamed
    outcome = deviating[0].outcome
    assert outcome.plain is None and outcome.streamed is not None and outcome.parity is not None
    assert deviating[0].line["replay"]["body"]["structured_outputs"]
    assert [r.engaged for r in state.faults.log.records()] == [True]


def test_the_steering_proxy_shifts_one_argument_in_a_thousand_and_it_is_caught(serve, tmp_path):
    # The proxy in front of an engine that generates what it is forced to (the reference server,
    # no fault of its own): the fault is the proxy's, and the module's grading catches it.
    from pytest_qualify.reference.steer import SteerConfig, SteerHandler, SteerState, check_faults

    upstream, _ = serve()
    faults = Faults.parse(["parser_shift_argument"])
    check_faults(list(faults.active))  # an answer fault: the proxy can impose it
    state = SteerState(SteerConfig(upstream.base_url, "qwen3_coder", False, tmp_path / "steer.jsonl"), PROFILE, faults)
    (tmp_path / "steer.jsonl").touch()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), type("BoundSteer", (SteerHandler,), {"state": state}))
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        client = QualifyClient(f"http://127.0.0.1:{httpd.server_address[1]}", None, PROFILE.deployment.served_name, 60.0)
        calls = [c for c in parsers.corpus() if c.kind == "call"][:SHIFT_PERIOD // 2]
        deviating = [a for a in (_ask(client, case) for case in calls) if a.deviates]
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert [a.case.id for a in deviating] == [calls[-1].id]
    assert deviating[0].outcome.streamed is not None and deviating[0].outcome.parity is not None
    rows = [json.loads(line) for line in (tmp_path / "steer.jsonl").read_text().splitlines()]
    forced = [r for r in rows if r["forced"]]
    assert len(forced) == 1 and forced[0]["held"] and forced[0]["faults"] == ["parser_shift_argument"]
    assert sum(1 for r in rows if r["passed_through"]) == len(rows) - 1


def test_a_steered_run_whose_every_request_carried_its_own_constraint_is_not_incomplete(tmp_path):
    from dataclasses import asdict

    from pytest_qualify.reference.steer_log import OWN_CONSTRAINT, SteerRecord, Unforced, incomplete_reasons

    own, other = Unforced.passthrough(OWN_CONSTRAINT), Unforced.passthrough("it asks for a fixed length (ignore_eos)")
    log = tmp_path / "steer.jsonl"
    rows = [SteerRecord(i, 200, False, False, None, own.reason, passed_through=True) for i in (1, 2)]
    log.write_text("".join(json.dumps(asdict(r)) + "\n" for r in rows))
    assert incomplete_reasons(log) == []
    rows.append(SteerRecord(3, 200, False, False, None, other.reason, passed_through=True))
    log.write_text("".join(json.dumps(asdict(r)) + "\n" for r in rows))
    assert any("no forced answer came back" in r for r in incomplete_reasons(log))


def _marker_ids(client: QualifyClient) -> dict[str, int]:
    found = {}
    for marker in parsers.MARKERS:
        ids = client.post_json("/tokenize", {"model": client.model, "prompt": marker, "add_special_tokens": False})["tokens"]
        if len(ids) == 1:
            found[marker] = ids[0]
    return found


def _ask_marked(client: QualifyClient, case: parsers.ParserCase) -> parsers.Asked:
    def chat(messages, **params):  # type: ignore[no-untyped-def]
        return client.chat(messages, temperature=0, seed=1, **params)

    return parsers.ask_case(chat, case, "qwen3_coder", _marker_ids(client), thinking_off=False, label="reference",
                            model=client.model)


def test_the_markers_are_one_token_each_and_generated_as_their_own(serve):
    client, _ = serve()
    assert set(_marker_ids(client)) == set(parsers.MARKERS)
    cases = [next(c for c in parsers.corpus() if c.kind == kind) for kind in ("call", "after_reasoning", "reasoning")]
    asked = [_ask_marked(client, case) for case in cases]
    assert [(a.case.id, a.deviates, a.unforced, a.line["markers_as_tokens"]) for a in asked] == [
        (a.case.id, False, None, "held") for a in asked]


def test_markers_spelt_in_other_tokens_deviate_and_measured_the_forcing(serve):
    client, state = serve("parser_markers_spelt")
    cases = [next(c for c in parsers.corpus() if c.kind == kind) for kind in ("call", "reasoning", "held")]
    call, reasoning, held = (_ask_marked(client, case) for case in cases)
    # The streamed parsers missed the markers: the call stays text, the reasoning runs to the end.
    assert call.deviates and call.outcome.plain is None and call.outcome.streamed is not None
    assert call.unforced == ("'<tool_call>' is 1 time(s) in the forced text but its token "
                             f"{_marker_ids(client)['<tool_call>']} was generated 0 time(s)")
    assert reasoning.deviates and reasoning.unforced is not None and "'<think>'" in reasoning.unforced
    assert "streamed" in " ".join(reasoning.outcome.deviations)
    # A case with no marker is generated as it is: nothing spelt, nothing missed.
    assert not held.deviates and held.unforced is None
    judgement = parsers.judge_shard([call, reasoning, held])
    assert judgement.failure("x") is None and judgement.not_judged().startswith("2 of 3 forced cases were not generated")
    assert {r.name for r in state.faults.log.records() if r.engaged} == {"parser_markers_spelt"}
