"""One timing-stage boot of the small profile against the reference server: the template the
comparison's end-to-end tests clone into boots."""

from __future__ import annotations

import json
from pathlib import Path

from ..helpers import run_pytest


def one_boot(folder: Path) -> dict:
    result = run_pytest("--qualify=small", "--qualify-endpoint", "reference", "--qualify-stage", "timing",
                        "--qualify-evidence", str(folder / "ev"), cwd=folder, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    (run_dir,) = [p for p in (folder / "ev").iterdir() if p.is_dir()]
    return json.loads((run_dir / "summary.json").read_text())
