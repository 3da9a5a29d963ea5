"""An A/B campaign: interleaved boots of two profiles, each an ordinary pytest-qualify run of the
``timing`` stage with its own server start, warm-up and evidence bundle, then the comparison.

The order is A, B, B, A, A, B, … (pairs alternate which arm goes first): a drift of the machine
over the campaign (thermal, a neighbour's load, a cache warming) falls on both arms alike instead of
on whichever ran last. Each boot is ``python -m pytest --qualify=PROFILE --qualify-stage timing`` in
a subprocess: the answers are still graded, so a fast wrong B fails its items (regressions), and a
boot that could not be judged makes the campaign INCOMPLETE. No pytest imported here.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pytest_qualify.compare.boots import CompareUsageError

STAGE = "timing"
BOOT_SEED_ENV = "QUALIFY_REFERENCE_BOOT_SEED"  # the reference server's seeded boot-to-boot jitter


def boot_order(boots: int) -> list[tuple[str, int]]:
    """(arm, boot number) in the campaign's order: A1, B1, B2, A2, A3, B3, …"""
    order: list[tuple[str, int]] = []
    for i in range(boots):
        pair = ("A", "B") if i % 2 == 0 else ("B", "A")
        order += [(arm, i + 1) for arm in pair]
    return order


@dataclass(frozen=True)
class ArmPlan:
    name: str  # "A" | "B"
    profile: str
    endpoint: str | None  # None: launch mode; "reference"; or an attached URL
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class BootRun:
    arm: str
    number: int
    folder: Path  # the evidence folder handed to the run
    exit_code: int
    wall_s: float
    last_line: str

    @property
    def bundle(self) -> Path | None:
        """The run's bundle folder (the one folder the run wrote under its evidence folder). Hidden
        folders are other tools' (pytest-benchmark writes ``.benchmarks`` into the working folder)."""
        found = [p for p in self.folder.iterdir() if p.is_dir() and not p.name.startswith(".")] \
            if self.folder.is_dir() else []
        return found[0] if len(found) == 1 else None


def boot_command(plan: ArmPlan, evidence: Path, *, repeat: int, extra: Sequence[str]) -> list[str]:
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", f"--qualify={plan.profile}",
           "--qualify-stage", STAGE, "--qualify-evidence", str(evidence), "--repeat", str(repeat)]
    if plan.endpoint:
        cmd += ["--qualify-endpoint", plan.endpoint]
    return cmd + list(extra)


def run_campaign(a: ArmPlan, b: ArmPlan, *, boots: int, out_dir: Path, repeat: int = 1, extra: Sequence[str] = (),
                 say: Callable[[str], None] = print) -> list[BootRun]:
    """Every boot in the campaign's order; stops at a boot's usage error (exit 4: the operator's
    mistake repeats in every boot), which it raises as :class:`CompareUsageError`."""
    plans = {"A": a, "B": b}
    runs: list[BootRun] = []
    order = boot_order(boots)
    for n, (arm, number) in enumerate(order, 1):
        plan = plans[arm]
        folder = out_dir / "boots" / f"{arm}{number}"
        folder.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
        env.update(plan.env)
        env.setdefault(BOOT_SEED_ENV, f"{arm}{number}")
        say(f"boot {n}/{len(order)}: arm {arm} #{number} ({plan.profile}"
            + (f", endpoint {plan.endpoint}" if plan.endpoint else ", launch mode") + ")")
        start = time.monotonic()
        proc = subprocess.run(boot_command(plan, folder, repeat=repeat, extra=extra), cwd=folder, env=env,
                              capture_output=True, text=True, check=False)
        lines = [line for line in (proc.stdout or "").splitlines() if line.strip()]
        if not lines:
            lines = [line for line in (proc.stderr or "").splitlines() if line.strip()]
        last = lines[-1] if lines else ""
        (folder / "pytest-output.txt").write_text((proc.stdout or "") + (proc.stderr or ""), encoding="utf-8")
        run = BootRun(arm, number, folder, proc.returncode, time.monotonic() - start, last)
        runs.append(run)
        say(f"  exit {proc.returncode} in {run.wall_s:.1f} s: {last}")
        if proc.returncode == 4:
            raise CompareUsageError(f"boot {arm}{number} ({plan.profile}): usage error: {last}")
    return runs
