"""The summary's ``timing.streaming`` and report.md's "Streaming" section: a streamed answer that came
whole with its finish is counted and named (at least ``INCREMENTAL_MIN_TOKENS`` tokens; a short one
may honestly fit a chunk), with the engine row's note where the version is characterised."""

from __future__ import annotations

from pytest_qualify.evidence import report
from pytest_qualify.evidence.summary import streaming_section
from pytest_qualify.graders.answer_checks import INCREMENTAL_MIN_TOKENS


def _item(name: str, tokens: int, chunks: int, whole: bool, source: str = "streamed") -> dict:
    return {"module": "finish", "item": name, "repetition": 1,
            "properties": {"timing_source": source, "output_chunks": chunks, "completion_tokens": tokens,
                           "tokens_per_chunk": tokens / chunks, "whole_at_finish": whole}}


def test_answers_that_came_whole_are_counted_named_and_explained():
    items = [_item("long-whole", 32, 1, True), _item("short-whole", INCREMENTAL_MIN_TOKENS - 1, 1, True),
             _item("as-decoded", 32, 32, False), _item("plain", 32, 1, True, source="non-streamed")]
    section = streaming_section(items, "0.32.0")
    assert (section["answers"], section["whole_at_finish"]) == (3, 1)
    assert section["whole_at_finish_items"] == ["finish: long-whole (repetition 1)"]
    assert section["tokens_per_chunk_max"] == 32 and "vLLM 0.32.0" in section["engine_note"]
    text = "\n".join(report._streaming(section))
    assert "1 streamed answer(s) arrived whole in one chunk with their finish" in text
    assert "finish: long-whole (repetition 1)" in text and "Engine behaviour: vLLM 0.32.0" in text


def test_no_finding_when_every_answer_streamed_as_decoded():
    section = streaming_section([_item("as-decoded", 32, 16, False)], "0.32.0")
    assert section["whole_at_finish"] == 0 and section["engine_note"] is None
    assert "arrived whole" not in "\n".join(report._streaming(section))
    assert streaming_section([_item("plain", 32, 1, True, source="non-streamed")]) is None


def test_the_load_and_sweep_items_count_each_answer_that_came_whole():
    # Neither item's timed answer is the one that came whole: they count their answers themselves.
    load = {"module": "load", "item": "test_load", "repetition": 1, "properties": {"load_whole_at_finish": 12}}
    sweep = {"module": "sweep", "item": "test_ttft_sweep[512tok]", "repetition": 1,
             "properties": {"sweep_whole_at_finish": 2}}
    none = {"module": "load", "item": "test_load", "repetition": 2, "properties": {"load_whole_at_finish": 0}}
    section = streaming_section([load, sweep, none])
    assert (section["answers"], section["whole_at_finish"]) == (0, 14)
    assert section["whole_at_finish_items"] == ["load: test_load (repetition 1): 12 of its answers",
                                                "sweep: test_ttft_sweep[512tok] (repetition 1): 2 of its answers"]
    assert "14 streamed answer(s) arrived whole" in "\n".join(report._streaming(section))
    assert streaming_section([none]) is None
