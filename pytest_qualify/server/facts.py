"""Serving facts: what the engine says of its own capacity and start-up, read where the run can see
it, each with its source, or said not to be visible.

- Launch mode reads the server log with the patterns of the engine's version (``engines.toml``
  ``[vllm.log_facts]``: vLLM prints ``GPU KV cache size``, ``Maximum concurrency for N tokens per
  request``, model loading memory and seconds, compile and graph-capture times); a version in no
  row is "not yet characterised", and every fact says so rather than going blank. ``/metrics``
  (``vllm:cache_config_info``) adds the block size and count, and the plugin's clock the time from
  launch to ready.
- Attach mode reads only what ``/metrics`` shows; the rest is "not visible here".
- The reference server writes its SIMULATED facts in one line of its log
  (:data:`SIMULATED_LINE`); they are labelled SIMULATED.

The maximum concurrency at the profile's window is taken from vLLM's line and computed from the KV
tokens too: for hybrid models (full attention beside linear or sliding layers) vLLM's "GPU KV cache
size" line divided the blocks evenly across KV groups and counted them at the smallest block size,
so it disagreed with its own concurrency line (vLLM #40691; #40694 derives the tokens from the
concurrency instead). When the two disagree both are shown and, for the concurrency and the KV
tokens alike, the lower reading is the fact (a false PASS is the worst outcome). No pytest, no sockets: the
caller hands in the log and the ``/metrics`` text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pytest_qualify.engines import known
from pytest_qualify.settings import Mode
# The reference server's one line of SIMULATED facts (reference/handler.py writes it).
from pytest_qualify.reference.serving import SIMULATED_LINE

# What a fact's figure is and where it came from.
Status = Literal["read", "computed", "measured", "simulated", "not in the log", "not visible here",
                 "not yet characterised"]
STATUSES: tuple[Status, ...] = ("read", "computed", "measured", "simulated", "not in the log", "not visible here",
                                "not yet characterised")
SHOWN: tuple[Status, ...] = ("read", "computed", "measured", "simulated")  # a figure is there


@dataclass(frozen=True)
class FactKind:
    key: str
    label: str
    unit: str


# The facts, in the order every reader shows them.
FACTS: tuple[FactKind, ...] = (
    FactKind("kv_cache_tokens", "KV cache", "tokens"),
    FactKind("kv_cache_gib", "KV cache memory", "GiB"),
    FactKind("block_size_tokens", "KV block size", "tokens"),
    FactKind("kv_cache_blocks", "KV blocks", "blocks"),
    FactKind("max_concurrency", "Maximum concurrency at the window", "x"),
    FactKind("model_memory_gib", "Model memory", "GiB"),
    FactKind("weight_load_s", "Weight load", "s"),
    FactKind("compile_s", "torch.compile", "s"),
    FactKind("graph_capture_s", "Graph capture", "s"),
    FactKind("engine_init_s", "Engine init (profile, KV cache, warm-up)", "s"),
    FactKind("startup_s", "Launch to ready", "s"),
)
FACT_KEYS = tuple(f.key for f in FACTS)
KIND = {f.key: f for f in FACTS}

METRIC_INFO = "vllm:cache_config_info"
LOG_SOURCE = "server log"
METRICS_SOURCE = f"/metrics {METRIC_INFO}"
CLOCK_SOURCE = "plugin clock: launch to /health ready"
# Two concurrency figures within this share of each other agree (vLLM prints two decimals).
AGREE_REL = 0.01


@dataclass(frozen=True)
class Fact:
    key: str
    value: float | None
    status: Status
    source: str
    line: str | None = None  # the log line or metric it was read from
    note: str | None = None
    # The value may overstate the truth (computed on an assumption that can only make it larger): it
    # can prove a claim of "at most", never one of "at least" or "within" (gate/claims.py).
    upper_bound: bool = False

    def as_dict(self) -> dict[str, Any]:
        kind = KIND[self.key]
        value: Any = self.value
        if value is not None and kind.unit in ("tokens", "blocks"):
            value = int(round(value))
        out = {"label": kind.label, "unit": kind.unit, "value": value, "status": self.status,
               "source": self.source, "line": self.line, "note": self.note}
        if self.upper_bound:
            out["upper_bound"] = True
        return out


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def read_log(text: str, patterns: Mapping[str, Sequence[str]]) -> dict[str, tuple[dict[str, float], str]]:
    """Each fact's first match in the log: its groups as numbers and the line (trimmed of vLLM's
    process prefix). A later line of the same fact does not replace the first (vLLM prints a start-up
    figure once; a restart's second log is not this boot's)."""
    compiled = {key: [re.compile(p) for p in pats] for key, pats in patterns.items()}
    found: dict[str, tuple[dict[str, float], str]] = {}
    for raw in text.splitlines():
        for key, rxs in compiled.items():
            if key in found:
                continue
            for rx in rxs:
                m = rx.search(raw)
                if m:
                    groups = {k: _number(v) for k, v in m.groupdict().items() if v is not None}
                    if "value" in groups:
                        found[key] = (groups, raw.strip()[:300])
                        break
    return found


def simulated_facts(text: str) -> dict[str, float] | None:
    """The reference server's SIMULATED facts from its log, or None when it wrote none."""
    for raw in text.splitlines():
        at = raw.find(SIMULATED_LINE)
        if at >= 0:
            try:
                data = json.loads(raw[at + len(SIMULATED_LINE):])
            except ValueError:
                return None
            return {k: float(v) for k, v in data.items() if k in FACT_KEYS and isinstance(v, (int, float))}
    return None


