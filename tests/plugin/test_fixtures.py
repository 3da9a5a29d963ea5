"""The fixtures a protocol test uses (hooks/qualify_fixtures.py), in a pytester project: ``qualify_ask``
asks the protocol's way with one budget rule, and every recorded answer goes through the finish check."""

from __future__ import annotations

import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

from pytest_qualify.profiles import builtin_profiles

from ..helpers import pytester_run

FAKES = """
    import pytest
    from pytest_qualify.client.answer import Answer
    from pytest_qualify.profiles import load_profile
    from pytest_qualify.client.timing import Timeline

    class FakeClient:
        def __init__(self):
            self.requests = []

        def chat(self, messages, **request):
            self.requests.append({"messages": messages, **request})
            return Answer(content="Paris", reasoning=None, tool_calls=(), finish_reason="stop",
                          usage={"prompt_tokens": 10, "completion_tokens": 2}, streamed=False,
                          timeline=Timeline.single(0.5))

    @pytest.fixture
    def qualify_client():
        return FakeClient()

    @pytest.fixture
    def qualify_profile():
        return load_profile(PROFILE)

    @pytest.fixture
    def qualify_salt():
        return "run-1-item"
"""


def test_ask_uses_the_profiles_one_budget_a_fixed_seed_and_the_items_salt(pytester):
    # A thinking model's profile: the budget is the visible answer plus the reasoning headroom.
    profile = pytester.path / "thinking.toml"
    profile.write_text(Path(builtin_profiles()["small"]).read_text().replace(
        "reasoning_headroom_tokens = 0\n", "reasoning_headroom_tokens = 512\n", 1))
    pytester.makeconftest(f"PROFILE = {str(profile)!r}\n" + textwrap.dedent(FAKES))
    pytester.makepyfile(test_ask=textwrap.dedent("""
        def test_plain(qualify_ask, qualify_client, qualify_profile):
            qualify_ask("Capital of France?")
            (request,) = qualify_client.requests
            limits = qualify_profile.limits
            assert request["max_tokens"] == limits.answer_tokens + limits.reasoning_headroom_tokens
            assert limits.reasoning_headroom_tokens == 512
            assert (request["temperature"], request["seed"], request["cache_salt"]) == (0, 1, "run-1-item")
            assert request["messages"] == [{"role": "user", "content": "Capital of France?"}]

        def test_overrides(qualify_ask, qualify_client):
            messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "Capital?"}]
            qualify_ask(messages, salt_suffix="-second", seed=7, stream=True)
            (request,) = qualify_client.requests
            assert request["messages"] == messages
            assert (request["seed"], request["stream"], request["cache_salt"]) == (7, True, "run-1-item-second")

        def test_recorded(qualify_ask, request):
            qualify_ask("Capital of France?")
            props = dict(request.node.user_properties)
            assert props["finish_check"] == "ok" and props["requests"] == 1 and props["completion_tokens"] == 2
    """))
    pytester_run(pytester).assert_outcomes(passed=3)


def test_recorder_checks_the_finish_state_of_every_answer(pytester):
    # Any module's answers go through qualify_record.answer: a bad finish fails the test with its
    # reason, and the outcome is recorded as properties.
    pytester.makepyfile(test_probe=textwrap.dedent("""
        import pytest
        from pytest_qualify.client.answer import Answer, ToolCall
        from pytest_qualify.client.timing import Timeline

        def make(content, finish, calls=()):
            return Answer(content=content, reasoning=None, tool_calls=calls, finish_reason=finish,
                          usage={"prompt_tokens": 10, "completion_tokens": 256}, streamed=False,
                          timeline=Timeline.single(0.5))

        def test_ok(qualify_record):
            qualify_record.answer(make("Paris", "stop"))

        def test_tool_turn(qualify_record):
            qualify_record.answer(make(None, "tool_calls", (ToolCall("f", "{}"),)), tool_turn=True)

        def test_length(qualify_record):
            qualify_record.answer(make("Paris is the cap", "length"))

        def test_empty(qualify_record):
            qualify_record.answer(make("", "stop"))

        def test_tool_calls_on_plain_turn(qualify_record):
            qualify_record.answer(make(None, "tool_calls", (ToolCall("f", "{}"),)))
    """))
    junit = pytester.path / "probe.xml"
    result = pytester_run(pytester, f"--junitxml={junit}")
    result.assert_outcomes(passed=2, failed=3)
    cases = {tc.get("name"): tc for tc in ET.parse(junit).getroot().iter("testcase")}
    props = {name: {p.get("name"): p.get("value") for p in tc.iter("property")} for name, tc in cases.items()}
    messages = {name: tc.find("failure").get("message") for name, tc in cases.items() if tc.find("failure") is not None}
    assert "finish state: answer budget exhausted (finish_reason 'length' after 256 completion tokens)" in messages["test_length"]
    assert "finish state: empty answer: no visible content" in messages["test_empty"]
    assert "finish_reason 'tool_calls' not allowed on a non-tool answer" in messages["test_tool_calls_on_plain_turn"]
    assert props["test_ok"]["finish_check"] == "ok" and props["test_ok"]["finish_reason"] == "stop"
    assert props["test_tool_turn"]["finish_check"] == "ok"
    assert props["test_length"]["finish_check"].startswith("answer budget exhausted")


