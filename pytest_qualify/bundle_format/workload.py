"""What makes two runs comparable: the same workload, not the same name.

Two runs measured the same thing when they ran the same protocol modules, the same context lanes at
the same prompt sizes, the same items, under the same output budgets and sampling, and took every
statistic the same way: the load module's plan (its levels, the mix requests and decode probes each
level sends, the probe's length, the mix, goodput's limits: a p50 over 4 probes or a throughput over
another mix is another statistic), the sweep's plan (its prompt sizes, samples per size and output
lengths), the same number of repetitions (``--repeat``: the load figures are a repetition's worst,
so two repetitions' worst is another statistic than one's) and the same xdist workers (``-n``: other
items share the server while one is timed). And they asked the same requests: an item's request is
built from the task data (the protocol suites, ``fixtures/`` and the media corpus) and, for a sized
prompt, the served tokenizer, so the task data's digest stands for every request key a tokenizer does
not decide (an item renamed nowhere whose prompt changed is another workload). Everything else
(model, quantization, engine, serve flags, the profile's name) may differ: that is what a
head-to-head or an A/B compares. A SIMULATED run never measured a deployment, so it is never
comparable with a real one.

``of_summary`` reads a workload from an earlier run's ``summary.json``; ``profiles.Profile.workload``
plans one from a profile and a stage in the same shape, so an A/B can be refused before any server
starts; ``load_plan`` and ``sweep_plan`` are the one shape of the two plans, in the summary's
``profile`` section and in a profile's workload. ``differences`` names what differs, one phrase per
field. No pytest here.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from functools import cache
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Any

# The packages every protocol request is built from (pyproject.toml maps them onto suites/,
# fixtures/ and media/ of the checkout).
TASK_PACKAGES = ("pytest_qualify.suites", "pytest_qualify.fixtures", "pytest_qualify.media")

# Sampling is the plugin's own, not the profile's: every question is asked at temperature 0 with
# seed 1 (hooks/qualify_fixtures.py qualify_ask). Kept in the workload so a change is named.
SAMPLING = "temperature 0, seed 1"


# What each part of a plan is, for the phrase that names a difference; in the order compared.
LOAD_PLAN = {
    "levels": "concurrency levels",
    "requests_per_level": "mix requests per level (the level's throughput is over them and the probes)",
    "probes_per_level": "decode probes per level (the TTFT, TPOT and ITL p50s are over them)",
    "probe_tokens": "decode probe length in tokens",
    "mix": "mix (the modules whose items make each level's requests)",
    "goodput_ttft_s_max": "goodput's TTFT limit (s)",
    "goodput_tpot_s_max": "goodput's TPOT limit (s)",
}
SWEEP_PLAN = {
    "prompt_tokens": "prompt sizes",
    "samples": "samples per size (the TTFT is their median)",
    "output_tokens": "output tokens per sample",
    "decode_prompt_tokens": "decode probe prompt sizes",
    "decode_tokens": "decode probe length in tokens",
    "decode_samples": "decode probe samples (the decode rate is their median)",
}
PLANS = {"load": LOAD_PLAN, "sweep": SWEEP_PLAN}


def load_plan(rules: Any) -> dict[str, Any]:
    """The load module's plan (a profile's ``LoadRules``): every setting that changes its figures."""
    return {"levels": list(rules.levels), "requests_per_level": rules.requests_per_level,
            "probes_per_level": rules.probes_per_level, "probe_tokens": rules.probe_tokens, "mix": list(rules.mix),
            "goodput_ttft_s_max": rules.goodput_ttft_s_max, "goodput_tpot_s_max": rules.goodput_tpot_s_max}


def sweep_plan(rules: Any) -> dict[str, Any]:
    """The sweep module's plan (a profile's ``SweepRules``): every setting that changes its figures."""
    return {"prompt_tokens": list(rules.prompt_tokens), "samples": rules.samples, "output_tokens": rules.output_tokens,
            "decode_prompt_tokens": list(rules.decode_prompt_tokens), "decode_tokens": rules.decode_tokens,
            "decode_samples": rules.decode_samples}


def of_summary(summary: Mapping[str, Any]) -> dict[str, Any]:
    """The workload an earlier run measured, read from its ``summary.json`` (any schema version). A
    summary of an earlier release holds no plan in its ``profile`` section: its load workload is
    the levels and probe length its timing names, its sweep workload empty (nothing to hold)."""
    profile = summary.get("profile") or {}
    limits = profile.get("limits") or {}
    stage = summary.get("stage") or {}
    run = summary.get("run") or {}
    modules = list(stage.get("modules") or profile.get("required_modules") or [])
    stage_lanes = stage.get("lanes")
    lanes = {str(lane["name"]): int(lane["prompt_tokens"]) for lane in limits.get("lanes", ())
             if "context" in modules and (stage_lanes is None or lane["name"] in stage_lanes)}
    load = ((summary.get("timing") or {}).get("load") or None) if "load" in modules else None
    items = sorted({f"{i['module']}::{i['item']}" for i in summary.get("items", ())})
    return {
        "modules": sorted(modules),
        "lanes": lanes,
        "answer_tokens": limits.get("answer_tokens"),
        "reasoning_headroom_tokens": limits.get("reasoning_headroom_tokens", 0),
        "thinking": bool((profile.get("thinking") or {}).get("enabled", False)),
        "window_tokens": limits.get("window_tokens") if "window" in modules else None,
        "load": ({**(profile.get("load") or {}), "levels": [int(lv["concurrency"]) for lv in load.get("levels", ())],
                  "probe_tokens": load.get("probe_tokens")} if load else None),
        "sweep": dict(profile.get("sweep") or {}) if "sweep" in modules else None,
        "sampling": SAMPLING,
        "repeat": run.get("repeat"),
        "workers": run.get("workers"),
        "items": items,
        "task_data": (summary.get("protocol") or {}).get("task_data_sha256"),
    }


@cache
def task_data_sha256() -> str:
    """One digest of every file the protocol's requests are built from (``TASK_PACKAGES``): each
    file's path in its package and its bytes, in path order; compiled files left out."""
    h = hashlib.sha256()
    for package in TASK_PACKAGES:
        for rel, item in sorted(_files(resources.files(package), "")):
            h.update(f"{package}/{rel}".encode() + b"\0" + item.read_bytes() + b"\0")
    return h.hexdigest()


