"""evidence/answers.py: the answer journal, and its run-end row — the integrity module's sampled
requests held to every answer the run gave them, also those asked after the integrity module."""

from __future__ import annotations

from pathlib import Path

from pytest_qualify.evidence.answers import (
    HELD, HELD_TITLE, REASKED, TIMED, append, answers_to, held_to_the_end, request_key, timed_answers,
)
from pytest_qualify.graders.integrity import RecordedAnswer, parsed_calls
from pytest_qualify.client.answer import ToolCall

MESSAGES = [{"role": "user", "content": "Which planet is largest?"}]
KEY = request_key(MESSAGES, {"max_tokens": 64, "temperature": 0, "cache_salt": "a", "stream": True})


def _journal(run_dir: Path, *answers: tuple[str, str | None, str]) -> None:
    for test, content, role in answers:
        append(run_dir, KEY, RecordedAnswer(test, "streamed" in test, content, (), "stop"), role=role)


def test_the_key_leaves_out_what_two_honest_asks_may_differ_in():
    assert KEY == request_key(MESSAGES, {"max_tokens": 64, "temperature": 0, "cache_salt": "b", "timeout_s": 9})
    assert KEY != request_key(MESSAGES, {"max_tokens": 65, "temperature": 0})


def test_a_run_whose_sampled_answers_all_agree_passes(tmp_path):
    _journal(tmp_path, ("test_finish_state[rep1of1-planet-streamed]", "Jupiter", "answer"),
             ("test_answer_held_through_run[rep1of1-finish-planet]", "Jupiter", HELD),
             ("test_reasoning_leak[rep1of1-planet]", "Jupiter", "answer"))
    row = held_to_the_end(tmp_path)
    assert row.ok and row.title == HELD_TITLE and row.measured == "3 answers to 1 sampled requests, all equal"


def test_an_answer_changed_after_the_integrity_module_ran_fails_the_row(tmp_path):
    # The integrity module held its answer to the earlier ones; a later module got another model's.
    _journal(tmp_path, ("test_finish_state[rep1of1-planet-plain]", "Jupiter", "answer"),
             ("test_answer_held_through_run[rep1of1-finish-planet]", "Jupiter", HELD),
             ("test_tools_late[rep1of1-planet]", "JUPITER", "answer"))
    row = held_to_the_end(tmp_path)
    assert not row.ok and row.measured is not None
    assert "test_tools_late[rep1of1-planet] (answer 3 of 3 to the same request)" in row.reason
    assert "'JUPITER'" in row.reason and "'Jupiter'" in row.reason
    assert "test_finish_state[rep1of1-planet-plain]" in row.reason


def test_only_sampled_requests_are_held_and_no_sample_means_no_row(tmp_path):
    other = request_key([{"role": "user", "content": "a diff"}], {})
    append(tmp_path, other, RecordedAnswer("test_diff[rep1of1-a]", False, "x", (), "stop"))
    append(tmp_path, other, RecordedAnswer("test_diff[rep2of1-a]", False, "y", (), "stop"))
    assert held_to_the_end(tmp_path) is None
    _journal(tmp_path, ("test_answer_held_through_run[rep1of1-finish-planet]", "Jupiter", HELD))
    assert held_to_the_end(tmp_path).ok  # the unsampled request's two answers are its own module's business


def test_calls_are_held_as_parsed_values(tmp_path):
    calls = parsed_calls([ToolCall("f", '{"a": 1, "b": "x"}')])
    same = parsed_calls([ToolCall("f", '{"b":"x","a":1.0}')])
    other = parsed_calls([ToolCall("f", '{"a": true, "b": "x"}')])
    for test, c, role in (("test_answer_held_through_run[rep1of1-tools-f]", calls, HELD),
                          ("test_tools[rep1of1-f]", same, "answer")):
        append(tmp_path, KEY, RecordedAnswer(test, False, None, c, "tool_calls"), role=role)
    assert held_to_the_end(tmp_path).ok
    append(tmp_path, KEY, RecordedAnswer("test_tools[rep2of1-f]", False, None, other, "tool_calls"))
    assert not held_to_the_end(tmp_path).ok
    assert len(answers_to(tmp_path, KEY)) == 3


# -- the timing phase (TEST01): a context lane's timed answer held to its re-ask -------------------

LANE = request_key([{"role": "user", "content": "<document>...</document> What is the code?"}], {"max_tokens": 64})


def test_the_lane_salt_is_kept_for_the_re_ask_and_never_keys(tmp_path):
    append(tmp_path, LANE, RecordedAnswer("test_context_retrieval[32K-rep1of1]", True, "4417", (), "stop"), salt="s-1", role=TIMED)
    append(tmp_path, LANE, RecordedAnswer("test_other[rep1of1]", True, "4417", (), "stop"), salt="s-2")
    ((answer, salt),) = timed_answers(tmp_path, LANE)  # only the context module's answers are timed ones
    assert answer.content == "4417" and answer.streamed and salt == "s-1"
    assert timed_answers(tmp_path, KEY) == []


