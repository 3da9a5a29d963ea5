"""The README's test command sets up the report.html browser tests as CI does (``.ci/browser.sh``):
it installs Debian's chromium where it can, and where it cannot it says what to install and goes
on (the browser tests then skip, or fail with ``CI=true``)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from ..browser import CHROMIUM_NAMES, INSTALL_CHROMIUM

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / ".ci" / "browser.sh"


def readme_test_command() -> str:
    readme = (ROOT / "README.md").read_text()
    return readme.split("```bash\n", 1)[1].split("```", 1)[0].splitlines()[1]


def test_the_readme_test_command_sets_up_the_browser_before_the_tests():
    steps = readme_test_command().split(" && ")
    assert ".ci/browser.sh" in steps and steps.index(".ci/browser.sh") < steps.index('pytest -n 3 -m "not real_vllm"')
    assert os.access(SCRIPT, os.X_OK)


def test_the_script_installs_what_the_tests_name():
    script = SCRIPT.read_text()
    assert f"install=({INSTALL_CHROMIUM})" in script
    for name in CHROMIUM_NAMES:
        assert name in script


def _run(tmp_path: Path, tools: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The script with only ``tools`` on its PATH (small shell stubs), as an unprivileged user."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in {"id": "echo 1000", **tools}.items():
        stub = bin_dir / name
        stub.write_text(f"#!/bin/sh\n{body}\n")
        stub.chmod(0o755)
    return subprocess.run(["/bin/bash", str(SCRIPT)], env={"PATH": str(bin_dir)}, capture_output=True, text=True,
                          timeout=60)


def test_a_machine_that_has_chromium_is_left_alone(tmp_path):
    done = _run(tmp_path, {"chromium": "exit 0", "apt-get": f"echo ran >{tmp_path}/apt; exit 1"})
    assert done.returncode == 0 and done.stderr == ""
    assert not (tmp_path / "apt").exists()


def test_without_root_or_sudo_it_says_what_to_install_and_goes_on(tmp_path):
    done = _run(tmp_path, {"apt-get": f"echo ran >{tmp_path}/apt; exit 1"})
    assert done.returncode == 0, done.stderr
    assert f"install Debian's chromium (sudo {INSTALL_CHROMIUM})" in done.stderr
    assert "with CI=true they fail" in done.stderr
    assert not (tmp_path / "apt").exists()


def test_with_sudo_it_installs_debians_chromium(tmp_path):
    log = tmp_path / "sudo.log"
    done = _run(tmp_path, {"apt-get": "exit 1", "sudo": f'printf "%s\\n" "$*" >>{log}'})
    assert done.returncode == 0, done.stderr
    lines = log.read_text().splitlines()
    assert lines[-1] == f"-n env DEBIAN_FRONTEND=noninteractive {INSTALL_CHROMIUM}", lines