def cache_config_info(text: str | None) -> dict[str, str] | None:
    """The labels of ``vllm:cache_config_info`` in a ``/metrics`` text, or None when it is not there."""
    if not text:
        return None
    from prometheus_client.parser import text_string_to_metric_families

    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name in (METRIC_INFO, "vllm_cache_config_info"):
                    return dict(sample.labels)
    except ValueError:
        return None
    return None


def admission_limit(text: str | None) -> tuple[int, str] | None:
    """The engine's admission limit (``max_num_seqs``: requests run at once) as a ``/metrics`` text
    shows it, with the metric it was read from, or None. vLLM 0.32.0 shows none:
    ``vllm:cache_config_info`` carries its CacheConfig, which has no ``max_num_seqs``, and no
    scheduler gauge is exported (docs/real-vllm.md lists its metrics). A server that shows it does so
    as an info gauge's label (``vllm:scheduler_config_info{max_num_seqs="4"} 1``: the reference
    server, and vLLM-compatible servers that export their scheduler's configuration)."""
    if not text:
        return None
    from prometheus_client.parser import text_string_to_metric_families

    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                raw = sample.labels.get("max_num_seqs")
                if sample.name.endswith("config_info") and raw is not None and raw.strip().isdigit() and int(raw) >= 1:
                    return int(raw), sample.name
    except ValueError:
        return None
    return None


def _label_number(labels: Mapping[str, str], key: str) -> float | None:
    raw = labels.get(key)
    if raw is None or raw in ("None", "", "null"):
        return None
    try:
        return float(raw)
    except ValueError:
        return None


def _from_metrics(labels: Mapping[str, str] | None) -> dict[str, Fact]:
    if labels is None:
        return {}
    out: dict[str, Fact] = {}

    def put(key: str, label: str, scale: float = 1.0) -> None:
        value = _label_number(labels, label)
        if value is not None:
            out[key] = Fact(key, value * scale, "read", METRICS_SOURCE, f'{label}="{labels[label]}"')

    put("block_size_tokens", "block_size")
    put("kv_cache_blocks", "num_gpu_blocks")
    put("kv_cache_tokens", "kv_cache_size_tokens")
    put("kv_cache_gib", "kv_cache_memory_bytes", 1 / 2**30)
    put("max_concurrency", "kv_cache_max_concurrency")
    if "kv_cache_tokens" not in out and "block_size_tokens" in out and "kv_cache_blocks" in out:
        tokens = (out["block_size_tokens"].value or 0) * (out["kv_cache_blocks"].value or 0)
        out["kv_cache_tokens"] = Fact("kv_cache_tokens", tokens, "computed", METRICS_SOURCE + ": block size × blocks",
                                      note="one KV group assumed: a hybrid model's groups share the pool, so this "
                                           "is at most the pool's tokens", upper_bound=True)
    return out