def test_a_timed_answer_held_to_its_re_ask_is_counted_apart(tmp_path):
    _journal(tmp_path, ("test_answer_held_through_run[rep1of1-finish-planet]", "Jupiter", HELD))
    append(tmp_path, LANE, RecordedAnswer("test_context_retrieval[32K-rep1of1]", True, "4417", (), "stop"), role=TIMED)
    append(tmp_path, LANE, RecordedAnswer("test_timed_answer_held[32K-rep1of1]", False, "4417", (), "stop"), role=REASKED)
    row = held_to_the_end(tmp_path)
    assert row.ok and row.measured == "3 answers to 1 sampled requests and 1 timed context-lane requests, all equal"


def test_a_run_with_only_timed_requests_says_so(tmp_path):
    # -k "context or timed_answer": the integrity module's samples did not run.
    append(tmp_path, LANE, RecordedAnswer("test_context_retrieval[1K-rep1of1]", True, "4417", (), "stop"), role=TIMED)
    append(tmp_path, LANE, RecordedAnswer("test_timed_answer_held[1K-rep1of1]", False, "4417", (), "stop"), role=REASKED)
    assert held_to_the_end(tmp_path).measured == "2 answers to 1 timed context-lane requests, all equal"


def test_a_timed_answer_that_differs_fails_the_row_with_both_answers(tmp_path):
    # Under xdist the re-ask may come first: the lane's answer is then the later one, held to it.
    append(tmp_path, LANE, RecordedAnswer("test_timed_answer_held[32K-rep1of1]", False, "4418", (), "stop"), role=REASKED)
    append(tmp_path, LANE, RecordedAnswer("test_context_retrieval[32K-rep1of1]", True, "**4417**", (), "stop"), role=TIMED)
    row = held_to_the_end(tmp_path)
    assert not row.ok and row.measured is not None
    assert "test_context_retrieval[32K-rep1of1] (answer 2 of 2" in row.reason
    assert "'**4417**'" in row.reason and "'4418'" in row.reason


def test_a_re_ask_without_the_lane_answer_leaves_the_row_unmeasured(tmp_path):
    # The integrity item held the re-ask to its own stream only (the context lane never ran): the
    # timing phase was not held, and the row says so instead of passing.
    append(tmp_path, LANE, RecordedAnswer("test_timed_answer_held[32K-rep1of1]", True, "4417", (), "stop"), role=REASKED)
    append(tmp_path, LANE, RecordedAnswer("test_timed_answer_held[32K-rep1of1]", False, "4417", (), "stop"), role=REASKED)
    row = held_to_the_end(tmp_path)
    assert not row.ok and row.measured is None
    assert "the timing phase was not held for test_timed_answer_held[32K-rep1of1]" in row.reason


def test_the_row_finds_its_answers_by_role_not_by_test_name(tmp_path):
    # A suite test renamed keeps its role: the row still holds its request, and a test whose name
    # looks like the integrity module's holds nothing without the role.
    append(tmp_path, KEY, RecordedAnswer("test_renamed_sample[rep1of1-planet]", False, "Jupiter", (), "stop"), role=HELD)
    append(tmp_path, KEY, RecordedAnswer("test_tools[rep1of1-planet]", False, "JUPITER", (), "stop"))
    assert not held_to_the_end(tmp_path).ok
    other = request_key([{"role": "user", "content": "a diff"}], {})
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    append(fresh, other, RecordedAnswer("test_answer_held_through_run[rep1of1-x]", False, "x", (), "stop"))
    assert held_to_the_end(fresh) is None


def test_an_unknown_role_is_refused(tmp_path):
    import pytest

    with pytest.raises(ValueError, match="journal role 'sampled'"):
        append(tmp_path, KEY, RecordedAnswer("t", False, "x", (), "stop"), role="sampled")


def test_the_journal_the_proxy_and_the_result_cache_share_one_definition_of_the_same_request():
    from pytest_qualify.reference.steer_forcing import request_key as proxy_key
    from pytest_qualify.request_key import request_key as same_request

    params = {"max_tokens": 64, "temperature": 0, "cache_salt": "a", "stream": True}
    assert request_key(MESSAGES, params) == same_request({"messages": MESSAGES, **params})
    body = {"messages": MESSAGES, **params}
    assert proxy_key(body) == proxy_key({**body, "max_tokens": 9}) == same_request(body, without_limit=True)
    assert same_request(body) != same_request({**body, "max_tokens": 9})  # the journal's key keeps the limit


def test_an_answer_and_a_verdict_each_leave_their_journal_and_transcript_lines_in_one_call(tmp_path):
    from pytest_qualify.evidence import answers, transcripts
    from pytest_qualify.graders import SlotRead, Verdict

    asked = transcripts.asked_record("t::a", KEY, MESSAGES, {"max_tokens": 64}, error="ServerGone: gone")
    answers.record(tmp_path, asked, None)  # no answer came: only its transcript line
    answers.record(tmp_path, {**asked, "error": None}, RecordedAnswer("a", True, "Jupiter", (), "stop"), salt="a")
    assert [a.content for a in answers_to(tmp_path, KEY)] == ["Jupiter"]
    answers.record_verdict(tmp_path, "t::a", Verdict.reject("wrong").with_slots(SlotRead("answer", "Saturn")))
    assert answers.graded_tests(tmp_path) == {"t::a"}
    story = transcripts.by_item(transcripts.read(tmp_path))["t::a"]
    assert len(story[transcripts.ASKED]) == 2 and story[transcripts.SLOTS] == [
        {"name": "answer", "slot": "Saturn", "format_error": None}]
