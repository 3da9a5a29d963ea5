"""End to end through pytester against the reference server streaming every answer whole, in one
chunk with its finish (``--stream-whole``: vLLM 0.32.0 with a tool parser on, engines.toml): the
sweep module's samples and the load module's answers are checked as every other streamed answer is.
A finding by default (the run passes and says so); a FAIL of exactly those items where the profile
sets ``[integrity] incremental_streaming = "required"``. Every streamed answer's transcript keeps its
tokens per chunk and whether it came whole."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ..helpers import QualifyPytest, junit_failures, suite, write_profile

MODULES = ["sweep", "load"]
SWEEP = """
[sweep]
prompt_tokens = [512]
samples = 2
output_tokens = 16
decode_prompt_tokens = 512
decode_tokens = 16
decode_samples = 2
"""


def _profile(directory: Path, required: bool) -> Path:
    path = write_profile(directory, MODULES)
    text = path.read_text() + SWEEP
    if required:
        text = re.sub(r"(?m)^\[integrity\]\n", '[integrity]\nincremental_streaming = "required"\n', text, count=1)
    path.write_text(text)
    return path


@pytest.fixture
def whole(monkeypatch):
    # The launched reference server reads its switch from the environment the inner run passes on.
    monkeypatch.setenv("QUALIFY_REFERENCE_STREAM_WHOLE", "1")


def test_answers_that_came_whole_are_a_finding_by_default(qualify_pytest: QualifyPytest, whole):
    result = qualify_pytest(profile=_profile(qualify_pytest.pytester.path, required=False), suites=suite(*MODULES))
    assert result.ret == 0, result.stdout.str()[-3000:]
    items = qualify_pytest.item_properties()
    sweep = {n: p for n, p in items.items() if n.startswith(("test_ttft_sweep[", "test_decode_probe["))}
    assert len(sweep) == 2 and all(p["sweep_whole_at_finish"] == "2" for p in sweep.values()), sweep
    assert all("in one chunk with the finish" in p["stream_incremental"] for p in sweep.values())
    (load,) = [p for n, p in items.items() if n.startswith("test_load[")]
    # Every probe (4 a level, 3 levels) came whole; a short answer may honestly fit one chunk.
    assert int(load["load_whole_at_finish"]) >= 12 and "decode probe" in load["stream_incremental"], load
    summary = qualify_pytest.summary()
    assert summary["timing"]["streaming"]["whole_at_finish"] >= 1, summary["timing"]["streaming"]
    report = (qualify_pytest.run_dir() / "report.md").read_text()
    assert "arrived whole in one chunk with their finish" in report and "load: " in report
    # The transcripts: every streamed answer says how its output came.
    lines = [json.loads(x) for x in (qualify_pytest.run_dir() / "transcripts.jsonl").read_text().splitlines()]
    streamed = [x["answer"]["stream"] for x in lines if x.get("answer") and x["answer"]["stream"]]
    assert streamed and all(s["whole_at_finish"] is True and s["output_chunks"] == 1 for s in streamed), streamed[:2]
    assert all(s["tokens_per_chunk"] == 16 for s in streamed), streamed[:2]


def test_answers_that_came_whole_fail_where_the_profile_requires_incremental_streaming(
        qualify_pytest: QualifyPytest, whole):
    result = qualify_pytest(profile=_profile(qualify_pytest.pytester.path, required=True), suites=suite(*MODULES))
    assert result.ret == 1, result.stdout.str()[-3000:]
    result.stdout.fnmatch_lines(["*QUALIFICATION: FAIL*"])
    failures = {name: text for name, text in junit_failures(qualify_pytest.junit).items() if not name.startswith("qualify")}
    assert {name.split("[")[0] for name in failures} == {"test_ttft_sweep", "test_decode_probe", "test_load"}, failures
    for name, text in failures.items():
        assert "sample 1: stream contract: all 16 output tokens arrived in one chunk" in text or "test_load" in name, text
        assert "the profile requires incremental streaming" in text, text
    (load,) = [text for name, text in failures.items() if name.startswith("test_load[")]
    assert re.search(r"c=1, request \d+ \(decode probe\): stream contract: all 32 output tokens arrived in one chunk", load)
