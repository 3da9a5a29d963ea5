"""``python -m pytest_qualify init`` against real vLLM: each tiny model launched with a built-in
profile's exact recipe (``262k-cpu``: tiny-qwen3 with every 262k flag; ``mm-cpu``:
tiny-qwen2.5-vl with 4 images + 1 video), then probed; the probed values must equal the launch
flags. Run under ``flock /tmp/vllm.lock`` (one real vLLM at a time on the machine)."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_qualify.profiles import load_profile
from pytest_qualify.settings import resolve
from pytest_qualify.server.target import Target, start_target
from .real_vllm import LaunchSlot, VllmEnv, require_vllm

pytestmark = pytest.mark.real_vllm


@pytest.fixture
def served(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[VllmEnv, Target]]:
    """vLLM launched with the named built-in profile's recipe, exactly as a launch-mode run would."""
    env = require_vllm(request.param)
    settings = resolve({}, {}, lambda key: None)  # launch mode, the profile's own command and timeout
    slot = LaunchSlot.acquire(f"init {request.param}")  # one real vLLM at a time, logged
    try:
        target = start_target(env.profile, settings, tmp_path, None)
        try:
            yield env, target
        finally:
            target.stop()
    finally:
        slot.release()


def _init(url: str, out: Path) -> dict:
    run = subprocess.run([sys.executable, "-m", "pytest_qualify", "init", "--endpoint", url, "--out", str(out)],
                         capture_output=True, text=True, timeout=1200)
    assert run.returncode == 0, run.stdout + run.stderr
    print(run.stdout)
    load_profile(str(out))  # valid
    return tomllib.loads(out.read_text())


@pytest.mark.parametrize("served", ["262k-cpu"], indirect=True)
def test_init_on_tiny_qwen3_with_the_262k_flags(served, tmp_path):
    env, target = served
    p = _init(target.base_url, tmp_path / "probed.toml")
    text = (tmp_path / "probed.toml").read_text()
    # --served-model-name, --model, --max-model-len 262144
    assert p["deployment"]["served_name"] == "agents-a1-fp8-mm-262k"
    assert p["deployment"]["model"] == str(env.model_dir)
    assert p["limits"]["window_tokens"] == 262_144
    assert [(lane["name"], lane["prompt_tokens"]) for lane in p["limits"]["lanes"]] == \
        [(lane.name, lane.prompt_tokens) for lane in env.profile.limits.lanes]
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


@pytest.mark.parametrize("served", ["mm-cpu"], indirect=True)
def test_init_on_tiny_qwen25_vl_reads_the_media_limits(served, tmp_path):
    env, target = served
    p = _init(target.base_url, tmp_path / "probed.toml")
    text = (tmp_path / "probed.toml").read_text()
    assert p["deployment"]["served_name"] == env.profile.deployment.served_name
    assert p["limits"]["window_tokens"] == env.profile.limits.window_tokens  # --max-model-len 8192
    # --limit-mm-per-prompt '{"image": 4, "video": 1}', read from vLLM's own refusals
    assert p["limits"]["images_per_request"] == 4 and "5 image(s) refused with HTTP 400" in text
    assert p["limits"]["videos_per_request"] == 1 and "2 video(s) refused with HTTP 400" in text
    assert {"multimodal", "media_admission", "tools"} <= set(p["modules"]["required"])
    assert "cached_tokens reported" in text  # --enable-prompt-tokens-details
