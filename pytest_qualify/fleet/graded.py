"""One replica's graded run: a qualification run of the stage (post-promotion by default) attached
to the replica through its :class:`~pytest_qualify.fleet.attribution.AttributionProxy`, in a
``python -m pytest`` subprocess, and what its bundle says."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_qualify.bundle_format.manifest import SUMMARY
from pytest_qualify.fleet.attribution import Tally

FAILURES_SHOWN = 3


@dataclass(frozen=True)
class GradedRun:
    """What the replica's run decided (its own exit status and summary), and what went through its proxy."""

    exit_code: int
    verdict: str  # PASS | FAIL | INCOMPLETE, or "not run"
    bundle: str | None
    items_graded: int
    items_failed: int
    reasons: tuple[str, ...] = ()
    last_line: str = ""
    wall_s: float = 0.0
    tally: Tally = field(default_factory=lambda: Tally(0, 0, {}))

    def as_dict(self) -> dict[str, Any]:
        return {"exit_code": self.exit_code, "verdict": self.verdict, "bundle": self.bundle,
                "items_graded": self.items_graded, "items_failed": self.items_failed, "reasons": list(self.reasons),
                "last_line": self.last_line, "wall_s": round(self.wall_s, 2), "answers": self.tally.as_dict()}


def command(profile: str, stage: str, endpoint: str, evidence: Path, *, api_key_env: str = "",
            promoted: str | None = None, extra: Sequence[str] = ()) -> list[str]:
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", f"--qualify={profile}",
           "--qualify-stage", stage, "--qualify-endpoint", endpoint, "--qualify-evidence", str(evidence)]
    if api_key_env:
        cmd += ["--qualify-api-key-env", api_key_env]
    if promoted:
        cmd += ["--qualify-promoted", promoted]
    return cmd + list(extra)


def read_bundle(evidence: Path) -> tuple[str | None, dict[str, Any] | None]:
    """The run's one bundle folder under ``evidence`` and its summary, when it wrote one."""
    found = sorted(p for p in evidence.iterdir() if p.is_dir() and (p / SUMMARY).is_file()) if evidence.is_dir() else []
    if not found:
        return None, None
    try:
        return str(found[-1]), json.loads((found[-1] / SUMMARY).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return str(found[-1]), None


def run_graded(cmd: Sequence[str], folder: Path, tally: Any) -> GradedRun:
    """Run ``cmd`` in ``folder`` (``tally()``: the proxy's count once it ends) and read its bundle."""
    folder.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_XDIST", "PYTEST_CURRENT_TEST"))}
    start = time.monotonic()
    proc = subprocess.run(list(cmd), cwd=folder, env=env, capture_output=True, text=True, check=False)
    wall = time.monotonic() - start
    (folder / "pytest-output.txt").write_text((proc.stdout or "") + (proc.stderr or ""), encoding="utf-8")
    lines = [line for line in (proc.stdout or "").splitlines() if line.strip()] or \
        [line for line in (proc.stderr or "").splitlines() if line.strip()]
    last = lines[-1] if lines else ""
    bundle, summary = read_bundle(folder / "evidence")
    if summary is None:
        return GradedRun(proc.returncode, "INCOMPLETE", bundle, 0, 0, (f"the run wrote no summary ({last})",),
                         last, wall, tally())
    items = [i for i in summary.get("items") or [] if isinstance(i, dict)]
    graded = [i for i in items if i.get("outcome") in ("passed", "failed")]
    failed = [i for i in graded if i.get("outcome") == "failed"]
    verdict = summary.get("verdict") or {}
    reasons = [str(r) for r in verdict.get("reasons") or []]
    if not reasons:
        reasons = [f"{i.get('item')} [{i.get('module')}]: {i.get('reason')}" for i in failed]
    return GradedRun(proc.returncode, str(verdict.get("result") or "INCOMPLETE"), bundle, len(graded), len(failed),
                     tuple(reasons[:FAILURES_SHOWN]), last, wall, tally())