def _files(folder: Traversable, prefix: str) -> Iterator[tuple[str, Traversable]]:
    for entry in folder.iterdir():
        if entry.name == "__pycache__" or entry.name.endswith((".pyc", ".pyo")):
            continue
        rel = f"{prefix}{entry.name}"
        if entry.is_dir():
            yield from _files(entry, rel + "/")
        else:
            yield rel, entry


def differences(a: Mapping[str, Any], b: Mapping[str, Any], *, a_name: str = "A", b_name: str = "B") -> list[str]:
    """What differs between two workloads, each as one phrase naming both values; empty when they
    are the same workload. ``items`` are compared only when both sides list them (a planned
    workload does not), the task data only when both name its digest (a bundle written before it
    was recorded does not), the repetitions and the xdist workers only when both name them (a
    profile's plan does not: ``--repeat`` and ``-n`` are the run's), a plan's part only when both
    name it (a bundle or a noise floor of an earlier release names fewer)."""
    out: list[str] = []
    for key in ("modules", "lanes", "answer_tokens", "reasoning_headroom_tokens", "thinking", "window_tokens",
                "sampling"):
        if a.get(key) != b.get(key):
            out.append(f"{key.replace('_', ' ')}: {a_name} {_text(a.get(key))}, {b_name} {_text(b.get(key))}")
    for key, parts in PLANS.items():
        out += _plan_differences(key, parts, a, b, a_name, b_name)
    if a.get("repeat") is not None and b.get("repeat") is not None and a["repeat"] != b["repeat"]:
        out.append(f"repeat (repetitions per item; the load figures are a repetition's worst): {a_name} --repeat "
                   f"{a['repeat']}, {b_name} --repeat {b['repeat']}")
    if a.get("workers") is not None and b.get("workers") is not None and a["workers"] != b["workers"]:
        out.append(f"xdist workers (other items share the server while one is timed): {a_name} -n {a['workers']}, "
                   f"{b_name} -n {b['workers']}")
    if a.get("items") and b.get("items") and a["items"] != b["items"]:
        only_a = sorted(set(a["items"]) - set(b["items"]))
        only_b = sorted(set(b["items"]) - set(a["items"]))
        parts = [f"only in {name}: {', '.join(x[:3])}{' …' if len(x) > 3 else ''} ({len(x)})"
                 for name, x in ((a_name, only_a), (b_name, only_b)) if x]
        out.append("items: " + "; ".join(parts))
    if a.get("task_data") and b.get("task_data") and a["task_data"] != b["task_data"]:
        out.append(f"task data (the suites, fixtures and media its requests are built from): {a_name} sha256 "
                   f"{a['task_data'][:12]}…, {b_name} sha256 {b['task_data'][:12]}…")
    return out


def _plan_differences(key: str, parts: Mapping[str, str], a: Mapping[str, Any], b: Mapping[str, Any],
                      a_name: str, b_name: str) -> list[str]:
    """A module's plan: none on one side (its module not run) differs whole; a workload that names no
    plan at all (one written before the plan was part of it) is not held to it; else each part both
    sides name, one phrase each."""
    if key not in a or key not in b:
        return []
    pa, pb = a[key], b[key]
    if pa is None or pb is None:
        return [] if pa == pb else [f"{key}: {a_name} {_text(pa)}, {b_name} {_text(pb)}"]
    return [f"{key} {label}: {a_name} {_text(pa[part])}, {b_name} {_text(pb[part])}"
            for part, label in parts.items() if part in pa and part in pb and pa[part] != pb[part]]


def _text(value: Any) -> str:
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k} {_text(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_text(v) for v in value) + "]"
    return "none" if value is None else str(value)
