"""A replica's fingerprint and what it is held to. Pure: the readings come in (``probe.py`` asks).

The fingerprint is what a replica says it serves and how it was started: ``/v1/models`` (served
name, ``root`` and the revision a snapshot root shows, ``max_model_len``), ``/version``, the labels
of ``vllm:cache_config_info`` that are flags (block size, KV dtype, prefix caching, ...; the sizes
vLLM measures at start-up differ between healthy replicas and are left out) and ``/server_info``'s
configuration where the server exposes it. Each replica is held to the promoted deployment (the
promoted run's identity, else the profile's declaration) and to the rest of the fleet: a field on
which a replica leaves the fleet's majority is a difference too, so a flag nobody declared still
shows."""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_qualify.promotion.identity import Identity, engine_version_reason

# vllm:cache_config_info labels that vLLM measures at start-up (free memory decides them), never flags.
MEASURED_LABELS = frozenset({"num_gpu_blocks", "num_cpu_blocks", "kv_cache_size_tokens", "kv_cache_max_concurrency",
                             "kv_cache_memory_bytes", "num_gpu_blocks_override", "cpu_kvcache_space_bytes"})
IDENTITY_FIELDS = ("served_name", "model_root", "revision", "window_tokens", "engine_version")
# /server_info's configuration text: key=value pairs (VllmConfig's repr); keys naming the process, not the deployment.
_CONFIG_PAIR = re.compile(r"(\w+)=('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|[^,()\s]+)")
INSTANCE_KEYS = frozenset({"port", "host", "data_parallel_rank", "data_parallel_rank_local", "instance_id",
                           "data_parallel_master_port", "seed"})


@dataclass(frozen=True)
class Fingerprint:
    """One replica's reading. ``error``: why part of it could not be read (that part is None)."""

    identity: Identity
    cache_config: Mapping[str, str] | None = None  # the flag labels of vllm:cache_config_info
    server_info: Mapping[str, str] | None = None  # /server_info's configuration pairs, where exposed
    errors: tuple[str, ...] = ()

    def fields(self) -> dict[str, Any]:
        """Every compared field by name: the identity's, ``cache.<label>``, ``server_info.<key>``."""
        out: dict[str, Any] = {name: getattr(self.identity, name) for name in IDENTITY_FIELDS}
        out.update({f"cache.{k}": v for k, v in sorted((self.cache_config or {}).items())})
        out.update({f"server_info.{k}": v for k, v in sorted((self.server_info or {}).items())})
        return out

    @property
    def digest(self) -> str:
        """A short digest of :meth:`fields` (equal fingerprints, equal digests)."""
        text = json.dumps(self.fields(), sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    def as_dict(self) -> dict[str, Any]:
        return {"digest": self.digest, "fields": self.fields(), "errors": list(self.errors),
                "cache_config_visible": self.cache_config is not None, "server_info_visible": self.server_info is not None}


def cache_flags(labels: Mapping[str, str] | None) -> dict[str, str] | None:
    """The flag labels of ``vllm:cache_config_info`` (None when the gauge is not there)."""
    if labels is None:
        return None
    return {k: v for k, v in labels.items() if k not in MEASURED_LABELS}


def server_info_pairs(payload: Any) -> dict[str, str] | None:
    """``/server_info``'s ``vllm_config`` (a text) as key=value pairs, less those naming the process."""
    if not isinstance(payload, Mapping):
        return None
    text = payload.get("vllm_config")
    if not isinstance(text, str):
        return None
    pairs: dict[str, str] = {}
    for key, value in _CONFIG_PAIR.findall(text):
        if key not in INSTANCE_KEYS:
            pairs.setdefault(key, value)
    return pairs


@dataclass(frozen=True)
class Expected:
    """What every replica must show: the promoted deployment's fields (``source`` names where they
    come from) and the declared engine version, compared by its version tokens."""

    fields: Mapping[str, Any]
    source: str
    engine_declared: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"source": self.source, "fields": dict(self.fields), "engine_declared": self.engine_declared}


@dataclass(frozen=True)
class FingerprintCheck:
    replica: str
    differences: tuple[str, ...] = ()
    unreadable: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.differences and not self.unreadable


def expected_from(*, served_name: str, model_root: str | None, window_tokens: int | None,
                  engine_declared: str | None, kv_cache_dtype: str | None, source: str,
                  revision: str | None = None) -> Expected:
    fields_: dict[str, Any] = {"served_name": served_name}
    if model_root is not None:
        fields_["model_root"] = model_root
    if revision:
        fields_["revision"] = revision
    if window_tokens is not None:
        fields_["window_tokens"] = window_tokens
    if kv_cache_dtype:
        fields_["cache.cache_dtype"] = kv_cache_dtype
    return Expected(fields_, source, engine_declared)


def hold(prints: Mapping[str, Fingerprint], expected: Expected) -> list[FingerprintCheck]:
    """Each replica held to the expected fields and to the fleet's majority (more than half of the
    replicas that show the field); a field with no majority names every replica apart from the rest."""
    readings = {rid: fp.fields() for rid, fp in prints.items()}
    majority: dict[str, tuple[Any, int]] = {}
    names = sorted({name for fields_ in readings.values() for name in fields_})
    for name in names:
        shown = Counter(json.dumps(f.get(name), sort_keys=True, default=str) for f in readings.values())
        value, count = shown.most_common(1)[0]
        majority[name] = (json.loads(value), count)
    checks = []
    for rid, fp in prints.items():
        mine = readings[rid]
        diffs: list[str] = []
        for name, want in expected.fields.items():
            got = mine.get(name)
            if got is None and name.startswith("cache.") and fp.cache_config is None:
                continue  # not visible here: listed as unreadable below, never a difference
            if got != want:
                diffs.append(f"{name}: {expected.source} {want!r}, replica {got!r}")
        if expected.engine_declared:
            why = engine_version_reason(expected.engine_declared, fp.identity.engine_version)
            if why:
                diffs.append(why)
        for name in names:
            if name in expected.fields or (name == "engine_version" and expected.engine_declared):
                continue
            value, count = majority[name]
            got = mine.get(name)
            if count == len(readings) or (count * 2 > len(readings) and got == value):
                continue
            others = {r: readings[r].get(name) for r in readings if r != rid}
            if count * 2 > len(readings):
                diffs.append(f"{name}: {count} of {len(readings)} replicas show {value!r}, this one {got!r}")
            else:
                shown = ", ".join(f"{r} {v!r}" for r, v in sorted(others.items()))
                diffs.append(f"{name}: the replicas disagree and none is declared: this one {got!r}; {shown}")
        checks.append(FingerprintCheck(rid, tuple(diffs), tuple(fp.errors)))
    return checks


def difference_lines(checks: Sequence[FingerprintCheck]) -> list[str]:
    return [f"{c.replica}: {d}" for c in checks for d in c.differences]

