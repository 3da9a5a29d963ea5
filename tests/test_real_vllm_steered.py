"""The PASS path through a real engine: steered profiles (profile ``[steer]``) on real vLLM.

The plugin launches vLLM and the steering proxy in front of it (reference/steer.py); the proxy forces
the reference oracles' answers with vLLM's structured outputs, so vLLM's own tokenizer,
detokenizer, stream chunker, tool-call parsers (qwen3_coder, hermes), reasoning parser, usage
accounting and media pipeline carry known-correct answers to the plugin. Each run's verdict must
be PASS, or FAIL only on the engine behaviours listed here (``ENGINE_FAILS``), and every forced
answer must have come back exactly (``steer.jsonl``). A false FAIL of the plugin on a correct answer
shows up here as a failure outside that list.

- ``tiny-qwen3-steered``: every text module on a 16,384-token window (fast);
- the same with the ``wrong_tool_args`` fault: FAIL, on the tool calls' arguments only;
- ``mm-cpu-steered``: admission, malformed media, all 30 corpus items;
- ``262k-cpu-steered``: the 262k recipe, every module tiny-qwen3 serves, lanes 32K/128K/240K and the
  bracket at 262,144 (long: the 240K lane and the prompt that fits each take minutes of CPU prefill).
"""

from __future__ import annotations

import json

import pytest

from pytest_qualify.hooks.collection import suites_dir
from pytest_qualify.reference.steer import STEER_LOG
from .real_vllm import Run, finish, require_vllm, run_dir, start, summary

pytestmark = pytest.mark.real_vllm

# What vLLM 0.32.0 itself does that the contract forbids, per profile: (module, item) of every
# failure a steered run may show, each named as the engine's behaviour. Nothing else may fail.
ENGINE_FAILS = {
    "tiny-qwen3-steered": {},
    "262k-cpu-steered": {},
    "mm-cpu-steered": {
        ("media_admission", "test_malformed_media_refused[image-as-video]"):
            "vLLM 0.32.0 answers a PNG sent as video/mp4 with HTTP 500 (its OpenCV video decoder raises) "
            "instead of a 400 refusal",
    },
}


def _steered_run(profile: str, cwd, *args: str, timeout_s: float) -> Run:
    env = require_vllm(profile)
    run, proc = start(env, cwd, f"--qualify={profile}", "--repeat", "1", *args, str(suites_dir()))
    return finish(run, env, proc, timeout_s=timeout_s)


def _steer_rows(run: Run) -> list[dict]:
    return [json.loads(line) for line in (run_dir(run.evidence) / STEER_LOG).read_text().splitlines() if line]


def _check_steered_verdict(run: Run, profile: str) -> dict:
    """The verdict is PASS, or FAIL on exactly the engine's listed behaviours; every forced answer held."""
    assert "steering proxy ready at" in run.output, run.output[-3000:]
    data = summary(run.evidence)
    rows = _steer_rows(run)
    broken = [r for r in rows if r["status"] == 200 and r["forced"] and not r["held"]]
    assert not broken, broken[:5]
    assert sum(1 for r in rows if r["forced"] and r["held"]) > 0, rows[:5]
    failed = {(i["module"], i["item"]): i["reason"] for i in data["items"] if i["outcome"] != "passed"}
    expected = ENGINE_FAILS[profile]
    assert set(failed) == set(expected), json.dumps(failed, indent=1)
    assert data["verdict"]["result"] == ("FAIL" if expected else "PASS"), data["verdict"]
    assert run.code == (1 if expected else 0), run.output[-3000:]
    return data


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return _steered_run("tiny-qwen3-steered", tmp_path_factory.mktemp("steer-tiny"), timeout_s=2400.0)


def test_tiny_qwen3_steered_passes_every_text_module(tiny_run: Run):
    data = _check_steered_verdict(tiny_run, "tiny-qwen3-steered")
    modules = {i["module"] for i in data["items"]}
    assert modules == {"smoke", "json", "context", "window", "tools", "recall", "diff", "triage", "reasoning",
                       "finish", "robustness"}, modules


def test_steering_used_the_engines_own_paths(tiny_run: Run):
    rows = [r for r in _steer_rows(tiny_run) if r["forced"] and r["held"]]
    assert any("<tool_call>\n<function=" in r["forced_text"] for r in rows)  # qwen3_coder's parser made the calls
    assert any(r["stream"] for r in rows)
    assert any("response_format json_schema replaced" in c for r in rows for c in r["changes"])
    assert any("chat_template_kwargs" in c and "stripped" in c for r in rows for c in r["changes"])


def test_a_reference_fault_in_steering_mode_fails_for_the_right_reason(tmp_path_factory: pytest.TempPathFactory):
    run = _steered_run("tiny-qwen3-steered", tmp_path_factory.mktemp("steer-fault"),
                       "--qualify-reference-fault", "wrong_tool_args", "-k", "test_health or tools",
                       timeout_s=1800.0)
    data = summary(run.evidence)
    assert data["verdict"]["result"] == "FAIL", data["verdict"]
    assert run.code == 1
    failed = [i for i in data["items"] if i["outcome"] != "passed"]
    assert failed and {i["module"] for i in failed} == {"tools"}, failed
    assert all("argument" in i["reason"] or "arguments" in i["reason"] for i in failed
               if "irrelevan" not in i["item"]), [i["reason"] for i in failed]
    assert not [r for r in _steer_rows(run) if r["status"] == 200 and r["forced"] and not r["held"]]


def test_mm_cpu_steered_fails_only_on_the_engines_500(tmp_path_factory: pytest.TempPathFactory):
    run = _steered_run("mm-cpu-steered", tmp_path_factory.mktemp("steer-mm"), timeout_s=2400.0)
    data = _check_steered_verdict(run, "mm-cpu-steered")
    assert len([i for i in data["items"] if i["module"] == "multimodal"]) >= 30


def test_262k_cpu_steered_passes_the_recipe(tmp_path_factory: pytest.TempPathFactory):
    run = _steered_run("262k-cpu-steered", tmp_path_factory.mktemp("steer-262k"), timeout_s=5400.0)
    data = _check_steered_verdict(run, "262k-cpu-steered")
    lanes = sorted(i["lane"] for i in data["items"] if i["module"] == "context")
    assert lanes == ["128K", "240K", "32K"], lanes
