"""The PASS path through a real engine: steered profiles (profile ``[steer]``) on real vLLM.

The steering proxy (reference/steer.py) forces the reference oracles' answers with vLLM's structured
outputs, so vLLM's own tokenizer, detokenizer, stream chunker, tool-call parsers (qwen3_coder,
hermes), reasoning parser, usage accounting and media pipeline carry known-correct answers to the
plugin. Each conforming run's verdict must be PASS, or FAIL only on the engine behaviours listed here
(``ENGINE_FAILS``), and every forced answer must have come back exactly (``steer.jsonl``). A false
FAIL of the plugin on a correct answer shows up here as a failure outside that list.

What CI runs, and why in this shape (each vLLM start costs minutes of the CI budget):

- **262k, one vLLM for four looks** (``server_262k``, module scope): the 262k recipe on tiny-qwen3
  (``262k-cpu-steered``'s exact launch command) started once; each qualify run attaches to it
  through a steering proxy of its own, with its own fault switches and log:
  the conforming run (every text module, lanes 32K and 240K, the bracket at 262,144: the prompt that
  just fits and the over-window refusal; ``--repeat 1``; integrity too: its sample asks the short
  finish, reasoning and tool prompts, no lane or bracket prompt, and its result-cache probe is three
  prompts of the smallest lane, 32K), a ``wrong_tool_args`` run (tools only) and
  a ``drop_needle=32K`` run (the 32K lane only) that must FAIL for the right reason, and an
  unsteered run of the ``enable_thinking`` override straight at vLLM (the engine's own behaviour,
  with nothing in front to strip the caller's kwargs).
  The 128K lane stays in ``bench/bench_262k_cpu.py`` (the issue allows it: 240K is the heavier lane
  and the bracket is the window's edge). This replaces the unsteered ``262k-cpu`` launch-mode test,
  whose checks on the same server (recipe flags, identity, lanes sized by the real ``/tokenize``,
  zero cached tokens, the refusal above 262,144, liveness, a clean server log) are made here.
- **init** (``python -m pytest_qualify init``) probes the same server last: the probed values must
  equal the recipe's flags.
- **media**: ``test_real_vllm_media.py`` steers ``mm-cpu-steered`` through the media model's server
  (a module of its own, so that this module's vLLM is gone before that one starts).

``tiny-qwen3-steered`` (the same text modules on a 16,384-token window, 6–11 min) is the quick
profile for development; in CI the 262k server runs every one of its modules.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from pytest_qualify import engines
from pytest_qualify.hooks.collection import suites_dir
from pytest_qualify.profiles import load_profile
from pytest_qualify.reference.steer_log import STEER_LOG, incomplete_reasons
from ..real_vllm import (Run, Served, finish, items, kv_flag_here, one_item, probe, profile_copy, require_vllm,
                        served, start, steered_run, summary)

pytestmark = pytest.mark.real_vllm

# What the engine itself does that the contract forbids, per profile: (module, item) of every failure
# a steered run may show, each named as the engine's behaviour. Nothing else may fail. The cut tool
# call fails on every characterised version (0.32.0: not streamed; 0.26.0: streamed and not streamed,
# pytest_qualify/engines.toml); a version with no row fails the tests that read it, "not yet characterised".
CUT_CALL_TOOL_CALLS = ("the engine reports a tool call cut by max_tokens with finish_reason 'tool_calls' instead "
                      "of 'length' (pytest_qualify/engines.toml: cut_tool_call_finish)")
CUT_CALL_FAILS = {
    ("integrity", f"test_cut_tool_call_says_length[tools-{case}]"): CUT_CALL_TOOL_CALLS
    for case in ("flights_fra_sin_family", "parallel_weather_paris_nairobi")
}
ENGINE_FAILS = {
    "tiny-qwen3-steered": CUT_CALL_FAILS,
    "262k-cpu-steered": CUT_CALL_FAILS,
    "mm-cpu-steered": {
        ("media_admission", "test_malformed_media_refused[image-as-video]"):
            "vLLM 0.32.0 answers a PNG sent as video/mp4 with HTTP 500 (its OpenCV video decoder raises) "
            "instead of a 400 refusal",
    },
}
TEXT_MODULES = {"smoke", "json", "context", "window", "tools", "recall", "diff", "triage", "reasoning", "finish",
                "robustness", "integrity"}
WINDOW_262K = 262_144
# The conforming 262k run: two lanes of CPU prefill (32K, 240K) and the prompt that fits (261,888
# tokens); under the worst load measured here a 240K prefill took 12 min.
RUN_262K_TIMEOUT_S = 3600.0


def _steer_rows(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines() if line]


def check_steered_verdict(run: Run, profile: str, log: Path) -> dict:
    """The verdict is PASS, or FAIL on exactly the engine's listed behaviours; every forced answer held."""
    data = summary(run.evidence)
    rows = _steer_rows(log)
    broken = [r for r in rows if r["status"] == 200 and r["forced"] and not r["held"]]
    assert not broken, broken[:5]
    assert sum(1 for r in rows if r["forced"] and r["held"]) > 0, rows[:5]
    assert incomplete_reasons(log) == []
    failed = {(i["module"], i["item"]): i["reason"] for i in data["items"] if i["outcome"] != "passed"}
    expected = ENGINE_FAILS[profile]
    assert set(failed) == set(expected), json.dumps({" :: ".join(k): v for k, v in failed.items()}, indent=1)
    assert data["verdict"]["result"] == ("FAIL" if expected else "PASS"), data["verdict"]
    assert run.code == (1 if expected else 0), run.output[-3000:]
    return data


