"""evidence/jsonl.py: the run folder's shared JSON-lines files (the answer journal, the transcripts)."""

from __future__ import annotations

import json
import multiprocessing

from pytest_qualify.evidence.jsonl import append_line, read_lines


def _write_many(path: str, worker: int) -> None:
    from pathlib import Path

    for i in range(200):
        append_line(Path(path), json.dumps({"worker": worker, "i": i, "pad": "x" * 500}))


def test_a_missing_file_reads_empty_and_a_cut_line_is_skipped(tmp_path):
    path = tmp_path / "answers.jsonl"
    assert read_lines(path) == []
    append_line(path, json.dumps({"a": 1}))
    with open(path, "a", encoding="utf-8") as fh:
        fh.write('{"b": ')  # a worker killed mid-line
    append_line(path, json.dumps({"c": 3}))
    assert read_lines(path) == [{"a": 1}]  # the cut line swallowed the next one's start: both skipped
    path.write_text('{"a": 1}\n{"b": \n{"c": 3}\n')
    assert read_lines(path) == [{"a": 1}, {"c": 3}]


def test_lines_from_several_processes_stay_whole(tmp_path):
    path = tmp_path / "transcripts.jsonl"
    procs = [multiprocessing.Process(target=_write_many, args=(str(path), w)) for w in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
    records = read_lines(path)
    assert len(records) == 600 and len(path.read_text().splitlines()) == 600
    assert {(r["worker"], r["i"]) for r in records} == {(w, i) for w in range(3) for i in range(200)}
