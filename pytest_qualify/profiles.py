"""Profiles: the deployment contract as data (TOML), validated against a JSON Schema.

No pytest import here: an invalid profile raises :class:`ProfileError`, which the plugin turns
into a usage error naming the file, the field and what was expected.
"""

from __future__ import annotations

import math

import json
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pytest_qualify.datafile import read_toml
from pytest_qualify.promotion.stages import Stage, StageError, resolve_stages

BUILTIN_DIR = "profiles"


class ProfileError(ValueError):
    """A profile that cannot be used; the message names the file and the field."""


@dataclass(frozen=True)
class Lane:
    name: str
    prompt_tokens: int

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class Deployment:
    model: str
    served_name: str
    revision: str = ""
    engine: str = ""
    image: str = ""
    image_digest: str = ""
    quantization: str = ""
    kv_cache_dtype: str = ""


@dataclass(frozen=True)
class Limits:
    window_tokens: int
    answer_tokens: int
    lanes: tuple[Lane, ...]
    reasoning_headroom_tokens: int = 0
    max_num_seqs: int = 1
    images_per_request: int = 0
    videos_per_request: int = 0
    lane_tolerance_tokens: int = 0

    @property
    def answer_budget_tokens(self) -> int:
        """``max_tokens`` of every protocol question: the visible answer plus the reasoning a
        thinking model spends before it (the one budget rule, also what a lane must leave free)."""
        return self.answer_tokens + self.reasoning_headroom_tokens

    @property
    def smallest_lane(self) -> Lane:
        """The lane of the fewest prompt tokens (the first such on a tie): the size of the integrity
        module's cache probe, and the lane whose timed answer it re-asks (one rule, read by both)."""
        return min(self.lanes, key=lambda lane: lane.prompt_tokens)


@dataclass(frozen=True)
class Thinking:
    enabled: bool
    overridable: bool


@dataclass(frozen=True)
class Timeouts:
    startup_s: float
    request_s: float
    per_1k_prompt_tokens_s: float = 0.0
    # After a stream's first chunk, silence this long fails the item (the request budget governs
    # until the first chunk: a long prefill is not a stall).
    stream_idle_s: float = 30.0

    def for_prompt(self, prompt_tokens: int) -> float:
        """The request timeout for a prompt of this size: long lanes legitimately take longer."""
        return self.request_s + self.per_1k_prompt_tokens_s * prompt_tokens / 1000.0


@dataclass(frozen=True)
class Serve:
    command: tuple[str, ...]
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    host: str = "127.0.0.1"
    port: int | None = None
    # A profile for an endpoint someone else launched (``python -m pytest_qualify init`` writes
    # one): its recipe cannot be launched, so launch mode is a usage error before anything starts.
    attach_only: bool = False


@dataclass(frozen=True)
class Steer:
    """The profile's optional ``[steer]`` table: in launch mode the plugin starts vLLM and the
    steering proxy in front of it (reference/steer.py), which forces the oracles' known-correct
    answers through the real engine. Absent: the recipe is served as it is."""

    tool_call_syntax: str
    strip_chat_template_kwargs: bool = False


@dataclass(frozen=True)
class LaneSlo:
    """Latency ceilings for one context lane, each held by every repetition of the lane."""

    lane: str
    ttft_s_max: float | None = None
    e2e_s_max: float | None = None


@dataclass(frozen=True)
class Slo:
    """The profile's optional ``[slo]`` table: latency limits the gate checks on client-observed
    figures (vLLM bench's definitions, see timing.py). Absent: no SLO row in the gate."""

    lanes: tuple[LaneSlo, ...] = ()
    decode_tok_s_p50_min: float | None = None
    ttft_s_p95_max: float | None = None
    # ``[slo.load]``: limits on the load module's per-level figures (names as in LOAD_SLO_KEYS),
    # each held at every level and repetition.
    load: tuple[tuple[str, float], ...] = ()


# The load module's figures an ``[slo.load]`` limit may name: ceilings (``_max``) and floors (``_min``).
LOAD_SLO_KEYS: tuple[str, ...] = (
    *(f"{m}_{q}_max" for m in ("ttft_s", "tpot_s", "itl_s") for q in ("p50", "p95", "p99")),
    "queue_time_s_mean_max", "goodput_min", "output_tok_s_min", "requests_per_s_min",
)
LOAD_MIX: tuple[str, ...] = ("smoke", "tools", "recall", "json")


