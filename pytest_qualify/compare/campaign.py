"""An A/B campaign: interleaved boots of two profiles, each an ordinary pytest-qualify run of the
``timing`` stage with its own server start, warm-up and evidence bundle, then the comparison.

The order is A, B, B, A, A, B, … (pairs alternate which arm goes first): a drift of the machine
over the campaign (thermal, a neighbour's load, a cache warming) falls on both arms alike instead of
on whichever ran last. Each boot is ``python -m pytest --qualify=PROFILE --qualify-stage timing`` in
a subprocess: the answers are still graded, so a fast wrong B fails its items (regressions), and a
boot that could not be judged makes the campaign INCOMPLETE.

Warm-up: before the samples, each arm boots ``warm_up`` times (default 1) on the machine, into
``boots/warm-up-A1`` …: a first boot fills the compile and model caches (on one H100 a cold first
boot's engine start-up was 207% off the others and read as ``B better``), so it is run, kept and
verified, and is never a sample. No pytest imported here.
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


Runner = Callable[[list[str], Path, dict[str, str]], tuple[int, str, str]]


def boot_order(boots: int, first: int = 1) -> list[tuple[str, int]]:
    """(arm, boot number) in the campaign's order: A1, B1, B2, A2, A3, B3, …; from pair ``first``
    on (boots added to a campaign continue its alternation)."""
    order: list[tuple[str, int]] = []
    for i in range(first - 1, boots):
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
    warm_up: bool = False

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


def run_subprocess(cmd: list[str], cwd: Path, env: dict[str, str]) -> tuple[int, str, str]:
    """One boot's pytest run: its exit status, stdout and stderr."""
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    return proc.returncode, proc.stdout or "", proc.stderr or ""


def warm_up_order(warm_up: int) -> list[tuple[str, int]]:
    """The warm-up boots, A then B, before any sample."""
    return [(arm, i + 1) for i in range(warm_up) for arm in ("A", "B")]


def run_campaign(a: ArmPlan, b: ArmPlan, *, boots: int, out_dir: Path, repeat: int = 1, extra: Sequence[str] = (),
                 say: Callable[[str], None] = print, warm_up: int = 0, first: int = 1,
                 runner: Runner = run_subprocess) -> list[BootRun]:
    """Every boot in the campaign's order: ``warm_up`` boots per arm first (never samples), then the
    pairs from ``first`` to ``boots``. Stops at a boot's usage error (exit 4: the operator's mistake
    repeats in every boot), which it raises as :class:`CompareUsageError`."""
    plans = {"A": a, "B": b}
    runs: list[BootRun] = []
    out_dir = out_dir.resolve()  # each boot runs in its own folder: a relative --out would land inside it
    order = [(arm, n, True) for arm, n in warm_up_order(warm_up)] + [(arm, n, False) for arm, n in boot_order(boots, first)]
    for k, (arm, number, warming) in enumerate(order, 1):
        plan = plans[arm]
        name = f"warm-up-{arm}{number}" if warming else f"{arm}{number}"
        folder = out_dir / "boots" / name
        folder.mkdir(parents=True, exist_ok=True)
        env = {key: v for key, v in os.environ.items() if not key.startswith("PYTEST_XDIST")}
        env.update(plan.env)
        env.setdefault(BOOT_SEED_ENV, name)
        say(f"boot {k}/{len(order)}: arm {arm} " + ("warm-up (not a sample)" if warming else f"#{number}")
            + f" ({plan.profile}" + (f", endpoint {plan.endpoint}" if plan.endpoint else ", launch mode") + ")")
        start = time.monotonic()
        code, stdout, stderr = runner(boot_command(plan, folder, repeat=repeat, extra=extra), folder, env)
        lines = [line for line in stdout.splitlines() if line.strip()] or \
            [line for line in stderr.splitlines() if line.strip()]
        last = lines[-1] if lines else ""
        (folder / "pytest-output.txt").write_text(stdout + stderr, encoding="utf-8")
        run = BootRun(arm, number, folder, code, time.monotonic() - start, last, warming)
        runs.append(run)
        say(f"  exit {code} in {run.wall_s:.1f} s: {last}")
        if code == 4:
            raise CompareUsageError(f"boot {name} ({plan.profile}): usage error: {last}")
    return runs
