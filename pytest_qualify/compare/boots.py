"""The arms of a comparison: each a list of boots, one evidence bundle per server boot.

A boot is read through the one door to an earlier run's file (``bundle_format/earlier.py``) and
verified as a promoted bundle is: JSON of the summary schema, ``SHA256SUMS`` present and matching
every file, and the in-toto statement agreeing with the files and with ``summary.json`` (a summary
edited and its ``SHA256SUMS`` line redone still carries the statement written at the run's end). A
bundle that fails is refused, a usage error naming it: its figures are no measurement. A
boot that did not finish (no summary, an INCOMPLETE verdict, a dead server) is kept, named, and
makes the comparison INCOMPLETE: its figures are not a measurement. No pytest here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_qualify.bundle_format.earlier import EarlierRunError, read_earlier, verify_bundle, verify_statement
from pytest_qualify.bundle_format.manifest import SUMMARY
from pytest_qualify.bundle_format.schema import SCHEMA_ID, SummaryError, validate
from pytest_qualify.bundle_format.workload import differences, of_summary
from pytest_qualify.gate.decide import Result


class CompareUsageError(ValueError):
    """An operator-fixable mistake (exit 4): a path that is no bundle, unlike workloads, SIMULATED
    beside real, boots from different kinds of host."""


@dataclass(frozen=True)
class Boot:
    path: Path
    summary: Mapping[str, Any]

    @property
    def run_id(self) -> str:
        return str((self.summary.get("run") or {}).get("id", self.path.name))

    @property
    def verdict(self) -> str:
        return str((self.summary.get("verdict") or {}).get("result", "?"))

    @property
    def finished(self) -> bool:
        """Judged to its end: PASS or FAIL, the server alive to the last item."""
        return self.verdict in (Result.PASS, Result.FAIL) and not (self.summary.get("target") or {}).get("died")

    @property
    def simulated(self) -> bool:
        return bool(self.summary.get("simulated"))

    @property
    def host_kind(self) -> str:
        host = ((self.summary.get("provenance") or {}).get("host") or {})
        return str(host.get("kind") or host.get("machine") or "unknown")

    @property
    def identity(self) -> dict[str, Any]:
        """What was served: the identity a head-to-head puts side by side."""
        profile = self.summary.get("profile") or {}
        dep = profile.get("deployment") or {}
        target = self.summary.get("target") or {}
        return {"profile": profile.get("name"), "model": dep.get("model"), "revision": dep.get("revision"),
                "served_name": dep.get("served_name"), "quantization": dep.get("quantization"),
                "kv_cache_dtype": dep.get("kv_cache_dtype"), "engine_version": target.get("engine_version"),
                "mode": target.get("mode"), "launch_command": target.get("launch_command"),
                "simulated": self.simulated}


@dataclass
class ArmBoots:
    name: str  # "A", "B", "reference"
    boots: list[Boot] = field(default_factory=list)
    warm_up: list[Boot] = field(default_factory=list)  # read and verified, never a sample (cold caches)

    @property
    def finished(self) -> list[Boot]:
        return [b for b in self.boots if b.finished]


def read_boot(path: str | Path) -> Boot:
    """A bundle folder (or its ``summary.json``) as one boot; :class:`CompareUsageError` when it is none."""
    p = Path(path)
    summary_path = p / SUMMARY if p.is_dir() else p
    label = f"bundle {p}"
    if not summary_path.is_file():
        raise CompareUsageError(f"{label}: no {SUMMARY} (name a run's evidence folder)")
    try:
        earlier = read_earlier(summary_path, label, SCHEMA_ID)
        verify_bundle(earlier, label)
        verify_statement(earlier, label)
        validate(earlier.data)
    except EarlierRunError as exc:
        raise CompareUsageError(str(exc)) from None
    except SummaryError as exc:
        raise CompareUsageError(f"{label}: {exc}") from None
    return Boot(summary_path.parent, earlier.data)


def check_comparable(arms: Sequence[ArmBoots], *, allow_mixed_hosts: bool = False) -> dict[str, Any]:
    """The workload every boot of every arm measured, or :class:`CompareUsageError` naming what
    differs: the workload, SIMULATED beside real, the kind of host."""
    boots = [(arm.name, b) for arm in arms for b in arm.warm_up + arm.boots]
    if not boots:
        raise CompareUsageError("no bundles to compare")
    seen: dict[str, str] = {}
    for name, b in boots:
        # A boot is one sample: the same bundle (or a copy of it: the same run id) twice would count one
        # server boot as several and shrink the spread it is judged by.
        for key in (f"folder {b.path.resolve()}", f"run id {b.run_id}"):
            if key in seen:
                raise CompareUsageError(f"{name} {b.path} is the same boot as {seen[key]} ({key}): each bundle "
                                        "is one server boot and may be named once")
            seen[key] = f"{name} {b.path}"
    simulated = {b.simulated for _, b in boots}
    if len(simulated) > 1:
        sims = ", ".join(f"{name} {b.path.name}" for name, b in boots if b.simulated)
        raise CompareUsageError(f"SIMULATED and real runs cannot be compared (SIMULATED: {sims}): the reference "
                                "server measures no deployment")
    first_name, first = boots[0]
    base = of_summary(first.summary)
    for name, boot in boots[1:]:
        diff = differences(base, of_summary(boot.summary), a_name=f"{first_name} {first.path.name}",
                           b_name=f"{name} {boot.path.name}")
        if diff:
            raise CompareUsageError("the bundles measured different workloads: " + "; ".join(diff))
    kinds = {b.host_kind for _, b in boots}
    if len(kinds) > 1 and not allow_mixed_hosts:
        per_arm = "; ".join(f"{arm.name}: " + ", ".join(sorted({b.host_kind for b in arm.boots})) for arm in arms)
        raise CompareUsageError(f"boots ran on different kinds of host ({per_arm}); boot-to-boot spread and the "
                                "difference would mix hardware with the deployment: compare like hosts, or pass "
                                "--allow-mixed-hosts")
    return base
