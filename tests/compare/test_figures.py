"""compare/figures.py: a boot's figures by id, the figures it could not measure (with the reason,
never a number), and the figures a profile's timing stage will produce (``ab``'s check before any
boot). The packaged A/B pairs gate one figure per property, each one their timing stage produces."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_qualify.bundle_format.workload import differences
from pytest_qualify.compare.figures import figures_of, not_measurable, timing_figures, unproducible_gates
from pytest_qualify.profiles import load_profile

PAIRS = [("262k-gpu", "262k-gpu-eager"), ("tiny-cpu-ab", "tiny-cpu-ab-slow")]


def _spread(value: float) -> dict:
    return {"median": value, "n": 1}


def _summary(*, probes_whole: int = 0, tpot: float | None = 0.004, engine: float | None = None,
             sweep_ttft: float | None = 0.2, decode: float | None = 300.0, engine_ttft: float | None = None) -> dict:
    level = {"concurrency": 1, "repetitions": 1, "requests": 10, "failed": 0, "batch_variance": 0,
             "probes": 8 - probes_whole, "probes_whole": probes_whole, "tpot_s_p50": tpot,
             "ttft_s_p50": None if tpot is None else 0.01, "output_tok_s": 250.0, "engine_tpot_s_mean": engine}
    return {"timing": {
        "lanes": [{"lane": "32K", "ttft_s": _spread(1.5), "e2e_s": _spread(2.0), "prefill_tok_s": _spread(20000.0),
                   "decode_tok_s": _spread(180.0)}],
        "load": {"label": "x", "probe_tokens": 256, "levels": [level]},
        "sweep": {"label": "x",
                  "points": [{"prompt_tokens": 2048, "samples": 5 if sweep_ttft else 0, "ttft_s": sweep_ttft,
                              "prefill_tok_s": 2048 / sweep_ttft if sweep_ttft else None, "engine_ttft_s": engine_ttft}],
                  "decode": [{"prompt_tokens": 512, "output_tokens": 128, "samples": 3 if decode else 0,
                              "decode_tok_s": decode}]}}}


def test_a_lane_gives_no_decode_figure_and_says_why():
    figures = figures_of(_summary())
    assert {"lane.32K.ttft_s", "lane.32K.e2e_s", "lane.32K.prefill_tok_s"} <= set(figures)
    assert "lane.32K.decode_tok_s" not in figures
    reason = not_measurable(_summary())["lane.32K.decode_tok_s"]
    assert reason.startswith("not measurable here: ") and "needle" in reason and "load.c1.tpot_s_p50" in reason


def test_a_level_whose_probes_all_came_whole_has_no_stream_figure_only_a_reason():
    whole = _summary(probes_whole=8, tpot=None)
    figures = figures_of(whole)
    assert "load.c1.tpot_s_p50" not in figures and "load.c1.ttft_s_p50" not in figures
    assert figures["load.c1.output_tok_s"].value == 250.0  # a throughput is no stream figure
    reasons = not_measurable(whole)
    assert "came whole in one chunk" in reasons["load.c1.tpot_s_p50"] and "8 in all" in reasons["load.c1.tpot_s_p50"]
    # A level whose probes streamed has its figure and no reason.
    assert figures_of(_summary())["load.c1.tpot_s_p50"].value == 0.004
    assert "load.c1.tpot_s_p50" not in not_measurable(_summary())


def test_the_engines_own_tpot_is_a_figure_where_the_server_reports_one():
    figures = figures_of(_summary(probes_whole=8, tpot=None, engine=0.0029))
    f = figures["load.c1.engine_tpot_s_mean"]
    assert (f.value, f.unit, f.better) == (0.0029, "s", "lower") and "engine" in f.title
    assert "load.c1.engine_tpot_s_mean" not in figures_of(_summary())


def test_the_engines_own_ttft_at_a_sweep_size_stays_a_figure_when_every_sample_came_whole():
    figures = figures_of(_summary(sweep_ttft=None, engine_ttft=0.031))
    f = figures["sweep.p2048.engine_ttft_s"]
    assert (f.value, f.unit, f.better) == (0.031, "s", "lower") and "sweep.p2048.ttft_s" not in figures


def test_a_sweep_size_with_no_sample_streamed_is_not_measurable():
    summary = _summary(sweep_ttft=None, decode=None)
    figures = figures_of(summary)
    assert not any(f.startswith("sweep.") for f in figures)
    reasons = not_measurable(summary)
    assert {"sweep.p2048.ttft_s", "sweep.p2048.prefill_tok_s", "sweep.decode.p512.decode_tok_s"} <= set(reasons)
    assert all(reasons[k].startswith("not measurable here") for k in reasons)


@pytest.mark.parametrize("a_name,b_name", PAIRS)
def test_a_packaged_pair_gates_one_figure_per_property_that_its_timing_stage_produces(a_name, b_name):
    a, b = load_profile(a_name), load_profile(b_name)
    assert a.ab == b.ab
    assert differences(a.workload("timing"), b.workload("timing")) == []
    ttft, decode, throughput = a.ab.figures
    top = a.load.levels[-1]
    # Timed by the engine: a stream that comes whole (the GPU recipe's tool parser) leaves them measurable.
    assert ttft.startswith("sweep.p") and ttft.endswith(".engine_ttft_s")
    assert decode == "load.c1.engine_tpot_s_mean" and throughput == f"load.c{top}.output_tok_s"
    assert int(ttft.split(".")[1][1:]) in a.sweep.prompt_tokens
    # Enough samples per boot: medians over several probes or samples, and probes long enough to time.
    assert a.sweep.samples >= 5 and a.load.probes_per_level >= 6 and a.load.probe_tokens >= 64
    # The sweep's decode probe runs too (an empty parameter set would be a skipped item, a failed boot).
    assert a.sweep.decode_prompt_tokens and a.sweep.decode_tokens >= 64 and a.sweep.decode_samples >= 3
    for p in (a, b):
        assert unproducible_gates(p.ab.figures, p) == []
        assert not any(f.startswith("lane.") and f.endswith("decode_tok_s") for f in timing_figures(p))


def test_the_pairs_differ_in_their_one_setting():
    gpu, eager = load_profile("262k-gpu"), load_profile("262k-gpu-eager")
    assert list(eager.serve.args) == [*gpu.serve.args, "--enforce-eager"] and eager.serve.env == gpu.serve.env
    recipe, slow = load_profile("tiny-cpu-ab"), load_profile("tiny-cpu-ab-slow")
    # The slow arm: the recipe plus vLLM's logits-processor flag naming the step delay, the delay, and
    # the engine's path to it (the package's fixtures folder, filled in at launch).
    assert list(slow.serve.args) == [*recipe.serve.args, "--logits-processors", "qualify_step_delay:StepDelay"]
    assert set(slow.serve.env) - set(recipe.serve.env) == {
        ("PYTHONPATH", "{fixtures}/vllm_plugins"), ("QUALIFY_STEP_DELAY_MS", "6")}
    assert set(recipe.serve.env) <= set(slow.serve.env)
    assert recipe.ab == slow.ab


def test_the_slow_arms_engine_plugin_is_in_the_launched_engines_path(tmp_path):
    from importlib import resources

    from pytest_qualify.server.target import launch_spec
    from pytest_qualify.settings import Settings

    spec = launch_spec(load_profile("tiny-cpu-ab-slow"), Settings("tiny-cpu-ab-slow", 1, None, "QUALIFY_API_KEY", tmp_path,
                                                               None, None), tmp_path, None)
    plugins = Path(spec.env["PYTHONPATH"])
    assert plugins == Path(str(resources.files("pytest_qualify.fixtures"))) / "vllm_plugins"
    assert (plugins / "qualify_step_delay.py").is_file()
    assert spec.argv[spec.argv.index("--logits-processors") + 1] == "qualify_step_delay:StepDelay"


def test_a_gate_the_timing_stage_cannot_produce_is_named_with_why():
    gpu = load_profile("262k-gpu")
    (lane,) = unproducible_gates(["lane.*.decode_tok_s"], gpu)
    assert "'lane.*.decode_tok_s'" in lane and "needle" in lane and "timing stage of profile 262k-gpu" in lane
    (size,) = unproducible_gates(["sweep.p2048.ttft_s"], gpu)  # the sweep runs at 32,768 only
    assert "'sweep.p2048.ttft_s'" in size
    tiny = load_profile("tiny-cpu")  # smoke, context, window: no load module in its timing stage
    (load,) = unproducible_gates(["load.c1.tpot_s_p50"], tiny)
    assert "load module is not in its timing stage" in load
    assert unproducible_gates(["lane.*.ttft_s", "facts.startup_s"], tiny) == []


@pytest.mark.parametrize("gate,says", [
    ("lane.*.decode_tok_s", "a lane's answer is a short needle value"),
    ("sweep.p4096.ttft_s", "'sweep.p4096.ttft_s' is no figure the timing stage of profile 262k-gpu produces"),
])
def test_ab_refuses_a_gate_the_timing_stage_cannot_produce_before_any_boot(tmp_path, capsys, gate, says):
    from pytest_qualify.__main__ import main

    out = tmp_path / "ab"
    code = main(["ab", "262k-gpu", "262k-gpu-eager", "--gate", gate, "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 4 and says in captured.err
    assert len(captured.err.strip().splitlines()) == 1 and captured.err.startswith("ab: ")
    assert not out.exists() and "boot 1/" not in captured.out  # no server started, no boot folder
