"""The package as a user gets it: the wheel built from this checkout, installed in a fresh venv (the
pinned versions of its dependencies), runs the main job on the reference server from a folder that
is not the checkout, and passes. What pyproject.toml lists by hand (packages, package data: the
suites, fixtures, media, profiles, schemas) is proved shipped by the run, not by a list."""

from __future__ import annotations

import json
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from ..helpers import ROOT, run_pytest

pytestmark = pytest.mark.e2e


def test_the_installed_wheel_runs_the_main_job(tmp_path):
    wheels = tmp_path / "wheels"
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(ROOT)],
                           capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    (wheel,) = wheels.glob("pytest_qualify-*.whl")

    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    installed = subprocess.run([str(python), "-m", "pip", "install", "-q", "-c", str(ROOT / ".ci" / "constraints.txt"),
                                str(wheel)], capture_output=True, text=True, timeout=900)
    assert installed.returncode == 0, installed.stdout[-2000:] + installed.stderr[-2000:]

    user = tmp_path / "user"
    user.mkdir()
    where = subprocess.run([str(python), "-c", "import pytest_qualify; print(pytest_qualify.__file__)"], cwd=user,
                           capture_output=True, text=True, check=True).stdout.strip()
    assert Path(where).is_relative_to(env_dir) and not Path(where).is_relative_to(ROOT), where

    run = run_pytest("--qualify=262k", "--repeat", "1", "--qualify-endpoint", "reference",
                     "--qualify-evidence", "ev", cwd=user, python=python, timeout=900)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-3000:]
    assert out.strip().splitlines()[-1].startswith("QUALIFICATION: PASS (exit 0)"), out[-1000:]
    (bundle,) = [p for p in (user / "ev").iterdir() if p.is_dir()]
    summary = json.loads((bundle / "summary.json").read_text())
    assert summary["verdict"]["result"] == "PASS" and summary["profile"]["name"] == "262k", summary["verdict"]
