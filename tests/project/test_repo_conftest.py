"""The top-level ``conftest.py`` is repository wiring only. A qualification run from a checkout loads
it, so it must change nothing in an operator's run: the main job (``pytest --qualify=262k --repeat 3
--qualify-endpoint reference``) run from a checkout with it and from one without it writes the same
summary (everything but the measurements: timings, ports, run id and times)."""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from ..helpers import start_pytest

ROOT = Path(__file__).resolve().parents[2]
MAIN_JOB = ("--qualify=262k", "--repeat", "3", "--qualify-endpoint", "reference")


def test_it_defines_only_collect_ignore():
    tree = ast.parse((ROOT / "conftest.py").read_text())
    names = [t.id for node in tree.body if isinstance(node, ast.Assign) for t in node.targets if isinstance(t, ast.Name)]
    others = [type(node).__name__ for node in tree.body
              if not isinstance(node, ast.Assign) and not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))]
    assert names == ["collect_ignore"] and others == [], (names, others)
    namespace: dict[str, Any] = {}
    exec(compile(tree, "conftest.py", "exec"), namespace)
    assert sorted(namespace["collect_ignore"]) == [".ci", "bench", "docs", "media"]


def decided(summary: dict[str, Any]) -> dict[str, Any]:
    """What a run decided and on what, without what it measured."""
    items = [{k: v for k, v in i.items() if k not in ("duration_s", "properties")} | {"properties": sorted(i["properties"])}
             for i in summary["items"]]
    target = {k: v for k, v in summary["target"].items() if k not in ("base_url", "launch_command")}
    rest = {k: v for k, v in summary.items()
            if k not in ("run", "timing", "server_metrics", "items", "target", "serving_facts", "claims")}
    claims = [(c["name"], c["status"]) for c in summary.get("claims") or []]  # held or not; the figures vary
    return {"keys": sorted(summary), "items": items, "target": target, "claims": claims, **rest}


@pytest.mark.e2e
def test_the_main_job_writes_the_same_summary_with_and_without_it(tmp_path):
    runs = {}
    for name in ("with", "without"):
        checkout = tmp_path / name
        checkout.mkdir()
        shutil.copy(ROOT / "pyproject.toml", checkout)
        if name == "with":
            shutil.copy(ROOT / "conftest.py", checkout)
        runs[name] = start_pytest(*MAIN_JOB, "--qualify-evidence", str(checkout / "ev"), "--trace-config",
                                  cwd=checkout, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = {name: proc.communicate(timeout=900)[0] for name, proc in runs.items()}
    assert [runs[n].returncode for n in ("with", "without")] == [0, 0], {n: o[-2000:] for n, o in out.items()}
    assert f"from '{tmp_path / 'with' / 'conftest.py'}'" in out["with"]  # it was loaded
    assert f"from '{tmp_path / 'without'}" not in out["without"]
    summaries = {}
    for name in runs:
        (run,) = [p for p in (tmp_path / name / "ev").iterdir() if p.is_dir()]
        summaries[name] = decided(json.loads((run / "summary.json").read_text()))
    assert summaries["with"]["verdict"]["result"] == "PASS"
    assert summaries["with"] == summaries["without"]
    assert [o.strip().splitlines()[-1].split(" · ")[0] for o in out.values()] == ["QUALIFICATION: PASS (exit 0)"] * 2