def _concurrency(facts: dict[str, Fact], engine: Fact | None, engine_tokens: float | None,
                 window_tokens: int) -> dict[str, Any]:
    """vLLM's own concurrency figure and the KV tokens over the window, side by side; the fact is
    the engine's where it is for the window and agrees, else the lower of the two."""
    tokens = facts.get("kv_cache_tokens")
    computed = tokens.value / window_tokens if tokens is not None and tokens.value is not None else None
    said = engine.value if engine is not None else None
    at_window = said is not None and (engine_tokens is None or int(engine_tokens) == window_tokens)
    section: dict[str, Any] = {
        "window_tokens": window_tokens,
        "engine": None if engine is None else {"value": said, "at_tokens": int(engine_tokens) if engine_tokens else None,
                                               "source": engine.source, "line": engine.line},
        "from_kv_tokens": round(computed, 4) if computed is not None else None,
        "agree": None,
        "note": None,
    }
    if engine is not None and said is not None and at_window:
        if computed is None:
            facts["max_concurrency"] = engine
            return section
        agree = abs(said - computed) <= AGREE_REL * max(said, computed)
        section["agree"] = agree
        if agree:
            facts["max_concurrency"] = engine
            return section
        low = min(said, computed)
        note = (f"{engine.source} says {said:.2f}x, KV tokens / window say {computed:.2f}x: they disagree "
                f"(vLLM #40691: the KV tokens line of a hybrid model counts its block groups as if split evenly); "
                f"the lower, {low:.2f}x, is the fact")
        section["note"] = note
        facts["max_concurrency"] = Fact("max_concurrency", low, engine.status, f"{engine.source} and KV tokens / window",
                                        engine.line, note)
        by_concurrency = said * window_tokens
        if by_concurrency < tokens.value:  # the lower KV pool too: a claim of at least N tokens is held to it
            facts["kv_cache_tokens"] = Fact("kv_cache_tokens", round(by_concurrency), tokens.status,
                                            f"{engine.source} x window (lower than {tokens.source})", engine.line,
                                            f"{tokens.source} says {tokens.value:,.0f} tokens; {note}")
    elif computed is not None and tokens is not None:
        note = None
        if engine is not None:
            note = (f"vLLM's line is for {int(engine_tokens or 0):,} tokens per request ({said:.2f}x), not the "
                    f"profile's window of {window_tokens:,}")
            section["note"] = note
        status: Status = "simulated" if tokens.status == "simulated" else "computed"
        facts["max_concurrency"] = Fact("max_concurrency", computed, status, f"KV tokens / window ({tokens.source})",
                                        None, note, upper_bound=tokens.upper_bound)
    return section


