"""Profiles: built-ins load, the 262k profile is exactly the promoted deployment, bad files are named."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from pytest_qualify.profiles import ProfileError, builtin_profiles, load_profile, module_registry, protocol_modules


def test_builtins_are_listed_and_valid():
    names = builtin_profiles()
    assert {"262k", "small"} <= set(names)
    for name in names:
        assert load_profile(name).name == name


def test_262k_is_the_promoted_deployment():
    p = load_profile("262k")
    assert p.deployment.model == "InternScience/Agents-A1-FP8"
    assert p.deployment.revision == "4d7d59380f327b76e73bc71f40e0c589ad0ca1d5"
    assert p.deployment.served_name == "agents-a1-fp8-mm-262k"
    assert p.deployment.kv_cache_dtype == "fp8"
    assert p.limits.window_tokens == 262_144
    assert [lane.name for lane in p.limits.lanes] == ["32K", "128K", "240K"]
    assert [lane.prompt_tokens for lane in p.limits.lanes] == [32_768, 131_072, 245_760]
    assert p.limits.answer_tokens == 256 and p.limits.reasoning_headroom_tokens == 0
    assert (p.limits.images_per_request, p.limits.videos_per_request, p.limits.max_num_seqs) == (4, 1, 1)
    assert p.thinking.enabled is False and p.thinking.overridable is False
    args = " ".join(p.serve.args)
    assert "--max-model-len 262144" in args and "--kv-cache-dtype fp8" in args and "--max-num-seqs 1" in args
    assert set(p.required_modules) == set(protocol_modules())
    assert p.waivable_modules == ("multimodal",)


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "p.toml"
    path.write_text(text)
    return path


def _small_text() -> str:
    return Path(builtin_profiles()["small"]).read_text()


def test_unknown_name_is_named():
    with pytest.raises(ProfileError, match="unknown profile 'nope'"):
        load_profile("nope")


def test_missing_file_is_named(tmp_path):
    with pytest.raises(ProfileError, match="does not exist"):
        load_profile(str(tmp_path / "absent.toml"))


def test_wrong_field_type_names_the_field(tmp_path):
    path = _write(tmp_path, _small_text().replace("window_tokens = 4096", 'window_tokens = "4096"'))
    with pytest.raises(ProfileError) as err:
        load_profile(str(path))
    assert str(path) in str(err.value)
    assert "limits.window_tokens" in str(err.value)
    assert "integer" in str(err.value)


def test_missing_field_names_the_field(tmp_path):
    path = _write(tmp_path, _small_text().replace('served_name = "small-chat-4k"\n', ""))
    with pytest.raises(ProfileError, match=r"deployment\.served_name"):
        load_profile(str(path))


def test_the_smallest_lane_is_read_from_the_profile():
    # The integrity module's cache probe and its timed re-ask both use it.
    assert load_profile("262k").limits.smallest_lane.name == "32K"
    assert load_profile("small").limits.smallest_lane.prompt_tokens == min(
        lane.prompt_tokens for lane in load_profile("small").limits.lanes)


def test_lane_that_does_not_fit_the_window(tmp_path):
    path = _write(tmp_path, _small_text().replace("prompt_tokens = 3072", "prompt_tokens = 4000"))
    with pytest.raises(ProfileError, match=r"limits\.lanes\.2\.prompt_tokens.*exceeds the window"):
        load_profile(str(path))


def test_unknown_module_is_named(tmp_path):
    path = _write(tmp_path, _small_text().replace('"smoke", "json"', '"smoke", "jsn"'))
    with pytest.raises(ProfileError, match=r"modules\.required\.1.*unknown module 'jsn'"):
        load_profile(str(path))


def test_hard_module_cannot_be_waivable(tmp_path):
    path = _write(tmp_path, _small_text() + '\n')
    text = path.read_text().replace("[modules]\n", '[modules]\nwaivable = ["tools"]\n')
    path.write_text(text)
    with pytest.raises(ProfileError, match=r"modules\.waivable\.0.*cannot be waived"):
        load_profile(str(path))


def test_invalid_toml_is_named(tmp_path):
    path = _write(tmp_path, "name = [")
    with pytest.raises(ProfileError, match="not valid TOML"):
        load_profile(str(path))


def test_model_path_expands_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("QUALIFY_MODELS", "/models")
    path = _write(tmp_path, _small_text().replace('model = "pytest-qualify/small-chat"', 'model = "$QUALIFY_MODELS/tiny"'))
    assert load_profile(str(path)).deployment.model == "/models/tiny"


def test_timeout_scales_with_prompt():
    t = load_profile("262k").timeouts
    assert t.for_prompt(245_760) > t.for_prompt(32_768) > t.request_s


def test_module_registry_matches_the_protocol():
    data = tomllib.loads((Path(__file__).parents[2] / "pytest_qualify" / "modules.toml").read_text())
    assert [m["id"] for m in data["module"]] == list(module_registry())
    assert [m for m, info in module_registry().items() if info.waivable] == ["multimodal"]


# -- ${VAR:-default} in the places a profile names files and commands ------------------------------


def test_expand_default_value_and_home():
    from pytest_qualify.profiles import expand

    env = {"SET": "/opt/venv", "EMPTY": "", "HOME": "/home/op"}
    assert expand("${SET:-~/.cache/v}/bin/python", env) == "/opt/venv/bin/python"
    # Unset or empty: the default, whose leading ~ is the user's home.
    assert expand("${UNSET:-~/.cache/v}/bin/python", env) == str(Path("~/.cache/v/bin/python").expanduser())
    assert expand("${EMPTY:-/srv/models}/tiny", env) == "/srv/models/tiny"
    assert expand("${UNSET:-$SET/m}", env) == "/opt/venv/m"
    assert expand("$SET/x ${SET}/y", env) == "/opt/venv/x /opt/venv/y"
    # Without a default an unset variable stays as written, so a launch error shows what was missing.
    assert expand("$UNSET/x ${UNSET}/y", env) == "$UNSET/x ${UNSET}/y"
    # Placeholders and JSON flags are not variables.
    assert expand('{model} {"image": 4}', env) == '{model} {"image": 4}'


def test_command_args_and_env_expand(tmp_path, monkeypatch):
    monkeypatch.setenv("QUALIFY_VLLM_VENV", "/venvs/vllm")
    monkeypatch.delenv("QUALIFY_MODELS", raising=False)
    text = _small_text().replace(
        'command = ["vllm", "serve", "{model}"]',
        'command = ["${QUALIFY_VLLM_VENV:-~/v}/bin/python", "-m", "vllm.entrypoints.openai.api_server", "--model", "{model}"]',
    ).replace('"--max-num-seqs", "1",', '"--download-dir", "${QUALIFY_MODELS:-/data/models}",')
    text = text.replace("[modules]", '[serve.env]\nHF_HOME = "${QUALIFY_VLLM_CACHE:-/cache}/hf"\nKEEP = "1"\n\n[modules]')
    p = load_profile(str(_write(tmp_path, text)))
    assert p.serve.command[:2] == ("/venvs/vllm/bin/python", "-m") and p.serve.command[-1] == "{model}"
    assert "/data/models" in p.serve.args
    assert dict(p.serve.env) == {"HF_HOME": "/cache/hf", "KEEP": "1"}


def test_cpu_profiles_point_at_the_vllm_env_builder(monkeypatch):
    monkeypatch.setenv("QUALIFY_VLLM_VENV", "/v")
    monkeypatch.setenv("QUALIFY_MODELS", "/m")
    for name, model in (("qwen-cpu", "qwen2.5-coder-0.5b-instruct"), ("tiny-cpu", "tiny-llama")):
        p = load_profile(name)
        assert p.serve.command[:4] == ("/v/bin/python", "-m", "vllm.entrypoints.openai.api_server", "--model")
        assert p.deployment.model == f"/m/{model}" and p.deployment.served_name == model
    monkeypatch.delenv("QUALIFY_VLLM_VENV")
    p = load_profile("qwen-cpu")
    assert p.serve.command[0] == str(Path("~/.cache/pytest-qualify/vllm-venv/bin/python").expanduser())


def test_qwen_cpu_is_the_text_protocol_on_a_4k_window():
    p = load_profile("qwen-cpu")
    assert p.limits.window_tokens == 4096
    assert [(lane.name, lane.prompt_tokens) for lane in p.limits.lanes] == [("1K", 1024), ("2K", 2048), ("3K", 3072)]
    assert p.limits.answer_tokens + p.limits.lanes[-1].prompt_tokens <= p.limits.window_tokens
    args = " ".join(p.serve.args)
    for flag in ("--dtype float32", "--enforce-eager", "--max-model-len 4096", "--enable-auto-tool-choice",
                 "--tool-call-parser hermes", "--enable-prompt-tokens-details",
                 "--served-model-name {served_name}"):
        assert flag in args, flag
    env = dict(p.serve.env)
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == "0-1" and int(env["VLLM_CPU_KVCACHE_SPACE"]) >= 1
    assert env["HF_HUB_OFFLINE"] == env["TRANSFORMERS_OFFLINE"] == "1"
    assert {"HF_HOME", "VLLM_CACHE_ROOT", "XDG_CACHE_HOME"} <= set(env)
    # A text-only model: the media modules are not in the profile, and the description says so.
    assert set(protocol_modules()) - set(p.required_modules) == {"multimodal", "media_admission"}
    assert "text" in p.description and "multimodal" in p.description and "CPU" in p.description


def test_promotion_profiles_report_cached_tokens():
    for name in ("262k", "small", "qwen-cpu", "tiny-cpu"):
        assert "--enable-prompt-tokens-details" in load_profile(name).serve.args, name


def test_262k_cpu_is_the_262k_recipe_with_only_the_cpu_differences(monkeypatch):
    monkeypatch.setenv("QUALIFY_VLLM_VENV", "/v")
    monkeypatch.setenv("QUALIFY_MODELS", "/m")
    prod, cpu = load_profile("262k"), load_profile("262k-cpu")
    # The window, lanes, tolerance, budget, media limits and thinking are the recipe's own; the
    # harness waits longer per prompt token for CPU prefill.
    assert cpu.limits == prod.limits and cpu.thinking == prod.thinking
    assert (cpu.timeouts.startup_s, cpu.timeouts.request_s) == (prod.timeouts.startup_s, prod.timeouts.request_s)
    assert cpu.timeouts.per_1k_prompt_tokens_s == 3 * prod.timeouts.per_1k_prompt_tokens_s
    # Every flag of the recipe, in order, then the CPU's two additions and nothing else.
    assert cpu.serve.args == prod.serve.args + ("--dtype", "float32", "--enforce-eager")
    assert cpu.serve.command == ("/v/bin/python", "-m", "vllm.entrypoints.openai.api_server", "--model", "{model}")
    assert (cpu.deployment.model, cpu.deployment.served_name, cpu.deployment.revision, cpu.deployment.kv_cache_dtype) == (
        "/m/tiny-qwen3", prod.deployment.served_name, prod.deployment.revision, prod.deployment.kv_cache_dtype)
    env = dict(cpu.serve.env)
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "1" and env["VLLM_CPU_OMP_THREADS_BIND"] == "0-1"
    assert set(cpu.required_modules) == {"smoke", "context", "window", "reasoning"}
    assert set(cpu.required_modules) <= set(prod.required_modules)


def test_mm_cpu_serves_the_recipes_media_limits(monkeypatch):
    monkeypatch.setenv("QUALIFY_MODELS", "/m")
    prod, mm = load_profile("262k"), load_profile("mm-cpu")
    assert (mm.limits.images_per_request, mm.limits.videos_per_request) == (4, 1)
    flag = prod.serve.args.index("--limit-mm-per-prompt")
    assert mm.serve.args[mm.serve.args.index("--limit-mm-per-prompt") + 1] == prod.serve.args[flag + 1]
    assert mm.deployment.model == "/m/tiny-qwen2.5-vl"
    assert set(mm.required_modules) == {"smoke", "multimodal", "media_admission"}


@pytest.mark.parametrize("steered, base, syntax", [("262k-cpu-steered", "262k-cpu", "qwen3_coder"),
                                                  ("mm-cpu-steered", "mm-cpu", "hermes")])
def test_steered_profiles_are_their_recipe_behind_the_proxy(monkeypatch, steered, base, syntax):
    monkeypatch.setenv("QUALIFY_VLLM_VENV", "/v")
    monkeypatch.setenv("QUALIFY_MODELS", "/m")
    s, b = load_profile(steered), load_profile(base)
    assert (s.deployment, s.limits, s.thinking, s.timeouts, s.serve) == (b.deployment, b.limits, b.thinking,
                                                                         b.timeouts, b.serve)
    assert s.steer is not None and s.steer.tool_call_syntax == syntax
    parser = b.serve.args[b.serve.args.index("--tool-call-parser") + 1]
    assert parser == syntax  # the syntax the proxy writes is the one vLLM's parser reads
    assert b.steer is None
    assert set(b.required_modules) <= set(s.required_modules)


def test_262k_cpu_steered_runs_every_module_a_text_model_serves_and_strips_thinking_kwargs():
    s, prod = load_profile("262k-cpu-steered"), load_profile("262k")
    # Not the media modules (a text model). Integrity is in: the proxy keeps its cut-call item's small
    # max_tokens (steer.kept_for_cut) and holds the answer cut by it.
    assert set(s.required_modules) == set(prod.required_modules) - {"multimodal", "media_admission"}
    assert s.integrity == prod.integrity  # the forced answers are the oracles': 262k's bands hold
    assert s.steer.strip_chat_template_kwargs  # as the router in front of the 262k deployment must
    small = load_profile("tiny-qwen3-steered")
    assert small.steer == s.steer and small.required_modules == s.required_modules
    assert small.limits.window_tokens == 16_384


def test_a_bad_steer_table_is_refused_naming_the_field(tmp_path):
    path = tmp_path / "p.toml"
    path.write_text(Path(builtin_profiles()["small"]).read_text() + '\n[steer]\ntool_call_syntax = "mistral"\n')
    with pytest.raises(ProfileError, match="steer"):
        load_profile(str(path))
def test_integrity_rules_and_stream_idle_limit():
    small = load_profile("small")
    assert small.timeouts.stream_idle_s == 30.0  # the default, well under the 60 s request budget
    assert "integrity" in small.required_modules and small.integrity.prefix_cache == "salted"
    band = small.integrity.band("finish")
    assert band is not None and (band.min_chars, band.max_chars) == (1, 400)
    assert small.integrity.band("diff") is None  # no band: not checked
    assert load_profile("tiny-cpu").integrity.length_bands == ()


def _assert_edit_refused(tmp_path, edit, field, words):
    """The small profile with one edit is refused, naming the field and why."""
    text = _small_text()
    assert edit[0] in text
    path = _write(tmp_path, text.replace(edit[0], edit[1], 1))
    with pytest.raises(ProfileError) as err:
        load_profile(str(path))
    assert field in str(err.value) and words in str(err.value), str(err.value)


@pytest.mark.parametrize("edit, field, words", [
    (("per_1k_prompt_tokens_s = 5.0", "per_1k_prompt_tokens_s = 5.0\nstream_idle_s = 60"),
     "timeouts.stream_idle_s", "not under the request budget"),
    (("per_1k_prompt_tokens_s = 5.0", "per_1k_prompt_tokens_s = 5.0\nstream_idle_s = 0"),
     "timeouts.stream_idle_s", "less than or equal to the minimum"),
    (('prefix_cache = "salted"', 'prefix_cache = "sometimes"'), "integrity.prefix_cache", "is not one of"),
    (("repeat_e2e_ratio_min = 0.5", "repeat_e2e_ratio_min = 1.5"), "integrity.repeat_e2e_ratio_min", "maximum"),
    (("repeat_e2e_ratio_min = 0.5", "repeat_e2e_ratio_min = 0.5\ncache_probe_tokens = 4000"),
     "integrity.cache_probe_tokens", "exceeds the window"),
    (("finish = [1, 400]", "finish = [400, 1]"), "integrity.length_chars.finish", "is empty"),
    (("finish = [1, 400]", "finsh = [1, 400]"), "integrity.length_chars.finsh", "unknown module"),
    (("finish = [1, 400]", "finish = [1]"), "integrity.length_chars.finish", "too short"),
])
def test_bad_integrity_rules_are_named(tmp_path, edit, field, words):
    _assert_edit_refused(tmp_path, edit, field, words)


def test_load_rules_in_the_built_in_profiles():
    for name in ("small", "small-slo", "262k"):
        profile = load_profile(name)
        assert "load" in profile.required_modules and profile.load is not None, name
        assert profile.load.levels[0] == 1 and profile.load.levels[-1] > profile.limits.max_num_seqs, name
    big = load_profile("262k").load
    assert big.requests_per_level >= 31 and big.probe_tokens == 128 and not big.batch_invariant
    assert dict(load_profile("small-slo").slo.load) == {"ttft_s_p95_max": 1.5, "tpot_s_p95_max": 0.05,
                                                         "goodput_min": 0.75}
    assert load_profile("tiny-cpu").load is None


@pytest.mark.parametrize("edit, field, words", [
    (("levels = [1, 2, 4]", "levels = [2, 4]"), "load.levels", "must rise from 1"),
    (("levels = [1, 2, 4]", "levels = [1, 4, 2]"), "load.levels", "must rise from 1"),
    (("levels = [1, 2, 4]", "levels = [1, 2, 64]"), "load.requests_per_level", "cannot keep 64 in flight"),
    (('mix = ["smoke", "tools", "recall", "json"]', 'mix = ["smoke", "diff"]'), "load.mix", "is not one of"),
    (("tpot_s_max = 0.05", "tpot_s_max = 0"), "load.goodput.tpot_s_max", "less than or equal to the minimum"),
])
def test_bad_load_rules_are_named(tmp_path, edit, field, words):
    _assert_edit_refused(tmp_path, edit, field, words)


def test_an_unknown_slo_load_figure_is_named(tmp_path):
    path = _write(tmp_path, _small_text() + "\n[slo.load]\nttft_s_p90_max = 1.0\n")
    with pytest.raises(ProfileError, match=r"slo\.load"):
        load_profile(str(path))


@pytest.mark.parametrize("gpu, cpu", [("262k-gpu", "262k-cpu"), ("262k-gpu-steered", "262k-cpu-steered"),
                                      ("tiny-qwen3-gpu-parsers", "tiny-qwen3-parsers")])
def test_gpu_profiles_are_the_cpu_recipe_less_what_is_cpu_only_with_a_kv_cap(monkeypatch, gpu, cpu):
    monkeypatch.setenv("QUALIFY_VLLM_VENV", "/v")
    monkeypatch.setenv("QUALIFY_MODELS", "/m")
    g, c = load_profile(gpu), load_profile(cpu)
    # The recipe is one side of the packaged A/B pair: it also requires the modules its gating
    # figures come from (the load module's decode probes, the sweep's TTFT at a named size).
    ab_modules = ("load", "sweep") if gpu == "262k-gpu" else ()
    assert (g.limits, g.thinking, g.steer) == (c.limits, c.thinking, c.steer)
    assert tuple(m for m in g.required_modules if m not in ab_modules) == c.required_modules
    assert all(m in g.required_modules for m in ab_modules)
    assert g.deployment.model == c.deployment.model == "/m/tiny-qwen3"
    assert g.deployment.engine == "vLLM 0.26.0"  # as the engine check reads it (/version says 0.26.0)
    assert list(g.serve.command) == ["vllm", "serve", "{model}"]
    args = list(g.serve.args)
    # The KV cap: start-up bounded by loading, not by a block pool sized to 0.92 of the GPU (1 GiB of
    # fp8 KV for one layer of one 64-wide KV head is 8,388,608 tokens, 32 windows).
    cap = int(args[args.index("--kv-cache-memory-bytes") + 1])
    assert cap == 2**30 and cap // (2 * 64) >= 32 * g.limits.window_tokens
    assert "--gpu-memory-utilization" not in args
    cpu_only = {"--dtype", "float32", "--enforce-eager"}
    assert [a for a in c.serve.args if a not in cpu_only] == args[:args.index("--kv-cache-memory-bytes")]
    assert not [k for k, _value in g.serve.env if k.startswith("VLLM_CPU")]


def test_the_two_gpu_profile_is_the_gpu_steered_recipe_over_two_workers(monkeypatch):
    monkeypatch.setenv("QUALIFY_MODELS", "/m")
    tp, one = load_profile("262k-gpu-tp2-steered"), load_profile("262k-gpu-steered")
    assert (tp.limits, tp.thinking, tp.steer, tp.required_modules, tp.timeouts) == (
        one.limits, one.thinking, one.steer, one.required_modules, one.timeouts)
    assert tp.deployment.model == "/m/tiny-qwen3-tp2" and tp.deployment.engine == one.deployment.engine
    args = list(tp.serve.args)
    assert args[args.index("--tensor-parallel-size") + 1] == "2"
    assert [a for a in args if a not in ("--tensor-parallel-size", "2")] == list(one.serve.args)
    # The model's heads divide by the tensor-parallel size (the builder's two-head variant).
    import importlib.util, sys
    from pathlib import Path
    spec = importlib.util.spec_from_file_location("build_tiny_qwen", Path(__file__).resolve().parents[2] / ".ci/build_tiny_qwen.py")
    builder = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(Path(spec.origin).parent))
    try:
        spec.loader.exec_module(builder)
    finally:
        sys.path.pop(0)
    heads = builder.QWEN3_BUILD_HEADS["qwen3-tp2"]
    assert heads % 2 == 0 and builder.BUILDS["qwen3-tp2"]["weights_sha256"]
    assert builder.QWEN3_BUILD_HEADS["qwen3"] == builder.QWEN3_HEADS == 1  # tiny-qwen3 v2 unchanged
