"""The reference server's SIMULATED serving facts: the capacity and start-up figures a vLLM prints
at start-up, made up for a deployment that meets its recipe. A profile's ``[claims]`` say what the
recipe publishes, so the simulated figures are the claimed ones (as the server reports the engine
version its profile declares); a profile without claims gets small plausible figures. Three
faults break them as a real deployment would:

- ``kv_pool_shrink[=X]``: the KV pool is X of its size (default 0.5: half the blocks);
- ``slow_startup[=S]``: the server waits S seconds (default 5) before it listens, and its weight
  load took S seconds longer;
- ``slow_decode[=X]``: decode runs X times slower (default 1.25: a fifth fewer tokens a second).

The facts are written in one line of the server's log (``server/facts.py`` ``SIMULATED_LINE``)
and shown in ``/metrics`` as vLLM shows them (``vllm:cache_config_info``). No HTTP here.
"""

from __future__ import annotations

import math
from typing import Any

from pytest_qualify.profiles import Profile
from pytest_qualify.reference.faults import Faults

# The log line the SIMULATED facts are written in, as JSON after it (server/facts.py reads it).
SIMULATED_LINE = "SIMULATED serving facts: "
BLOCK_TOKENS = 16
BYTES_PER_TOKEN = 20 * 1024  # about what the recipe's FP8 hybrid model pays (8 GiB for 412,980 tokens)
DEFAULT_DECODE_TOK_S = 2_000.0  # the rate slow_decode slows when the server was started without one



def _claimed(profile: Profile, figure: str) -> float | None:
    for claim in (profile.claims.claims if profile.claims else ()):
        if claim.figure == figure and claim.prompt_tokens is None and claim.lane is None:
            return claim.claimed
    return None


def simulated_facts(profile: Profile, faults: Faults) -> dict[str, float]:
    """The start-up facts this simulated deployment reports (server/facts.py's keys)."""
    window = profile.limits.window_tokens
    tokens = _claimed(profile, "kv_cache_tokens")
    if tokens is None:
        concurrency = _claimed(profile, "max_concurrency")
        tokens = concurrency * window if concurrency is not None else 2 * window * max(1, profile.limits.max_num_seqs)
    blocks = math.ceil(tokens / BLOCK_TOKENS)
    gib = _claimed(profile, "kv_cache_gib")
    if "kv_pool_shrink" in faults:
        faults.engage("kv_pool_shrink")  # the start-up facts the server reports (its log, /metrics)
        share = faults.number("kv_pool_shrink", 0.5)
        blocks = max(1, int(blocks * share))
        gib = gib * share if gib is not None else None
    tokens = blocks * BLOCK_TOKENS
    weight_load = _claimed(profile, "weight_load_s") or 0.5
    weight_load += startup_delay_s(faults)
    compile_s = _claimed(profile, "compile_s") or 0.0
    graph_s = _claimed(profile, "graph_capture_s") or 0.0
    return {
        "kv_cache_tokens": tokens,
        "kv_cache_gib": round(gib if gib is not None else tokens * BYTES_PER_TOKEN / 2**30, 4),
        "block_size_tokens": BLOCK_TOKENS,
        "kv_cache_blocks": blocks,
        "max_concurrency": round(tokens / window, 4),
        "model_memory_gib": _claimed(profile, "model_memory_gib") or 1.0,
        "weight_load_s": round(weight_load, 3),
        "compile_s": compile_s,
        "graph_capture_s": graph_s,
        "engine_init_s": round(compile_s + graph_s + 0.5, 3),
    }


def startup_delay_s(faults: Faults) -> float:
    return faults.number("slow_startup", 5.0) if "slow_startup" in faults else 0.0


def decode_rate(decode_tok_s: float, faults: Faults) -> float:
    """The decode rate the server simulates: slowed by ``slow_decode`` (from a default rate when the
    server was started with none, so the fault always engages)."""
    if "slow_decode" not in faults:
        return decode_tok_s
    return (decode_tok_s or DEFAULT_DECODE_TOK_S) / max(faults.number("slow_decode", 1.25), 1e-9)


def cache_config_labels(facts: dict[str, float], profile: Profile) -> dict[str, Any]:
    """``vllm:cache_config_info``'s labels, as vLLM 0.32 exports them."""
    return {
        "block_size": str(int(facts["block_size_tokens"])),
        "num_gpu_blocks": str(int(facts["kv_cache_blocks"])),
        "kv_cache_size_tokens": str(int(facts["kv_cache_tokens"])),
        "kv_cache_max_concurrency": str(facts["max_concurrency"]),
        "kv_cache_memory_bytes": str(int(facts["kv_cache_gib"] * 2**30)),
        "cache_dtype": profile.deployment.kv_cache_dtype or "auto",
        "enable_prefix_caching": "True",
    }
