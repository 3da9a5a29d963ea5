"""One timing-stage boot of the small profile against the reference server: the template the
comparison's tests clone into boots, each sealed as a run seals its bundle (``SHA256SUMS`` and the
in-toto statement over the files and the summary), so ``compare`` verifies it as it verifies a real one."""

from __future__ import annotations

import copy
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_qualify.bundle_format.schema import validate

from ..helpers import run_pytest


@dataclass(frozen=True)
class Template:
    folder: Path  # the real bundle
    summary: dict[str, Any]


def one_boot(folder: Path) -> Template:
    result = run_pytest("--qualify=small", "--qualify-endpoint", "reference", "--qualify-stage", "timing",
                        "--qualify-evidence", str(folder / "ev"), cwd=folder, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    (run_dir,) = [p for p in (folder / "ev").iterdir() if p.is_dir()]
    return Template(run_dir, json.loads((run_dir / "summary.json").read_text()))


def seal(folder: Path, summary: dict[str, Any]) -> Path:
    """``summary.json`` written into the bundle, then the statement and ``SHA256SUMS`` redone over it."""
    from pytest_qualify.evidence.bundle import write_manifest
    from pytest_qualify.evidence.provenance import write_statement

    (folder / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    (folder / "SHA256SUMS").unlink(missing_ok=True)
    write_statement(folder, summary, [])
    write_manifest(folder)
    return folder


def speed(summary: dict[str, Any], factor: float) -> dict[str, Any]:
    """The summary of a boot ``factor`` times as fast: rates times it, times divided by it."""
    s = copy.deepcopy(summary)
    for lane in s["timing"]["lanes"]:
        for key in ("ttft_s", "e2e_s"):
            lane[key]["median"] /= factor
        lane["prefill_tok_s"]["median"] *= factor
    for level in s["timing"]["load"]["levels"]:
        for key in ("ttft_s_p50", "tpot_s_p50", "itl_s_p50", "itl_token_s_p50", "engine_tpot_s_mean"):
            if level.get(key) is not None:
                level[key] /= factor
        for key in ("output_tok_s", "requests_per_s"):
            level[key] *= factor
    return s


def clone(template: Template, folder: Path, summary: dict[str, Any]) -> Path:
    """A sealed bundle at ``folder``: the template's files with ``summary`` in place of its summary."""
    validate(summary)
    shutil.copytree(template.folder, folder)
    return seal(folder, summary)
