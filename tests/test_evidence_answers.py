"""evidence/answers.py: the answer journal, and its run-end row — the integrity module's sampled
requests held to every answer the run gave them, also those asked after the integrity module."""

from __future__ import annotations

from pathlib import Path

from pytest_qualify.evidence.answers import HELD_TITLE, append, answers_to, held_to_the_end, request_key
from pytest_qualify.graders.integrity import RecordedAnswer, parsed_calls
from pytest_qualify.client.endpoint import ToolCall

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
