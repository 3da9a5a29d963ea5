"""evidence/answers.py: the answer journal, and its run-end row — the integrity module's sampled
requests held to every answer the run gave them, also those asked after the integrity module."""

from __future__ import annotations

from pathlib import Path

from pytest_qualify.evidence.answers import HELD_TITLE, append, answers_to, held_to_the_end, request_key, timed_answers
from pytest_qualify.graders.integrity import RecordedAnswer, parsed_calls
from pytest_qualify.client.answer import ToolCall

MESSAGES = [{"role": "user", "content": "Which planet is largest?"}]
KEY = request_key(MESSAGES, {"max_tokens": 64, "temperature": 0, "cache_salt": "a", "stream": True})


def _journal(run_dir: Path, *answers: tuple[str, str | None]) -> None:
    for test, content in answers:
        append(run_dir, KEY, RecordedAnswer(test, "streamed" in test, content, (), "stop"))


def test_the_key_leaves_out_what_two_honest_asks_may_differ_in():
    assert KEY == request_key(MESSAGES, {"max_tokens": 64, "temperature": 0, "cache_salt": "b", "timeout_s": 9})
    assert KEY != request_key(MESSAGES, {"max_tokens": 65, "temperature": 0})


def test_a_run_whose_sampled_answers_all_agree_passes(tmp_path):
    _journal(tmp_path, ("test_finish_state[rep1of1-planet-streamed]", "Jupiter"),
             ("test_answer_held_through_run[rep1of1-finish-planet]", "Jupiter"),
             ("test_reasoning_leak[rep1of1-planet]", "Jupiter"))
    row = held_to_the_end(tmp_path)
    assert row.ok and row.title == HELD_TITLE and row.measured == "3 answers to 1 sampled requests, all equal"


def test_an_answer_changed_after_the_integrity_module_ran_fails_the_row(tmp_path):
    # The integrity module held its answer to the earlier ones; a later module got another model's.
    _journal(tmp_path, ("test_finish_state[rep1of1-planet-plain]", "Jupiter"),
             ("test_answer_held_through_run[rep1of1-finish-planet]", "Jupiter"),
             ("test_tools_late[rep1of1-planet]", "JUPITER"))
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
    _journal(tmp_path, ("test_answer_held_through_run[rep1of1-finish-planet]", "Jupiter"))
    assert held_to_the_end(tmp_path).ok  # the unsampled request's two answers are its own module's business


def test_calls_are_held_as_parsed_values(tmp_path):
    calls = parsed_calls([ToolCall("f", '{"a": 1, "b": "x"}')])
    same = parsed_calls([ToolCall("f", '{"b":"x","a":1.0}')])
    other = parsed_calls([ToolCall("f", '{"a": true, "b": "x"}')])
    for test, c in (("test_answer_held_through_run[rep1of1-tools-f]", calls), ("test_tools[rep1of1-f]", same)):
        append(tmp_path, KEY, RecordedAnswer(test, False, None, c, "tool_calls"))
    assert held_to_the_end(tmp_path).ok
    append(tmp_path, KEY, RecordedAnswer("test_tools[rep2of1-f]", False, None, other, "tool_calls"))
    assert not held_to_the_end(tmp_path).ok
    assert len(answers_to(tmp_path, KEY)) == 3


# -- the timing phase (TEST01): a context lane's timed answer held to its re-ask -------------------

LANE = request_key([{"role": "user", "content": "<document>...</document> What is the code?"}], {"max_tokens": 64})


def test_the_lane_salt_is_kept_for_the_re_ask_and_never_keys(tmp_path):
    append(tmp_path, LANE, RecordedAnswer("test_context_retrieval[32K-rep1of1]", True, "4417", (), "stop"), salt="s-1")
    append(tmp_path, LANE, RecordedAnswer("test_other[rep1of1]", True, "4417", (), "stop"), salt="s-2")
    ((answer, salt),) = timed_answers(tmp_path, LANE)  # only the context module's answers are timed ones
    assert answer.content == "4417" and answer.streamed and salt == "s-1"
    assert timed_answers(tmp_path, KEY) == []


def test_a_timed_answer_held_to_its_re_ask_is_counted_apart(tmp_path):
    _journal(tmp_path, ("test_answer_held_through_run[rep1of1-finish-planet]", "Jupiter"))
    append(tmp_path, LANE, RecordedAnswer("test_context_retrieval[32K-rep1of1]", True, "4417", (), "stop"))
    append(tmp_path, LANE, RecordedAnswer("test_timed_answer_held[32K-rep1of1]", False, "4417", (), "stop"))
    row = held_to_the_end(tmp_path)
    assert row.ok and row.measured == "3 answers to 1 sampled requests and 1 timed context-lane requests, all equal"


def test_a_run_with_only_timed_requests_says_so(tmp_path):
    # -k "context or timed_answer": the integrity module's samples did not run.
    append(tmp_path, LANE, RecordedAnswer("test_context_retrieval[1K-rep1of1]", True, "4417", (), "stop"))
    append(tmp_path, LANE, RecordedAnswer("test_timed_answer_held[1K-rep1of1]", False, "4417", (), "stop"))
    assert held_to_the_end(tmp_path).measured == "2 answers to 1 timed context-lane requests, all equal"


def test_a_timed_answer_that_differs_fails_the_row_with_both_answers(tmp_path):
    # Under xdist the re-ask may come first: the lane's answer is then the later one, held to it.
    append(tmp_path, LANE, RecordedAnswer("test_timed_answer_held[32K-rep1of1]", False, "4418", (), "stop"))
    append(tmp_path, LANE, RecordedAnswer("test_context_retrieval[32K-rep1of1]", True, "**4417**", (), "stop"))
    row = held_to_the_end(tmp_path)
    assert not row.ok and row.measured is not None
    assert "test_context_retrieval[32K-rep1of1] (answer 2 of 2" in row.reason
    assert "'**4417**'" in row.reason and "'4418'" in row.reason


def test_a_re_ask_without_the_lane_answer_leaves_the_row_unmeasured(tmp_path):
    # The integrity item held the re-ask to its own stream only (the context lane never ran): the
    # timing phase was not held, and the row says so instead of passing.
    append(tmp_path, LANE, RecordedAnswer("test_timed_answer_held[32K-rep1of1]", True, "4417", (), "stop"))
    append(tmp_path, LANE, RecordedAnswer("test_timed_answer_held[32K-rep1of1]", False, "4417", (), "stop"))
    row = held_to_the_end(tmp_path)
    assert not row.ok and row.measured is None
    assert "the timing phase was not held for test_timed_answer_held[32K-rep1of1]" in row.reason
