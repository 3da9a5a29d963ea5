"""Fingerprints held to the promoted deployment and to the fleet (fleet/fingerprint.py): a declared
field, a flag only the majority shows, a fleet with no majority, and the start-up sizes that differ
between healthy replicas left out."""

from __future__ import annotations

from pytest_qualify.fleet.fingerprint import Fingerprint, cache_flags, expected_from, hold, server_info_pairs
from pytest_qualify.promotion.identity import Identity

FLAGS = {"block_size": "16", "cache_dtype": "auto", "enable_prefix_caching": "True"}


def fp(root: str = "org/m", window: int = 4096, version: str = "0.32.0", **flags: str) -> Fingerprint:
    return Fingerprint(Identity("m", root, window, version), {**FLAGS, **flags})


EXPECTED = expected_from(served_name="m", model_root="org/m", window_tokens=4096, engine_declared="vLLM 0.32.0",
                         kv_cache_dtype="auto", source="profile p")


def test_equal_replicas_pass_with_one_digest():
    checks = hold({"a": fp(), "b": fp(), "c": fp()}, EXPECTED)
    assert all(c.ok for c in checks)
    assert fp().digest == fp().digest != fp(block_size="32").digest


def test_a_declared_field_names_both_values():
    checks = {c.replica: c for c in hold({"a": fp(), "b": fp(root="org/m/snapshots/" + "1" * 40)}, EXPECTED)}
    assert checks["a"].ok
    assert any("model_root: profile p 'org/m', replica 'org/m/snapshots/" in d for d in checks["b"].differences)


def test_an_undeclared_flag_fails_the_replica_apart_from_the_majority():
    checks = {c.replica: c for c in hold({"a": fp(), "b": fp(), "c": fp(), "d": fp(block_size="32")}, EXPECTED)}
    assert [r for r, c in checks.items() if not c.ok] == ["d"]
    assert checks["d"].differences == ("cache.block_size: 3 of 4 replicas show '16', this one '32'",)


def test_with_no_majority_every_replica_apart_is_named():
    checks = {c.replica: c for c in hold({"a": fp(), "b": fp(block_size="32")}, EXPECTED)}
    assert not checks["a"].ok and not checks["b"].ok
    assert "the replicas disagree and none is declared" in checks["b"].differences[0]


def test_another_engine_version_fails_by_its_version_tokens():
    checks = {c.replica: c for c in hold({"a": fp(), "b": fp(version="0.33.0")}, EXPECTED)}
    assert checks["a"].ok and "engine version" in checks["b"].differences[0]


def test_measured_sizes_are_not_flags():
    labels = {**FLAGS, "num_gpu_blocks": "512", "kv_cache_memory_bytes": "1", "kv_cache_size_tokens": "8192"}
    assert cache_flags(labels) == FLAGS and cache_flags(None) is None


def test_server_info_pairs_leave_the_process_out():
    payload = {"vllm_config": "model='org/m', max_seq_len=4096, port=8001, dtype=torch.float32, seed=0"}
    assert server_info_pairs(payload) == {"model": "'org/m'", "max_seq_len": "4096", "dtype": "torch.float32"}
    assert server_info_pairs({"other": 1}) is None