@dataclass(frozen=True)
class LoadRules:
    """The profile's ``[load]`` table: the load module's concurrency levels (the first is 1: the
    answers the other levels are held to), the mix requests and the decode probes each level sends,
    the probe's exact output length, the modules whose items make the mix, whether the deployment
    promises batch-invariant output (then any answer that differs from its concurrency-1 answer
    fails), and goodput's TTFT / TPOT limits (a probe inside both counts as good)."""

    levels: tuple[int, ...]
    requests_per_level: int
    probes_per_level: int = 4
    probe_tokens: int = 64
    mix: tuple[str, ...] = LOAD_MIX
    batch_invariant: bool = False
    goodput_ttft_s_max: float | None = None
    goodput_tpot_s_max: float | None = None


# A claim's figure and where it is measured: a serving fact (server/facts.py), the sweep module's
# TTFT at a prompt size or its decode probe, a context lane, or the run's client-observed figures.
FACT_FIGURES: tuple[str, ...] = ("kv_cache_tokens", "kv_cache_gib", "max_concurrency", "model_memory_gib",
                                 "weight_load_s", "startup_s", "compile_s", "graph_capture_s")
SWEEP_FIGURES: tuple[str, ...] = ("ttft_s", "prefill_tok_s", "decode_tok_s")  # at prompt_tokens
LANE_FIGURES: tuple[str, ...] = ("ttft_s", "e2e_s")  # at a lane
RUN_FIGURES: tuple[str, ...] = ("decode_tok_s_p50", "decode_tok_s_p95", "prefill_tok_s_p50")
CLAIM_FIGURES: tuple[str, ...] = (*FACT_FIGURES, "ttft_s", "e2e_s", "prefill_tok_s", "decode_tok_s", *RUN_FIGURES)
Direction = Literal["at_most", "at_least", "within"]


@dataclass(frozen=True)
class Claim:
    """One published figure of the recipe the deployment is held to: measured ``at_most`` /
    ``at_least`` / ``within`` the claimed value, give or take ``tolerance`` (a share of the claimed
    value). ``required``: a claim the endpoint cannot show leaves the run INCOMPLETE; otherwise it
    is listed as not verifiable here."""

    name: str
    figure: str
    claimed: float
    direction: Direction
    tolerance: float = 0.0
    required: bool = False
    prompt_tokens: int | None = None
    lane: str | None = None
    said: str = ""


@dataclass(frozen=True)
class Claims:
    """The profile's ``[claims]`` table: the claims in the order written, and where they come from."""

    claims: tuple[Claim, ...]
    source: str = ""


@dataclass(frozen=True)
class SweepRules:
    """The profile's ``[sweep]`` table and the sizes its claims name: the TTFT sweep's prompt sizes
    (server tokens, exact), samples per size after one warm-up, the output length of each sample;
    the decode probe's prompt sizes, output length (``min_tokens = max_tokens``, ``ignore_eos``)
    and samples."""

    prompt_tokens: tuple[int, ...] = ()
    samples: int = 3
    output_tokens: int = 16
    decode_prompt_tokens: tuple[int, ...] = ()
    decode_tokens: int = 128
    decode_samples: int = 3


@dataclass(frozen=True)
class LengthBand:
    """The visible answer's length, in characters, that a module's answers stay within (TEST09)."""

    module: str
    min_chars: int
    max_chars: int


@dataclass(frozen=True)
class IntegrityRules:
    """The profile's ``[integrity]`` table: what the integrity module holds the server to.

    ``prefix_cache``: "salted" — a fresh ``cache_salt`` must see 0 cached tokens (the context lanes'
    rule), "unchecked" — the deployment's cache does not report or honour salts.
    ``repeat_e2e_ratio_min``: a repeated request's end-to-end time over a fresh one's, at least.
    ``cache_probe_tokens``: the size of the repeated prompt (default: the smallest lane).
    ``incremental_streaming``: "finding" — a streamed answer whose output all came in one chunk with
    its finish is recorded and reported; "required" — it fails (graders/answer_checks.py)."""

    prefix_cache: str = "salted"
    repeat_e2e_ratio_min: float = 0.5
    cache_probe_tokens: int | None = None
    length_bands: tuple[LengthBand, ...] = ()
    incremental_streaming: str = "finding"

    def band(self, module: str) -> LengthBand | None:
        return next((b for b in self.length_bands if b.module == module), None)


@dataclass(frozen=True)
class FleetRules:
    """The profile's ``[fleet]`` table: the replicas the deployment is served from, as
    ``python -m pytest_qualify fleet`` names them (its command line overrides each): their own URLs
    (``replicas``, ``ID=URL`` or ``URL``), or a ``router`` with ``replica_ids`` or ``replica_count``;
    the ``channel`` that pins and attributes (fleet/channels.toml); the bounded readiness wait and the
    pinned probes' end-to-end limit."""

    replicas: tuple[str, ...] = ()
    router: str | None = None
    replica_ids: tuple[str, ...] = ()
    replica_count: int | None = None
    channel: str | None = None
    ready_timeout_s: float = 60.0
    replica_e2e_limit_s: float | None = None