def test_a_modules_own_grade_runs_before_the_finish_check(pytester):
    # A reasoning leak that used up the budget ends with finish_reason "length": the module's own
    # reason (the leak) must be the one reported, and the finish check still runs after a pass.
    pytester.makeconftest("PROFILE = 'small'\n" + textwrap.dedent(FAKES).replace('finish_reason="stop"', 'finish_reason="length"'))
    pytester.makepyfile(test_grade=textwrap.dedent("""
        import pytest

        def test_own_reason_first(qualify_ask):
            def leak(answer):
                pytest.fail("reasoning leaked into the content", pytrace=False)
            qualify_ask("Capital of France?", grade=leak)

        def test_finish_checked_after_a_passing_grade(qualify_ask):
            seen = []
            qualify_ask("Capital of France?", grade=seen.append)
            pytest.fail("not reached: the finish check fails first")

        def test_without_grade_the_finish_check_decides(qualify_ask):
            qualify_ask("Capital of France?")
    """))
    result = pytester_run(pytester)
    result.assert_outcomes(failed=3)
    result.stdout.fnmatch_lines([
        "*_ test_own_reason_first _*", "reasoning leaked into the content",
        "*_ test_finish_checked_after_a_passing_grade _*", "finish state: answer budget exhausted*",
        "*_ test_without_grade_the_finish_check_decides _*", "finish state: answer budget exhausted*",
    ])


def test_recorder_holds_every_streamed_answer_to_the_stream_contract(pytester):
    # The integrity module's cheap checks run inside every module: a streamed answer whose chunks
    # break the contract fails with the rule it broke; a conforming one records "ok".
    pytester.makepyfile(test_stream=textwrap.dedent("""
        from pytest_qualify.client.answer import Answer, StreamShape
        from pytest_qualify.client.timing import Timeline

        def make(**shape):
            base = dict(chunks=3, content_deltas=1, finish_chunks=1, usage_chunks=1, usage_asked=True)
            return Answer(content="Paris", reasoning=None, tool_calls=(), finish_reason="stop",
                          usage={"prompt_tokens": 10, "completion_tokens": 2}, streamed=True,
                          timeline=Timeline.single(0.5), stream=StreamShape(**{**base, **shape}))

        def test_ok(qualify_record):
            qualify_record.answer(make())

        def test_two_finish_chunks(qualify_record):
            qualify_record.answer(make(finish_chunks=2))

        def test_more_deltas_than_tokens(qualify_record):
            qualify_record.answer(make(content_deltas=5))
    """))
    junit = pytester.path / "stream.xml"
    pytester_run(pytester, f"--junitxml={junit}").assert_outcomes(passed=1, failed=2)
    cases = {tc.get("name"): tc for tc in ET.parse(junit).getroot().iter("testcase")}
    assert {p.get("name"): p.get("value") for p in cases["test_ok"].iter("property")}["stream_check"] == "ok"
    assert "stream contract: 2 chunks carried a finish_reason" in cases["test_two_finish_chunks"].find("failure").get("message")
    assert "5 content deltas for 2 completion tokens" in cases["test_more_deltas_than_tokens"].find("failure").get("message")


def test_the_length_band_measures_what_the_contract_reads_never_invited_working(pytester):
    # The profile's band (small: finish and reasoning [1, 400] characters) judges padding: on a
    # `line` answer it measures the answer line on, so a long working the prompt invited passes and
    # padding after the answer fails; a `reply` answer is measured whole; an answer asked without a
    # contract (the reasoning module, whose answer never decides) is held to no band here.
    pytester.makeconftest("PROFILE = 'small'\n" + textwrap.dedent(FAKES).replace(
        'return Answer(content="Paris"', 'return Answer(content=messages[-1]["content"]') + textwrap.dedent("""
        from pytest_qualify.hooks.qualify_fixtures import Recorder

        @pytest.fixture
        def qualify_record(request):
            return Recorder(request.node, load_profile(PROFILE))
    """))
    pytester.makepyfile(test_band=textwrap.dedent("""
        import pytest
        from pytest_qualify.tasks.fixture_data import finish_prompts, reasoning_prompts

        SUM = next(p for p in finish_prompts() if p.id == "sum").contract
        PLANET = next(p for p in finish_prompts() if p.id == "planet").contract
        TRAIN = next(p for p in reasoning_prompts() if p.id == "train")
        WORKING = "Step 1: take the first number, 12. " * 12 + "So 12 + 30 = 42."

        @pytest.mark.qualify_module("finish")
        def test_long_invited_working(qualify_ask, request):
            assert len(WORKING) > 400
            qualify_ask(WORKING + "\\n\\n**Answer:** 42", contract=SUM)
            props = dict(request.node.user_properties)
            assert (props["length_chars"], props["length_measured"]) == (len("**Answer:** 42"), "answer line")

        @pytest.mark.qualify_module("finish")
        def test_padding_after_the_answer_line(qualify_ask):
            qualify_ask("12 + 30 = 42.\\nANSWER: 42" + " " * 1000, contract=SUM)

        @pytest.mark.qualify_module("finish")
        def test_padded_whole_reply(qualify_ask):
            qualify_ask("Jupiter" + " " * 1000, contract=PLANET)

        @pytest.mark.qualify_module("reasoning")
        def test_reasoning_answer_has_no_band_here(qualify_ask, request):
            qualify_ask(WORKING + "\\nANSWER: 5 pm", grade=lambda answer: None)
            assert "length_chars" not in dict(request.node.user_properties)
    """))
    result = pytester_run(pytester)
    result.assert_outcomes(passed=2, failed=2)
    result.stdout.fnmatch_lines([
        "*_ test_padding_after_the_answer_line _*",
        "length band: answer line of 1010 characters is longer than the finish band [1, 400]: padded",
        "*_ test_padded_whole_reply _*",
        "length band: visible answer of 1007 characters is longer than the finish band [1, 400]: padded",
    ])
