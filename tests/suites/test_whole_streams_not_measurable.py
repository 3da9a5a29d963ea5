"""End to end against the reference server streaming every answer whole, in one chunk with its finish
(``--stream-whole``, as vLLM with a tool parser on): the load module's probes and the sweep's samples
give no client TTFT, TPOT or decode figure (a stream that came whole times no decode), and compare's
reading of the bundle says "not measurable here" with the reason instead of a number. Where the
engine's own timing exists (its /metrics histograms, which the reference server keeps), the figure
uses it instead and says so: the sweep's TTFT at a prompt size, and each context lane's TTFT for its
one request (``ttft_source`` "engine /metrics", the client's first chunk kept beside it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_qualify.compare.figures import figures_of, not_measurable
from pytest_qualify.evidence.metrics import held_stream
from pytest_qualify.graders.answer_checks import INCREMENTAL_MIN_TOKENS

from ..helpers import QualifyPytest, suite, write_profile

SWEEP = """
[sweep]
prompt_tokens = [512]
samples = 2
output_tokens = 16
decode_prompt_tokens = 512
decode_tokens = 16
decode_samples = 2
"""


def _profile(directory: Path) -> Path:
    path = write_profile(directory, ["sweep", "load"])
    path.write_text(path.read_text() + SWEEP)
    return path


@pytest.mark.parametrize("whole", [True, False], ids=["whole", "streamed"])
def test_a_stream_that_came_whole_gives_no_decode_figure(qualify_pytest: QualifyPytest, monkeypatch, whole):
    if whole:
        monkeypatch.setenv("QUALIFY_REFERENCE_STREAM_WHOLE", "1")
    result = qualify_pytest(profile=_profile(qualify_pytest.pytester.path), suites=suite("sweep", "load"))
    assert result.ret == 0, result.stdout.str()[-3000:]
    summary = qualify_pytest.summary()
    levels = summary["timing"]["load"]["levels"]
    figures, reasons = figures_of(summary), not_measurable(summary)
    (point,) = summary["timing"]["sweep"]["points"]
    if not whole:
        assert all(level["probes_whole"] == 0 and level["tpot_s_p50"] > 0 for level in levels), levels
        assert {"load.c1.tpot_s_p50", "sweep.p512.ttft_s", "sweep.p512.engine_ttft_s",
                "sweep.decode.p512.decode_tok_s"} <= set(figures)
        assert not any(k.startswith(("load.", "sweep.")) for k in reasons), reasons
        assert point["ttft_source"] == "client chunks" and point["samples"] == 2
        assert point["ttft_s"] == sorted(point["ttft_s_samples"])[0] + (sorted(point["ttft_s_samples"])[1]
                                                                       - sorted(point["ttft_s_samples"])[0]) / 2
        return
    assert all(level["probes_whole"] == 4 and level["probes"] == 0 and level["tpot_s_p50"] is None
               for level in levels), levels
    assert "load.c1.tpot_s_p50" not in figures and "load.c1.output_tok_s" in figures
    assert "every decode probe at concurrency 1 (4 in all) came whole in one chunk" in reasons["load.c1.tpot_s_p50"]
    # The engine's own TTFT (the reference server keeps vLLM's TTFT histogram) stands for the samples'
    # first chunks, which read the parser, and the point says so; the decode probe has no engine timing.
    assert point["samples"] == 0 and point["measured_prompt_tokens"] == [512]
    assert point["ttft_source"] == "engine /metrics" and point["ttft_s"] == point["engine_ttft_s"] > 0
    assert point["prefill_tok_s"] == 512 / point["engine_ttft_s"]
    assert [k for k in figures if k.startswith("sweep.")] == [
        "sweep.p512.ttft_s", "sweep.p512.prefill_tok_s", "sweep.p512.engine_ttft_s"], sorted(figures)
    assert "sweep.p512.ttft_s" not in reasons
    assert reasons["sweep.decode.p512.decode_tok_s"].startswith("not measurable here")
    assert "TTFT at the first chunk" in (qualify_pytest.run_dir() / "report.md").read_text()
    assert "(engine /metrics: every sample came whole, its first chunk read the parser)" in \
        (qualify_pytest.run_dir() / "report.md").read_text()


@pytest.mark.parametrize("whole", [True, False], ids=["whole", "streamed"])
def test_a_lane_says_where_its_ttft_came_from(qualify_pytest: QualifyPytest, monkeypatch, whole):
    # The reference's lane answers are a needle's value: a few tokens, some 8 or more (the needle is
    # drawn from the run id). A whole answer below the held rule (evidence.metrics.held_stream) keeps
    # the client's first chunk as the lane's TTFT; one at or above it takes the engine's own TTFT for
    # its one request, the client's kept beside it. Streamed, every lane reads the client's chunks.
    if whole:
        monkeypatch.setenv("QUALIFY_REFERENCE_STREAM_WHOLE", "1")
    result = qualify_pytest(profile=write_profile(qualify_pytest.pytester.path, ["context"]), repeat=1,
                            suites=suite("context"))
    assert result.ret == 0, result.stdout.str()[-3000:]
    summary = qualify_pytest.summary()
    items = [i for i in summary["items"] if i.get("lane")]
    assert items
    held = {i["lane"]: held_stream(i["properties"]) for i in items}
    assert whole or not any(held.values()), held
    for i in items:
        props = i["properties"]
        shown = {k: v for k, v in props.items() if "ttft" in k or "whole" in k or k == "completion_tokens"}
        if held[i["lane"]]:
            assert props["ttft_source"] == "engine /metrics" and props["client_ttft_s"] > 0, shown
            assert props["completion_tokens"] >= INCREMENTAL_MIN_TOKENS and props["whole_at_finish"] is True, shown
        else:
            assert props["ttft_source"] == "client chunks" and "client_ttft_s" not in props, shown
        if whole:
            assert props["whole_at_finish"] is True, shown
    for lane in summary["timing"]["lanes"]:
        if held[lane["lane"]]:
            assert lane["ttft_source"] == "engine /metrics" and lane["ttft_s"] != lane["client_ttft_s"], lane
        else:
            assert lane["ttft_source"] == "client chunks" and lane["ttft_source_note"] is None, lane
            assert lane["ttft_s"] == lane["client_ttft_s"], lane
    assert "TTFT (first chunk)" in result.stdout.str()