def serving_facts(*, mode: Mode, simulated: bool, engine_version: str | None, window_tokens: int,
                  log_text: str | None, metrics_text: str | None, ready_s: float | None) -> dict[str, Any]:
    """The summary's ``serving_facts`` section: every fact of :data:`FACTS` with its value and
    source, or the reason it has none."""
    facts: dict[str, Fact] = {}
    engine_line: Fact | None = None
    engine_tokens: float | None = None
    behaviour = known(engine_version)
    labels = cache_config_info(metrics_text)
    missing: Status = "not in the log"
    if simulated:
        sim = simulated_facts(log_text or "")
        source = "reference server (SIMULATED)"
        if sim is None:
            # Attached to a simulated endpoint: what its /metrics shows, labelled SIMULATED.
            for key, fact in _from_metrics(labels).items():
                facts[key] = Fact(key, fact.value, "simulated", fact.source + " (SIMULATED)", fact.line, fact.note)
            missing = "not visible here"
        else:
            for key, value in sim.items():
                if key == "max_concurrency":
                    engine_line = Fact(key, value, "simulated", source, SIMULATED_LINE.strip())
                    engine_tokens = float(window_tokens)
                else:
                    facts[key] = Fact(key, value, "simulated", source, SIMULATED_LINE.strip())
        characterised = "reference server (SIMULATED): its own facts"
    elif mode == Mode.ATTACH:
        facts.update(_from_metrics(labels))
        missing = "not visible here"
        characterised = behaviour.characterised if behaviour is not None else None
        if "max_concurrency" in facts:
            engine_line, engine_tokens = facts.pop("max_concurrency"), float(window_tokens)
    else:
        characterised = behaviour.characterised if behaviour is not None else None
        if behaviour is None:
            missing = "not yet characterised"
        else:
            for key, (groups, line) in read_log(log_text or "", behaviour.log_facts).items():
                fact = Fact(key, groups["value"], "read", LOG_SOURCE, line)
                if key == "max_concurrency":
                    engine_line, engine_tokens = fact, groups.get("tokens")
                else:
                    facts[key] = fact
        metric_facts = _from_metrics(labels)
        if engine_line is None and "max_concurrency" in metric_facts:
            engine_line, engine_tokens = metric_facts["max_concurrency"], float(window_tokens)
        for key, fact in metric_facts.items():
            if key != "max_concurrency":
                facts.setdefault(key, fact)
    if ready_s is not None and mode != Mode.ATTACH:
        facts["startup_s"] = Fact("startup_s", round(ready_s, 3), "simulated" if simulated else "measured", CLOCK_SOURCE)
    concurrency = _concurrency(facts, engine_line, engine_tokens, window_tokens)
    note = None
    if not simulated and mode != Mode.ATTACH and behaviour is None:
        note = (f"engine version {engine_version or 'unknown'} is not yet characterised in pytest_qualify/engines.toml: "
                "its log is not read (the facts /metrics shows are)")
    elif mode == Mode.ATTACH and not simulated:
        note = "attach mode: only /metrics is visible here (no server log, no launch clock)"
    out_facts: dict[str, Any] = {}
    for kind in FACTS:
        fact = facts.get(kind.key)
        if fact is None:
            status: Status = "not visible here" if kind.key == "startup_s" else missing
            where = {"not visible here": "not shown by this endpoint's /metrics",
                     "not in the log": "no line of the server log matched this engine version's patterns",
                     "not yet characterised": "this engine version's log lines are not characterised"}[status]
            fact = Fact(kind.key, None, status, where)
        out_facts[kind.key] = fact.as_dict()
    return {
        "mode": mode,
        "simulated": simulated,
        "engine_version": engine_version,
        "characterised": characterised,
        "note": note,
        "window_tokens": window_tokens,
        "facts": out_facts,
        "concurrency": concurrency,
    }


def fact_value(section: Mapping[str, Any] | None, key: str) -> float | None:
    """A fact's figure from a summary's ``serving_facts`` section, or None when it has none."""
    fact = ((section or {}).get("facts") or {}).get(key) or {}
    value = fact.get("value")
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def format_value(value: float | None, unit: str) -> str:
    if value is None:
        return "—"
    if unit in ("tokens", "blocks"):
        return f"{int(round(value)):,} {unit}"
    if unit == "x":
        return f"{value:.2f}x"
    if unit == "s":
        return f"{value:,.2f} s"
    return f"{value:,.2f} {unit}"


def header_lines(section: Mapping[str, Any]) -> list[str]:
    """The facts as the terminal shows them after start-up: one line of figures, one of what is
    missing, and a disagreement of the two concurrency figures in full."""
    facts = section.get("facts") or {}
    shown, missing = [], []
    for kind in FACTS:
        fact = facts.get(kind.key) or {}
        if fact.get("status") in SHOWN:
            shown.append(f"{kind.label} {format_value(fact.get('value'), kind.unit)}")
        else:
            missing.append(kind.label)
    label = "SIMULATED " if section.get("simulated") else ""
    engine = section.get("engine_version") or "engine version unknown"
    lines = [f"{label}serving facts (vLLM {engine}, {section.get('mode')} mode): " + ("; ".join(shown) or "none visible")]
    if missing:
        statuses = sorted({str((facts.get(k.key) or {}).get('status')) for k in FACTS if k.label in missing})
        lines.append(f"serving facts {' / '.join(statuses)}: {', '.join(missing)}")
    note = (section.get("concurrency") or {}).get("note")
    if note:
        lines.append(f"serving facts: {note}")
    if section.get("note"):
        lines.append(f"serving facts: {section['note']}")
    return lines