# -- 262k: one vLLM, four looks ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def server_262k(profile_262k: Path, tmp_path_factory: pytest.TempPathFactory):
    # The CI copy's recipe: 262k-cpu-steered's, but for the KV cache dtype on a CPU without AVX-512
    # (real_vllm.profile_copy).
    env = require_vllm(str(profile_262k))
    with served(env, tmp_path_factory.mktemp("vllm-262k"), "262k-cpu-steered (module)") as server:
        yield server


@pytest.fixture(scope="module")
def profile_262k(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """262k-cpu-steered for CI: its recipe, window and bracket unchanged, lanes 32K and 240K (the 128K
    lane is in the benchmark), 50 hostile requests instead of 200 (vLLM refuses each before decoding)."""
    return profile_copy(tmp_path_factory.mktemp("p262k"), "262k-cpu-steered", name="262k-cpu-steered-ci", replace={
        '[[limits.lanes]]\nname = "128K"\nprompt_tokens = 131072\n\n': "",
        '    "robustness", "integrity", "load",\n]\n': '    "robustness", "integrity", "load",\n]\nrobustness_examples = 50\n',
    })


@pytest.fixture(scope="module")
def run_262k(server_262k: Served, profile_262k: Path, tmp_path_factory: pytest.TempPathFactory) -> Run:
    return steered_run(server_262k, tmp_path_factory.mktemp("steer-262k"), profile_262k,
                       timeout_s=RUN_262K_TIMEOUT_S)


def test_262k_steered_passes_the_recipe(run_262k: Run):
    data = check_steered_verdict(run_262k, "262k-cpu-steered", run_262k.cwd / STEER_LOG)
    assert {i["module"] for i in data["items"]} == TEXT_MODULES | {"load"}
    assert sorted(i["lane"] for i in items(data, "context")) == ["240K", "32K"]
    assert one_item(data, "window", "test_prompt_that_fits_is_answered")["outcome"] == "passed"
    assert one_item(data, "window", "test_prompt_over_window_is_refused")["outcome"] == "passed"


def engine_of(run: Run) -> engines.EngineBehaviour:
    """The engine row for the version the run's server reported; not yet characterised: the test fails."""
    version = summary(run.evidence)["target"]["engine_version"]
    try:
        return engines.behaviour(version)
    except engines.NotCharacterised as exc:
        pytest.fail(str(exc))


def test_cut_tool_calls_came_back_cut_and_fail_on_the_engines_finish(run_262k: Run):
    # The proxy kept the integrity item's small max_tokens (steer.kept_for_cut): each cut answer is a
    # start of the forced call, held; each ends as the engine's version does (engines.toml: 0.32.0 says
    # 'length' streamed and 'tool_calls' not streamed, 0.26.0 'tool_calls' both ways).
    engine = engine_of(run_262k)
    ends = engine.cut_tool_call_finish
    rows = [r for r in _steer_rows(run_262k.cwd / STEER_LOG) if r.get("cut") is not None]
    assert len(rows) == 4 and all(r["held"] for r in rows), rows
    assert sorted((r["stream"], r["finish"]) for r in rows) == sorted(
        [(False, ends["plain"])] * 2 + [(True, ends["streamed"])] * 2)
    for (module, name) in CUT_CALL_FAILS:
        reason = one_item(summary(run_262k.evidence), module, name)["reason"]
        for how, key in (("(?<!not )streamed", "streamed"), ("not streamed", "plain")):
            said = re.search(how + r": a tool call cut at max_tokens \d+ \(of \d+ tokens\) ended with finish_reason "
                             r"'(\w+)', expected 'length'", reason)
            assert (said.group(1) if said else "length") == ends[key], reason
        # The failure names the engine's version, what it does and the upstream report.
        assert f"engine: vLLM {engine.version} ends a tool call cut by max_tokens" in reason, reason
        assert engine.cut_tool_call_upstream in reason, reason


def test_steering_used_the_engines_own_paths(run_262k: Run):
    rows = [r for r in _steer_rows(run_262k.cwd / STEER_LOG) if r["forced"] and r["held"]]
    assert any("<tool_call>\n<function=" in r["forced_text"] for r in rows)  # qwen3_coder's parser made the calls
    assert any(r["stream"] for r in rows)
    assert any("response_format json_schema replaced" in c for r in rows for c in r["changes"])
    assert any("chat_template_kwargs" in c and "stripped" in c for r in rows for c in r["changes"])


def test_the_recipe_is_served_with_every_flag(server_262k: Served):
    launched = server_262k.spec.display_command()
    for flag in ("--max-model-len 262144", "--max-num-seqs 1", kv_flag_here(),
                 """--limit-mm-per-prompt '{"image": 4, "video": 1}'""", "--enable-auto-tool-choice",
                 "--tool-call-parser qwen3_coder", "--reasoning-parser qwen3",
                 """--default-chat-template-kwargs '{"enable_thinking": false}'""", "--enable-prefix-caching",
                 "--enable-prompt-tokens-details", "--revision 4d7d59380f327b76e73bc71f40e0c589ad0ca1d5",
                 "--served-model-name agents-a1-fp8-mm-262k", "--dtype float32", "--enforce-eager"):
        assert flag in launched, (flag, launched)


def test_identity_and_window(run_262k: Run, server_262k: Served):
    models = summary(run_262k.evidence)["target"]["models"]
    assert models == [{"id": "agents-a1-fp8-mm-262k", "root": str(server_262k.env.model_dir),
                       "max_model_len": WINDOW_262K}]


def test_lanes_sized_by_the_real_tokenize_within_tolerance(run_262k: Run, server_262k: Served):
    limits = server_262k.env.profile.limits
    lanes = {lane.name: lane for lane in limits.lanes}
    for item in items(summary(run_262k.evidence), "context"):
        lane, props = lanes[item["lane"]], item["properties"]
        where = f"{item['item']}: {props}"
        assert abs(props["prompt_tokens"] - lane.prompt_tokens) <= limits.lane_tolerance_tokens, where
        # Computed from the run's calibration over its own frame and proven by the answer's usage, or
        # counted (to half the tolerance) after the answer refuted it.
        if props["lane_sizing"] == "computed, proven by usage.prompt_tokens":
            assert 0 <= props["tokenize_calls"] <= 3, where
        else:
            assert props["lane_sizing"].endswith("; counted"), where
            assert abs(props["sized_prompt_tokens"] - lane.prompt_tokens) <= limits.lane_tolerance_tokens // 2, where
            assert 1 <= props["tokenize_calls"] <= 9, where
        assert props["cached_tokens"] == 0, where  # a fresh haystack and cache salt, prefix caching on
        assert props["finish_reason"] == "stop", where


def test_window_bracket_at_262144(run_262k: Run):
    data = summary(run_262k.evidence)
    fits = one_item(data, "window", "test_prompt_that_fits_is_answered")["properties"]
    assert WINDOW_262K - 256 - 64 <= fits["fit_prompt_tokens"] <= WINDOW_262K - 256, fits
    over = one_item(data, "window", "test_prompt_over_window_is_refused")["properties"]
    assert WINDOW_262K + 1 <= over["over_prompt_tokens"] <= WINDOW_262K + 3, over
    assert over["overwindow_status"] == 400, over
    assert f"maximum context length is {WINDOW_262K} tokens" in over["overwindow_message"], over
    assert over["liveness_ok"] is True and over["liveness_measures"] == "liveness", over


def test_a_wrong_tool_args_fault_fails_on_the_arguments(server_262k: Served, profile_262k: Path,
                                                       tmp_path_factory: pytest.TempPathFactory):
    # The fault through vLLM's qwen3_coder parser, plain and streamed: the weather calls (one, and two
    # in parallel) and the streamed cases; the conforming run above had every tool item pass.
    cwd = tmp_path_factory.mktemp("steer-262k-tools")
    run = steered_run(server_262k, cwd, profile_262k, "-k",
                      "test_health or (tools and (weather or test_streamed_calls) and not integrity)",
                      faults=("wrong_tool_args",), timeout_s=1800.0)
    data = summary(run.evidence)
    assert data["verdict"]["result"] == "FAIL", data["verdict"]
    assert run.code == 1
    failed = [i for i in data["items"] if i["outcome"] != "passed"]
    assert failed and {i["module"] for i in failed} == {"tools"}, failed
    assert {i["item"].split("[")[0] for i in failed} >= {"test_tool_call", "test_streamed_calls"}, failed
    assert all("argument" in i["reason"] for i in failed if "irrelevan" not in i["item"]), [i["reason"] for i in failed]
    assert incomplete_reasons(cwd / STEER_LOG, ("wrong_tool_args",)) == []


def test_a_lane_fault_engages_on_the_lane_vllm_counted(server_262k: Served, profile_262k: Path,
                                                      tmp_path_factory: pytest.TempPathFactory):
    # The lane is picked by vLLM's own /tokenize count (the reference tokenizer's would miss it); a
    # second look at the 32K lane on the same server, a new haystack and salt: still nothing cached.
    cwd = tmp_path_factory.mktemp("steer-262k-needle")
    run = steered_run(server_262k, cwd, profile_262k, "-k", "test_health or (32K and not integrity)",
                      faults=("drop_needle=32K",),
                      timeout_s=1800.0)
    data = summary(run.evidence)
    assert data["verdict"]["result"] == "FAIL", data["verdict"]
    (item,) = items(data, "context")
    assert item["outcome"] == "failed" and item["reason"].startswith("32K lane"), item
    assert item["properties"]["cached_tokens"] == 0, item["properties"]
    assert [r["faults"] for r in _steer_rows(cwd / STEER_LOG) if r.get("faults")] == [["drop_needle"]]
    assert incomplete_reasons(cwd / STEER_LOG, ("drop_needle=32K",)) == []


def test_load_module_grades_every_answer_at_each_level(server_262k: Served, profile_262k: Path,
                                                       tmp_path_factory: pytest.TempPathFactory):
    # The load module alone on the 262k server (max_num_seqs 1): levels 1 and 2, the mix forced through
    # the engine, the decode probes passed through unsteered and decoding exactly 16 tokens each
    # (vLLM's min_tokens and ignore_eos); at concurrency 2 the second request waits in vLLM's queue.
    cwd = tmp_path_factory.mktemp("steer-262k-load")
    profile = profile_copy(cwd, "262k-cpu-steered", modules=("load",), name="262k-cpu-steered-load")
    run = steered_run(server_262k, cwd, profile, timeout_s=1800.0)
    data = summary(run.evidence)
    (item,) = items(data, "load")
    props = item["properties"]
    print("load figures on real vLLM:", json.dumps({k: v for k, v in props.items() if k.startswith("load_")}))
    assert data["verdict"]["result"] == "PASS", (data["verdict"], item["reason"], run.output[-3000:])
    for level in (1, 2):
        # Two probes a level, each timed from its chunks or, where the tool parser held the random
        # model's whitespace to the finish (the stream came whole), not measurable from chunks; the
        # engine's own TPOT is the level's decode figure either way.
        measured, whole = props[f"load_c{level}_probes"], props[f"load_c{level}_probes_whole"]
        assert props[f"load_c{level}_failed"] == 0 and measured + whole == 2, props
        assert props[f"load_c{level}_in_flight_max"] == level, props
        assert props[f"load_c{level}_engine_tpot_s_mean"] > 0, props
        if measured:
            assert props[f"load_c{level}_tpot_s_p50"] > 0 and props[f"load_c{level}_ttft_s_p50"] > 0, props
    # vLLM's own histogram saw the level's requests; at concurrency 2 they waited longer than alone.
    assert props["load_c2_queue_requests"] >= 6 and props["load_c2_queue_time_s_mean"] > props["load_c1_queue_time_s_mean"]
    rows = _steer_rows(cwd / STEER_LOG)
    assert sum(1 for r in rows if not r["forced"] and "ignore_eos" in r["reason"]) == 4, rows[:5]
    assert incomplete_reasons(cwd / STEER_LOG) == []


def test_the_engine_honours_a_callers_enable_thinking_when_nothing_strips_it(
        server_262k: Served, profile_262k: Path, tmp_path_factory: pytest.TempPathFactory):
    # vLLM's behaviour, reported by the plugin as the contract says: the recipe's default kwargs say
    # enable_thinking=false, yet a caller's true wins (the template is the model's) and the
    # reasoning parser fills the reasoning field. The 262k router must strip chat_template_kwargs;
    # the steered profile's proxy does. Asked here of vLLM itself, unsteered, nothing in front.
    cwd = tmp_path_factory.mktemp("r262k-thinking")
    run, proc = start(server_262k.env, cwd, f"--qualify={profile_262k}", "--qualify-endpoint", server_262k.base_url,
                      "--repeat", "1", "-k", "test_thinking_override", str(suites_dir()), lock=False)
    run = finish(run, server_262k.env, proc, timeout_s=900.0)
    seen = items(summary(run.evidence), "reasoning", "test_thinking_override")
    assert seen, run.output[-3000:]
    # What fails first on the random model is the engine build's (engines.toml): 0.26.0 (GPU, bfloat16) and
    # 0.32.0 (CPU) both fill the reasoning field with whitespace until the answer budget is spent; a build
    # whose row says "reasoning" fills it with text.
    fails = engine_of(run).tiny_qwen3_thinking_fails
    for item in seen:
        props = item["properties"]
        assert props["thinking_requested"] is True and props["thinking_expected"] is False, props
        assert props["reasoning_chars"] > 0, props
        assert item["outcome"] == "failed", item
        # Either way the reason says the override took effect (asked beside the same request without it).
        assert "the caller's chat_template_kwargs enable_thinking=True took effect" in item["reason"], item["reason"]
        if fails == "reasoning":
            assert "reasoning field populated" in item["reason"], item["reason"]
        else:
            assert "characters of whitespace, none without the override" in item["reason"], item["reason"]
            # The budget is a sign of the override only where the request without it finished within it
            # (the random model's plain answer also writes to the budget: then the budget proves nothing).
            spent = "the answer budget was spent on reasoning (finish_reason 'length'" in item["reason"]
            assert spent == (props["baseline_finish_reason"] != "length"), (props, item["reason"])


def test_server_log_has_no_error(run_262k: Run, server_262k: Served):
    log = server_262k.spec.log_path.read_text(errors="replace")
    assert '" 500 Internal Server Error' not in log
    assert "EngineDeadError" not in log and "Traceback" not in log


def test_init_probes_the_262k_flags(server_262k: Served, run_262k: Run, tmp_path: Path):
    # ``python -m pytest_qualify init`` against the recipe's server, last (its probes, a media refusal
    # among them, are not in the log test_server_log_has_no_error judged above).
    env = server_262k.env
    p, text = probe(server_262k.base_url, tmp_path / "probed.toml")
    # --served-model-name, --model, --max-model-len 262144
    assert p["deployment"]["served_name"] == "agents-a1-fp8-mm-262k"
    assert p["deployment"]["model"] == str(env.model_dir)
    assert p["limits"]["window_tokens"] == WINDOW_262K
    # init proposes the recipe's lanes for the window: 262k-cpu-steered's (the CI copy leaves out 128K).
    assert [(lane["name"], lane["prompt_tokens"]) for lane in p["limits"]["lanes"]] == \
        [(lane.name, lane.prompt_tokens) for lane in load_profile("262k-cpu-steered").limits.lanes]
    assert p["deployment"]["engine"].startswith("vLLM 0.")
    # --enable-auto-tool-choice --tool-call-parser qwen3_coder: auto accepted (a random model rarely calls)
    assert "tools" in p["modules"]["required"] and "tool_choice auto accepted (HTTP 200)" in text
    # --default-chat-template-kwargs '{"enable_thinking": false}': off by default; vLLM 0.32.0 honours a
    # caller's enable_thinking=true (docs/real-vllm.md), and --reasoning-parser qwen3 splits it out.
    assert p["thinking"]["enabled"] is False
    assert p["thinking"]["overridable"] is True
    assert "reasoning came back in its own field" in text
    # --enable-prompt-tokens-details (+ --enable-prefix-caching)
    assert "cached_tokens reported" in text
    # A text-only model: --limit-mm-per-prompt has nothing to admit, and the refusal says so.
    assert p["limits"]["images_per_request"] == 0 and p["limits"]["videos_per_request"] == 0