@dataclass(frozen=True)
class AbRules:
    """The profile's ``[ab]`` table: how a comparison of this deployment with another decides.
    ``figures``: the figure ids (globs allowed) that gate: B separably worse on one of them fails the
    comparison; empty: every figure gates. ``tolerance_pct``: the difference an equivalence call
    (two one-sided tests) and a non-inferiority call allow. ``boots``: boots per arm of an A/B.
    ``noise_floor``: a file written by an A/A campaign whose per-figure variance and degrees of
    freedom are pooled with the boots'."""

    figures: tuple[str, ...] = ()
    tolerance_pct: float = 5.0
    boots: int = 3
    noise_floor: str | None = None


@dataclass(frozen=True)
class Profile:
    name: str
    source: str
    description: str
    deployment: Deployment
    limits: Limits
    thinking: Thinking
    timeouts: Timeouts
    serve: Serve
    required_modules: tuple[str, ...]
    waivable_modules: tuple[str, ...] = ()
    # [promotion] require_signature: a post-promotion or rollback check is backed only by a promoted
    # bundle whose signature verifies against the key named by --qualify-promoted-key.
    require_signature: bool = False
    # (module, the most of its items all waivers together may waive), per waivable module.
    max_waived: tuple[tuple[str, int], ...] = ()
    robustness_examples: int = 200
    slo: Slo | None = None
    stages: tuple[Stage, ...] = ()
    steer: Steer | None = None
    integrity: IntegrityRules = IntegrityRules()
    load: LoadRules | None = None
    ab: AbRules = AbRules()
    fleet: FleetRules | None = None
    claims: Claims | None = None
    sweep: SweepRules = SweepRules()
    tool_use: ToolUseRules | None = None  # _build always reads one (the whole set, no floor by default)

    def stage(self, name: str) -> Stage:
        """The stage called ``name`` (see stages.py); ValueError when unknown or empty here."""
        from pytest_qualify.promotion.stages import select

        return select(self.stages, name)

    def workload(self, stage: str = "full") -> dict[str, Any]:
        """The workload a run of this profile at ``stage`` measures, in the shape of
        ``bundle_format.workload.of_summary`` (no items: those are known once the run collected):
        what an A/B holds its two profiles to before any server starts."""
        from pytest_qualify.bundle_format.workload import SAMPLING, load_plan, sweep_plan, task_data_sha256

        st = self.stage(stage)
        modules = list(st.modules)
        return {
            "modules": sorted(modules),
            "lanes": {lane.name: lane.prompt_tokens for lane in self.limits.lanes
                      if "context" in modules and lane.name in st.lanes},
            "answer_tokens": self.limits.answer_tokens,
            "reasoning_headroom_tokens": self.limits.reasoning_headroom_tokens,
            "thinking": self.thinking.enabled,
            "window_tokens": self.limits.window_tokens if "window" in modules else None,
            "load": load_plan(self.load) if self.load is not None and "load" in modules else None,
            "sweep": sweep_plan(self.sweep) if "sweep" in modules else None,
            "sampling": SAMPLING,
            "task_data": task_data_sha256(),
        }

    def lane(self, name: str) -> Lane:
        for lane in self.limits.lanes:
            if lane.name == name:
                return lane
        raise KeyError(name)


@dataclass(frozen=True)
class ModuleInfo:
    id: str
    title: str
    waivable: bool
    # False: a module that measures for the profile's claims (the sweep) and is no part of the
    # protocol-v3 contract; a profile without it is not "protocol v3 less" anything.
    protocol: bool = True
    max_waived: int = 0  # the most items all waivers together may waive, unless a profile says otherwise


@cache
def module_registry() -> dict[str, ModuleInfo]:
    """The protocol modules, in protocol order, from ``modules.toml``."""
    data = tomllib.loads(resources.files("pytest_qualify").joinpath("modules.toml").read_text())
    return {m["id"]: ModuleInfo(m["id"], m["title"], bool(m["waivable"]), bool(m.get("protocol", True)),
                                int(m.get("max_waived", 0)))
            for m in data["module"]}


def protocol_modules() -> tuple[str, ...]:
    """The protocol-v3 modules, in protocol order: the registry less the modules outside it."""
    return tuple(m for m, info in module_registry().items() if info.protocol)


