"""The promotion's stages as data: which modules and context lanes each stage requires.

A promotion is a sequence, not one run (seeds/002): a functional preflight before hours of
protocol, the full protocol-v3 run, and a post-promotion check through the live route. Each is a
run of its own with its own verdict. The default table is ``stages.toml``; a profile may override
a stage's modules and lanes under ``[stages.<name>]``. ``full`` is always the profile's whole
``modules.required`` at every lane: only its PASS is a qualification.

No pytest here and no import of ``profiles`` (which builds its stages with :func:`resolve_stages`):
a bad table raises :class:`StageError` naming the field, which the profile loader prefixes with
the file.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, Protocol

FULL = "full"
ALL = "all"
LARGEST = "largest"


class StageError(ValueError):
    """A stage table that cannot be used; ``field`` is the dotted path of the offending value."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"field '{field}' is invalid: {message}")
        self.field = field


class _Lane(Protocol):
    name: str
    prompt_tokens: int


@dataclass(frozen=True)
class Stage:
    """One stage as it applies to one profile."""

    name: str
    title: str
    verdict_label: str  # "QUALIFICATION" only for full
    modules: tuple[str, ...]  # in the profile's protocol order
    lanes: tuple[str, ...]  # the context lanes this stage runs
    qualifies: bool  # its PASS is a qualification (full only)
    accepts_promoted: bool  # --qualify-promoted applies to it
    # Only a held identity gives the stage its meaning (rollback): without --qualify-promoted it
    # would pass a rollback route serving something nobody qualified.
    requires_promoted: bool = False
    # Modules of the default table this profile does not run at all (e.g. tools in a text-only
    # CPU profile): listed in the report, never silently dropped.
    not_in_profile: tuple[str, ...] = ()

    def selects(self, module: str, lane: str | None) -> bool:
        """Whether an item of ``module`` (at context ``lane``, if it has one) belongs to this stage."""
        return module in self.modules and (lane is None or lane in self.lanes)

    def verdict_line(self, verdict: str) -> str:
        """The one line that states the verdict; only full's reads ``QUALIFICATION: PASS``."""
        if self.qualifies:
            return f"{self.verdict_label}: {verdict}"
        return f"{self.verdict_label}: {verdict} (stage {self.name}; not a qualification)"

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "title": self.title, "verdict_label": self.verdict_label,
            "modules": list(self.modules), "lanes": list(self.lanes), "qualifies": self.qualifies,
            "accepts_promoted": self.accepts_promoted, "requires_promoted": self.requires_promoted,
            "not_in_profile": list(self.not_in_profile),
        }


@cache
def default_table() -> dict[str, dict[str, Any]]:
    """The package's stage table (``stages.toml``), in its order."""
    text = resources.files("pytest_qualify.promotion").joinpath("stages.toml").read_text()
    return dict(tomllib.loads(text)["stages"])


def stage_names() -> tuple[str, ...]:
    return tuple(default_table())


def check_stage_name(name: str) -> str:
    """The name when it is a known stage, else :class:`ValueError` listing the known ones."""
    if name not in default_table():
        raise ValueError(f"unknown stage {name!r} (expected one of {', '.join(stage_names())})")
    return name


def _lanes(spec: Any, lanes: Sequence[_Lane], field: str) -> tuple[str, ...]:
    names = [lane.name for lane in lanes]
    if spec == ALL:
        return tuple(names)
    if spec == LARGEST:
        return (max(lanes, key=lambda lane: lane.prompt_tokens).name,) if lanes else ()
    if isinstance(spec, list) and spec:
        for i, name in enumerate(spec):
            if name not in names:
                raise StageError(f"{field}.{i}", f"unknown lane {name!r} (this profile's lanes: {', '.join(names)})")
        if len(set(spec)) != len(spec):
            raise StageError(field, f"lane names repeat: {spec}")
        return tuple(n for n in names if n in spec)
    raise StageError(field, f"expected '{ALL}', '{LARGEST}' or a non-empty list of lane names, got {spec!r}")


def resolve_stages(
    overrides: Mapping[str, Any],
    required_modules: Sequence[str],
    lanes: Sequence[_Lane],
    known_modules: Sequence[str],
) -> tuple[Stage, ...]:
    """The profile's stages: the default table with the profile's ``[stages.*]`` over it.

    A module the profile names for a stage must be one of its ``modules.required``; a module the
    default table names but the profile does not run is listed in ``not_in_profile``.
    """
    table = default_table()
    for name in overrides:
        if name == FULL:
            raise StageError("stages.full", "the full stage is always modules.required at every lane; "
                                            "change modules.required instead")
        if name not in table:
            raise StageError(f"stages.{name}", f"unknown stage (expected one of {', '.join(n for n in table if n != FULL)})")
    out = []
    for name, default in table.items():
        own = dict(overrides.get(name) or {})
        unknown = set(own) - {"modules", "lanes"}
        if unknown:
            raise StageError(f"stages.{name}.{sorted(unknown)[0]}", "a profile may set only 'modules' and 'lanes'")
        spec = own.get("modules", default["modules"])
        dropped: list[str] = []
        if spec == ALL:
            modules = tuple(required_modules)
        elif "modules" in own:
            if not isinstance(spec, list) or not spec:
                raise StageError(f"stages.{name}.modules", f"expected a non-empty list of module ids, got {spec!r}")
            for i, mod in enumerate(spec):
                if mod not in known_modules:
                    raise StageError(f"stages.{name}.modules.{i}",
                                     f"unknown module {mod!r} (expected one of {', '.join(known_modules)})")
                if mod not in required_modules:
                    raise StageError(f"stages.{name}.modules.{i}",
                                     f"module {mod!r} is not in modules.required: a stage cannot ask more "
                                     "than the full qualification")
            modules = tuple(m for m in required_modules if m in spec)
        else:
            modules = tuple(m for m in required_modules if m in spec)
            dropped = [m for m in spec if m not in required_modules]
        out.append(Stage(
            name=name,
            title=str(default["title"]),
            verdict_label=str(default["verdict"]),
            modules=modules,
            lanes=_lanes(own.get("lanes", default["lanes"]), lanes, f"stages.{name}.lanes"),
            qualifies=bool(default["qualifies"]),
            accepts_promoted=bool(default["accepts_promoted"]),
            requires_promoted=bool(default.get("requires_promoted", False)),
            not_in_profile=tuple(dropped),
        ))
    return tuple(out)


def select(stages: Sequence[Stage], name: str) -> Stage:
    """The stage called ``name``; a stage this profile can run none of is a ValueError."""
    for stage in stages:
        if stage.name == name:
            if not stage.modules:
                raise ValueError(f"stage {name!r} requires {', '.join(stage.not_in_profile)}, none of which "
                                 "this profile runs (modules.required)")
            return stage
    raise ValueError(f"unknown stage {name!r} (expected one of {', '.join(s.name for s in stages)})")
