"""End to end against the reference server streaming every answer whole, in one chunk with its finish
(``--stream-whole``, as vLLM with a tool parser on): the load module's probes and the sweep's samples
give no TTFT, TPOT or decode figure (a stream that came whole times no decode), and compare's reading
of the bundle says "not measurable here" with the reason instead of a number; the engine's own TTFT
(its /metrics histogram around the samples) is still a figure."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_qualify.compare.figures import figures_of, not_measurable

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
    if not whole:
        assert all(level["probes_whole"] == 0 and level["tpot_s_p50"] > 0 for level in levels), levels
        assert {"load.c1.tpot_s_p50", "sweep.p512.ttft_s", "sweep.p512.engine_ttft_s",
                "sweep.decode.p512.decode_tok_s"} <= set(figures)
        assert not any(k.startswith(("load.", "sweep.")) for k in reasons), reasons
        return
    assert all(level["probes_whole"] == 4 and level["probes"] == 0 and level["tpot_s_p50"] is None
               for level in levels), levels
    assert "load.c1.tpot_s_p50" not in figures and "load.c1.output_tok_s" in figures
    # The engine's own TTFT (the reference server keeps vLLM's TTFT histogram) is the one sweep figure left.
    assert [k for k in figures if k.startswith("sweep.")] == ["sweep.p512.engine_ttft_s"], sorted(figures)
    assert "every decode probe at concurrency 1 (4 in all) came whole in one chunk" in reasons["load.c1.tpot_s_p50"]
    assert reasons["sweep.p512.ttft_s"].startswith("not measurable here")
    assert reasons["sweep.decode.p512.decode_tok_s"].startswith("not measurable here")
    (point,) = summary["timing"]["sweep"]["points"]
    assert point["samples"] == 0 and point["ttft_s"] is None and point["measured_prompt_tokens"] == [512]