@cache
def _schema() -> dict[str, Any]:
    text = resources.files("pytest_qualify").joinpath("schemas/profile.schema.json").read_text()
    return json.loads(text)


def builtin_profiles() -> dict[str, Path]:
    """Built-in profile names mapped to their files."""
    folder = resources.files("pytest_qualify").joinpath(BUILTIN_DIR)
    found = {}
    for entry in folder.iterdir():
        if entry.name.endswith(".toml"):
            found[entry.name[: -len(".toml")]] = Path(str(entry))
    return dict(sorted(found.items()))


def resolve_profile_path(spec: str) -> Path:
    """A built-in name or a path to a profile file."""
    builtins = builtin_profiles()
    if spec in builtins:
        return builtins[spec]
    path = Path(spec).expanduser()
    if path.suffix == ".toml" or os.sep in spec or path.exists():
        if not path.is_file():
            raise ProfileError(f"profile file {spec!r} does not exist or is not a file")
        return path
    raise ProfileError(
        f"unknown profile {spec!r}: expected a built-in name ({', '.join(builtins)}) "
        "or a path to a .toml profile file"
    )


def _field_path(error: Any) -> str:
    parts = [str(p) for p in error.absolute_path]
    if error.validator == "required":
        missing = error.message.split("'")[1] if "'" in error.message else "?"
        parts.append(missing)
    if error.validator == "additionalProperties":
        return ".".join(parts) or "(top level)"
    return ".".join(parts) or "(top level)"


def load_profile(spec: str) -> Profile:
    """Load and validate a profile; raise :class:`ProfileError` naming file and field."""
    import jsonschema

    path = resolve_profile_path(spec)
    raw = read_toml(path, "profile file", ProfileError)

    validator = jsonschema.Draft202012Validator(_schema())
    errors = sorted(validator.iter_errors(raw), key=lambda e: list(e.absolute_path))
    if errors:
        err = errors[0]
        raise ProfileError(
            f"profile file {path}: field '{_field_path(err)}' is invalid: {err.message}"
            + (f" (expected {err.validator}: {err.validator_value})" if err.validator in ("type", "minimum", "enum", "pattern") else "")
        )
    return _build(raw, path)


# ``${VAR:-default}`` (VAR when set and not empty, else the default), ``${VAR}`` and ``$VAR``.
_VAR_RE = re.compile(r"\$(?:\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?::-(?P<default>[^}]*))?\}|(?P<bare>[A-Za-z_][A-Za-z0-9_]*))")


def expand(text: str, environ: Mapping[str, str] | None = None) -> str:
    """Environment references in a profile value, then a leading ``~``: one profile file can then
    point at a venv or model directory that differs per machine (``QUALIFY_VLLM_VENV``,
    ``QUALIFY_MODELS``) with a default that works without any variable set. A variable that is not
    set and has no default is left as written, so the launch error shows what was missing."""
    env = os.environ if environ is None else environ

    def sub(m: re.Match[str]) -> str:
        name = m.group("braced") or m.group("bare")
        value = env.get(name)
        if m.group("default") is not None:
            return value if value else expand(m.group("default"), env)
        return value if value is not None else m.group(0)

    out = _VAR_RE.sub(sub, text)
    return os.path.expanduser(out) if out.startswith("~") else out


@dataclass(frozen=True)
class ToolUseRules:
    """The profile's ``[tool_use]`` table: the first ``requests`` requests of the stored set, and the
    reference deployment's earlier runs' figures (``floor_runs``, read from the ``floor`` file, which
    was measured on those same requests) the module's thresholds come from. No floor: the module
    measures and records its figures (what a first floor is built from), and judges nothing."""

    requests: int | None = None  # None: the whole set
    floor: str | None = None
    temperature: float = 0.0  # above 0: each run samples with its own seed (a reference's runs then vary)
    floor_runs: tuple[Mapping[str, float], ...] = ()


# The stored request set and the measures a floor file names (tasks/tool_use.py writes and reads them).
TOOL_USE_SET = "tool_use/requests.json"
TOOL_USE_MEASURES = ("trigger_f1", "schema_accuracy", "exact_accuracy")


def _tool_use(raw: dict[str, Any], path: Path) -> ToolUseRules:
    """The ``[tool_use]`` table, its floor file read and held to this profile's workload here, so
    a floor that cannot judge this run is a usage error before any server starts."""
    import hashlib
    from types import MappingProxyType

    table = raw.get("tool_use")
    if not table:
        return ToolUseRules()  # the set is read only where a profile sets a table: loading stays cheap
    fixtures = resources.files("pytest_qualify.fixtures")
    data = fixtures.joinpath(TOOL_USE_SET).read_bytes()
    stored = json.loads(data)["requests"]
    requests = int(table.get("requests", len(stored)))
    if requests > len(stored):
        raise ProfileError(f"profile file {path}: field 'tool_use.requests' is invalid: the set holds {len(stored)} requests")
    temperature = float(table.get("temperature", 0.0))
    if "floor" not in table:
        return ToolUseRules(requests=requests, temperature=temperature)
    floor = str(table["floor"])
    where = (Path(str(fixtures)) / floor.removeprefix("fixtures/") if floor.startswith("fixtures/")
             else Path(floor) if Path(floor).is_absolute() else path.parent / floor)
    bad = f"profile file {path}: field 'tool_use.floor' is invalid: {where}"
    try:
        content = json.loads(where.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ProfileError(f"{bad} cannot be read ({exc.strerror or exc})") from None
    except ValueError as exc:
        raise ProfileError(f"{bad} is not JSON ({exc})") from None
    if not isinstance(content, dict) or content.get("schema") != "pytest-qualify/tool-use-floor":
        raise ProfileError(f"{bad} is not a tool-use floor file (field 'schema' is not 'pytest-qualify/tool-use-floor')")
    want = {"requests": requests, "set_sha256": hashlib.sha256(data).hexdigest(), "temperature": temperature}
    got = content.get("workload") or {}
    if got != want:
        diff = "; ".join(f"{k} {got.get(k)!r} there, {want[k]!r} here" for k in want if got.get(k) != want[k])
        raise ProfileError(f"{bad} was measured on another workload ({diff})")
    runs = content.get("runs") or []
    figures = [r.get("figures") if isinstance(r, dict) else None for r in runs]
    if len(runs) < 2 or not all(isinstance(f, dict) and all(isinstance(f.get(m), (int, float)) and 0 <= f[m] <= 1
                                                            for m in TOOL_USE_MEASURES) for f in figures):
        raise ProfileError(f"{bad} needs at least 2 runs, each with {', '.join(TOOL_USE_MEASURES)} between 0 and 1")
    return ToolUseRules(requests=requests, floor=str(where), temperature=temperature,
                        floor_runs=tuple(MappingProxyType({m: float(f[m]) for m in TOOL_USE_MEASURES}) for f in figures))


def _build(raw: dict[str, Any], path: Path) -> Profile:
    d = raw["deployment"]
    model = expand(d["model"])
    deployment = Deployment(
        model=model,
        served_name=d["served_name"],
        revision=d.get("revision", ""),
        engine=d.get("engine", ""),
        image=d.get("image", ""),
        image_digest=d.get("image_digest", ""),
        quantization=d.get("quantization", ""),
        kv_cache_dtype=d.get("kv_cache_dtype", ""),
    )
    lim = raw["limits"]
    lanes = tuple(Lane(x["name"], x["prompt_tokens"]) for x in lim["lanes"])
    limits = Limits(
        window_tokens=lim["window_tokens"],
        answer_tokens=lim["answer_tokens"],
        lanes=lanes,
        reasoning_headroom_tokens=lim.get("reasoning_headroom_tokens", 0),
        max_num_seqs=lim.get("max_num_seqs", 1),
        images_per_request=lim.get("images_per_request", 0),
        videos_per_request=lim.get("videos_per_request", 0),
        lane_tolerance_tokens=lim.get("lane_tolerance_tokens", 0),
    )
    names = [lane.name for lane in lanes]
    if len(set(names)) != len(names):
        raise ProfileError(f"profile file {path}: field 'limits.lanes' has duplicate lane names {names}")
    budget = limits.answer_budget_tokens
    for i, lane in enumerate(lanes):
        if lane.prompt_tokens + budget > limits.window_tokens:
            raise ProfileError(
                f"profile file {path}: field 'limits.lanes.{i}.prompt_tokens' is invalid: lane {lane.name} "
                f"({lane.prompt_tokens} tokens) plus the answer budget ({budget}) exceeds the window "
                f"({limits.window_tokens})"
            )
    modules = tuple(raw["modules"]["required"])
    known = module_registry()
    for i, mod in enumerate(modules):
        if mod not in known:
            raise ProfileError(
                f"profile file {path}: field 'modules.required.{i}' is invalid: unknown module {mod!r} "
                f"(expected one of {', '.join(known)})"
            )
    try:
        stages = resolve_stages(raw.get("stages", {}), modules, lanes, tuple(known))
    except StageError as exc:
        raise ProfileError(f"profile file {path}: {exc}") from None
    t = raw["timeouts"]
    s = raw["serve"]
    claims = _claims(raw, path, names, modules)
    return Profile(
        name=raw["name"],
        source=str(path),
        description=raw.get("description", ""),
        deployment=deployment,
        limits=limits,
        thinking=Thinking(**raw["thinking"]),
        timeouts=Timeouts(t["startup_s"], t["request_s"], t.get("per_1k_prompt_tokens_s", 0.0),
                          t.get("stream_idle_s", 30.0)),
        serve=Serve(
            command=tuple(expand(a) for a in s["command"]),
            args=tuple(expand(a) for a in s.get("args", ())),
            env=tuple(sorted((k, expand(v)) for k, v in s.get("env", {}).items())),
            host=s.get("host", "127.0.0.1"),
            port=s.get("port"),
            attach_only=bool(s.get("attach_only", False)) or _init_refusal(s["command"]),
        ),
        required_modules=modules,
        waivable_modules=(waivable := _waivable(raw, path, known)),
        max_waived=_max_waived(raw, path, known, waivable),
        robustness_examples=raw["modules"].get("robustness_examples", 200),
        slo=_slo(raw, path, names),
        stages=stages,
        require_signature=bool((raw.get("promotion") or {}).get("require_signature", False)),
        steer=Steer(**raw["steer"]) if "steer" in raw else None,
        integrity=_integrity(raw, path, limits, known),
        load=_load(raw, path),
        ab=_ab(raw, path),
        fleet=_fleet(raw),
        claims=claims,
        sweep=_sweep(raw, path, claims, limits, modules),
        tool_use=_tool_use(raw, path),
    )


def _fleet(raw: dict[str, Any]) -> FleetRules | None:
    """The ``[fleet]`` table (the schema checked its fields), or None."""
    table = raw.get("fleet")
    if table is None:
        return None
    limit = table.get("replica_e2e_limit_s")
    return FleetRules(replicas=tuple(table.get("replicas", ())), router=table.get("router"),
                      replica_ids=tuple(table.get("replica_ids", ())), replica_count=table.get("replica_count"),
                      channel=table.get("channel"), ready_timeout_s=float(table.get("ready_timeout_s", 60.0)),
                      replica_e2e_limit_s=float(limit) if limit is not None else None)


def _ab(raw: dict[str, Any], path: Path) -> AbRules:
    """The ``[ab]`` table; a noise-floor path is relative to the profile's file."""
    table = raw.get("ab") or {}
    floor = table.get("noise_floor")
    if floor is not None and not Path(floor).is_absolute():
        floor = str(path.parent / floor)
    return AbRules(figures=tuple(table.get("figures", ())), tolerance_pct=float(table.get("tolerance_pct", 5.0)),
                   boots=int(table.get("boots", 3)), noise_floor=floor)


def _load(raw: dict[str, Any], path: Path) -> LoadRules | None:
    """The ``[load]`` table; its levels rise from 1 (the answers every other level is held to). A
    profile that requires the load module declares its levels: without them the module would be
    judged on a mistake of the profile's, not on the deployment."""
    table = raw.get("load")
    if table is None:
        if "load" in raw["modules"]["required"]:
            raise ProfileError(f"profile file {path}: modules.required names 'load' but the profile has no [load] "
                               "table, so no concurrency level is declared (add [load] levels and "
                               "requests_per_level, or drop 'load' from modules.required)")
        return None
    levels = tuple(table["levels"])
    if levels[0] != 1 or list(levels) != sorted(levels):
        raise ProfileError(f"profile file {path}: field 'load.levels' is invalid: {list(levels)} must rise from 1 "
                           "(concurrency 1 gives the answers every other level is held to)")
    sent = table["requests_per_level"] + table.get("probes_per_level", 4)
    if sent < levels[-1]:
        raise ProfileError(f"profile file {path}: field 'load.requests_per_level' is invalid: {sent} requests a level "
                           f"(mix and probes) cannot keep {levels[-1]} in flight at once")
    goodput = table.get("goodput") or {}
    return LoadRules(
        levels=levels,
        requests_per_level=table["requests_per_level"],
        probes_per_level=table.get("probes_per_level", 4),
        probe_tokens=table.get("probe_tokens", 64),
        mix=tuple(table.get("mix", LOAD_MIX)),
        batch_invariant=table.get("batch_invariant", False),
        goodput_ttft_s_max=goodput.get("ttft_s_max"),
        goodput_tpot_s_max=goodput.get("tpot_s_max"),
    )


def _claims(raw: dict[str, Any], path: Path, lane_names: list[str], modules: tuple[str, ...]) -> Claims | None:
    """The ``[claims]`` table: each claim names a figure and where it is measured (a prompt size for
    the sweep's figures, one of the profile's lanes for a lane's). A claim whose module the profile
    does not run (the context module for a lane, the sweep for a prompt size) is not verifiable in
    its runs: listed as such; a required one is refused here, since no run of the profile could judge it."""
    table = raw.get("claims")
    if table is None:
        return None
    out = []
    for name, spec in table.items():
        if name == "source":
            continue

        def bad(sub: str, why: str) -> ProfileError:
            return ProfileError(f"profile file {path}: field 'claims.{name}{sub}' is invalid: {why}")

        figure = spec.get("figure", name)
        if figure not in CLAIM_FIGURES:
            raise bad("", f"{figure!r} is no figure a claim can name (expected one of {', '.join(CLAIM_FIGURES)}; "
                          "or set 'figure')")
        lane, tokens = spec.get("lane"), spec.get("prompt_tokens")
        if lane is not None and tokens is not None:
            raise bad("", "names both a lane and prompt_tokens; a claim is at one of them")
        if lane is not None:
            if figure not in LANE_FIGURES:
                raise bad(".lane", f"{figure} is not measured per lane (lane figures: {', '.join(LANE_FIGURES)})")
            if lane not in lane_names:
                raise bad(".lane", f"no such lane {lane!r} (expected one of {', '.join(lane_names)})")
        elif figure in ("ttft_s", "e2e_s", "prefill_tok_s", "decode_tok_s"):
            if tokens is None or figure == "e2e_s":
                raise bad("", f"{figure} is claimed at "
                              + ("a lane: set lane" if figure == "e2e_s" else
                                 "a prompt size or a lane: set prompt_tokens or lane" if figure == "ttft_s" else
                                 "a prompt size: set prompt_tokens"))
        elif tokens is not None:
            raise bad(".prompt_tokens", f"{figure} is not measured at a prompt size")
        # A required claim whose module the profile never runs could only ever leave its runs unjudged.
        needs = "context" if lane is not None else "sweep" if tokens is not None else None
        if spec.get("required", False) and needs is not None and needs not in modules:
            raise bad(".required", f"the claim is required and its figure is measured by the {needs} module, which "
                                   f"modules.required does not name (add {needs!r} to it, or drop required)")
        out.append(Claim(name=name, figure=figure, claimed=float(spec["claimed"]), direction=spec["direction"],
                         tolerance=float(spec.get("tolerance", 0.0)), required=bool(spec.get("required", False)),
                         prompt_tokens=tokens, lane=lane, said=str(spec.get("said", ""))))
    return Claims(tuple(out), str(table.get("source", "")))


def _sweep(raw: dict[str, Any], path: Path, claims: Claims | None, limits: Limits, modules: tuple[str, ...]) -> SweepRules:
    """The sweep's sizes: the ``[sweep]`` table's and every size a claim names, each fitting the
    window with its output."""
    table = raw.get("sweep") or {}
    named = [c for c in (claims.claims if claims else ()) if c.prompt_tokens is not None]
    ttft = sorted({*table.get("prompt_tokens", ()), *(c.prompt_tokens for c in named if c.figure != "decode_tok_s")})
    decode = sorted({*([table["decode_prompt_tokens"]] if "decode_prompt_tokens" in table else []),
                     *(c.prompt_tokens for c in named if c.figure == "decode_tok_s")})
    rules = SweepRules(prompt_tokens=tuple(int(t) for t in ttft), samples=table.get("samples", 3),
                       output_tokens=table.get("output_tokens", 16), decode_prompt_tokens=tuple(int(t) for t in decode),
                       decode_tokens=table.get("decode_tokens", 128), decode_samples=table.get("decode_samples", 3))
    if "sweep" in modules and not (rules.prompt_tokens or rules.decode_prompt_tokens):  # nothing to measure
        raise ProfileError(f"profile file {path}: field 'sweep' is invalid: the sweep module is required but names no "
                           "prompt size (sweep.prompt_tokens, sweep.decode_prompt_tokens, or a claim's prompt_tokens)")
    for size, out in [*((t, rules.output_tokens) for t in rules.prompt_tokens),
                      *((t, rules.decode_tokens) for t in rules.decode_prompt_tokens)]:
        if size + out > limits.window_tokens:
            raise ProfileError(f"profile file {path}: field 'sweep' is invalid: a prompt of {size} tokens and its "
                               f"{out} output tokens exceed the window ({limits.window_tokens})")
    return rules


def _init_refusal(command: list[str]) -> bool:
    """A ``[serve]`` command that only says it cannot launch: what ``init`` wrote before
    ``attach_only`` existed."""
    return len(command) == 3 and command[:2] == ["sh", "-c"] and "pytest_qualify init" in command[2] \
        and command[2].rstrip().endswith("exit 2")


def _integrity(raw: dict[str, Any], path: Path, limits: Limits, known: dict[str, ModuleInfo]) -> IntegrityRules:
    """The ``[integrity]`` table; a band names a known module, low <= high; the probe fits the window."""
    table = raw.get("integrity") or {}
    bands = []
    for module, (low, high) in table.get("length_chars", {}).items():
        if module not in known:
            raise ProfileError(f"profile file {path}: field 'integrity.length_chars.{module}' is invalid: unknown "
                               f"module (expected one of {', '.join(known)})")
        if low > high:
            raise ProfileError(f"profile file {path}: field 'integrity.length_chars.{module}' is invalid: "
                               f"[{low}, {high}] is empty (low above high)")
        bands.append(LengthBand(module, low, high))
    probe = table.get("cache_probe_tokens")
    if probe is not None and probe + limits.answer_budget_tokens > limits.window_tokens:
        raise ProfileError(f"profile file {path}: field 'integrity.cache_probe_tokens' is invalid: {probe} tokens "
                           f"plus the answer budget ({limits.answer_budget_tokens}) exceeds the window "
                           f"({limits.window_tokens})")
    timeouts = raw["timeouts"]
    for key, value in timeouts.items():
        # TOML has nan and inf; neither is a wait a run can keep (the schema's bounds let nan through).
        if not math.isfinite(value):
            raise ProfileError(f"profile file {path}: field 'timeouts.{key}' is invalid: {value} is not a number "
                               "of seconds")
    # A written idle limit must be under the request budget, or it could never fire first.
    if "stream_idle_s" in timeouts and timeouts["stream_idle_s"] >= timeouts["request_s"]:
        raise ProfileError(f"profile file {path}: field 'timeouts.stream_idle_s' is invalid: "
                           f"{timeouts['stream_idle_s']} s is not under the request budget "
                           f"request_s ({timeouts['request_s']} s)")
    return IntegrityRules(
        prefix_cache=table.get("prefix_cache", "salted"),
        repeat_e2e_ratio_min=table.get("repeat_e2e_ratio_min", 0.5),
        incremental_streaming=table.get("incremental_streaming", "finding"),
        cache_probe_tokens=probe,
        length_bands=tuple(bands),
    )


def _slo(raw: dict[str, Any], path: Path, lane_names: list[str]) -> Slo | None:
    """The ``[slo]`` table; a lane it names must be one of the profile's lanes."""
    table = raw.get("slo")
    if table is None:
        return None
    lanes = []
    for name, limits in table.get("lanes", {}).items():
        if name not in lane_names:
            raise ProfileError(
                f"profile file {path}: field 'slo.lanes.{name}' is invalid: no such lane "
                f"(expected one of {', '.join(lane_names)})"
            )
        lanes.append(LaneSlo(name, limits.get("ttft_s_max"), limits.get("e2e_s_max")))
    lanes.sort(key=lambda lane: lane_names.index(lane.lane))
    load = tuple((key, float(table["load"][key])) for key in LOAD_SLO_KEYS if key in table.get("load", {}))
    return Slo(tuple(lanes), table.get("decode_tok_s_p50_min"), table.get("ttft_s_p95_max"), load)


def _max_waived(raw: dict[str, Any], path: Path, known: dict[str, ModuleInfo],
                waivable: tuple[str, ...]) -> tuple[tuple[str, int], ...]:
    """How many items of each waivable module all waivers together may waive: the profile's
    ``[modules] max_waived`` table, else the registry's figure (``modules.toml``)."""
    listed = raw["modules"].get("max_waived", {})
    for mod in listed:
        if mod not in waivable:
            raise ProfileError(f"profile file {path}: field 'modules.max_waived.{mod}' is invalid: module {mod!r} "
                               f"is not waivable here (waivable: {', '.join(waivable) or 'none'})")
    return tuple((mod, int(listed.get(mod, known[mod].max_waived if mod in known else 0))) for mod in waivable)


def _waivable(raw: dict[str, Any], path: Path, known: dict[str, ModuleInfo]) -> tuple[str, ...]:
    """Modules whose failed items an operator may waive: the profile's list, else the registry's."""
    listed = raw["modules"].get("waivable")
    if listed is None:
        return tuple(m.id for m in known.values() if m.waivable)
    for i, mod in enumerate(listed):
        if mod not in known or not known[mod].waivable:
            raise ProfileError(
                f"profile file {path}: field 'modules.waivable.{i}' is invalid: module {mod!r} is a hard "
                "serving-contract module and cannot be waived"
            )
    return tuple(listed)
