"""One real vLLM at a time, whatever the scheduler does: the launch lock of ``tests/real_vllm.py``
makes a second launch wait for the first, the launch log records both, and the overlap check the
end of the session runs (tests/conftest.py) accepts serial launches and rejects overlapping ones."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from .. import real_vllm
from ..helpers import pytester_run, run_pytest

HOLD_S = 1.0
# A child that takes a launch slot, holds it HOLD_S, and releases it (writing its log line).
CHILD = f"""
import sys, time
sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})
from tests import real_vllm
slot = real_vllm.LaunchSlot.acquire(sys.argv[1])
time.sleep({HOLD_S})
slot.release()
"""


def launch(label: str, start_s: float, end_s: float) -> dict:
    return {"label": label, "start_s": start_s, "end_s": end_s}


def test_serial_launches_do_not_overlap():
    assert real_vllm.overlapping([launch("b", 10, 20), launch("a", 0, 10), launch("c", 20.5, 30)]) == []


@pytest.mark.parametrize("launches", [
    [launch("a", 0, 10), launch("b", 9.9, 20)],  # the second started before the first ended
    [launch("a", 0, 100), launch("b", 10, 20), launch("c", 30, 40)],  # one long launch spans two
])
def test_overlapping_launches_are_found(launches):
    bad = real_vllm.overlapping(launches)
    assert bad and all(b["start_s"] < a["end_s"] for a, b in bad)
    assert ("a", launches[1]["label"]) in [(a["label"], b["label"]) for a, b in bad]


def test_two_processes_launch_one_after_the_other(tmp_path, monkeypatch):
    monkeypatch.setenv(real_vllm.LOCK_ENV, str(tmp_path / "launch.lock"))
    monkeypatch.setenv(real_vllm.SESSION_ENV, "guard-test")
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, f"child-{n}"]) for n in (1, 2)]
    assert [p.wait(timeout=30) for p in procs] == [0, 0]
    launches = real_vllm.read_launches("guard-test")
    assert sorted(f["label"] for f in launches) == ["child-1", "child-2"]
    assert real_vllm.overlapping(launches) == [], launches
    first, second = sorted(launches, key=lambda f: f["start_s"])
    assert second["start_s"] >= first["end_s"] and second["waited_s"] > HOLD_S / 2, launches
    assert json.loads((tmp_path / "launch.log").read_text().splitlines()[0])["session"] == "guard-test"


# -- the README's test command ------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[2]


def readme_test_command() -> str:
    """The README's second command, which .ci/run runs exactly."""
    readme = (ROOT / "README.md").read_text()
    commands = [line for line in readme.split("```bash\n", 1)[1].split("```", 1)[0].splitlines() if line.strip()]
    assert len(commands) == 2 and commands[1].startswith("pip install -c .ci/constraints.txt -e '.[test]'"), commands
    assert commands[1] in (ROOT / ".ci" / "run").read_text().splitlines()
    return commands[1]


def test_real_vllm_tests_run_in_a_serial_step_of_their_own():
    steps = [s.strip() for s in readme_test_command().split("&&") if s.strip().startswith("pytest")]
    assert steps == ['pytest -n 3 -m "not real_vllm"', "pytest -p no:xdist -m real_vllm"], steps


@pytest.mark.e2e
@pytest.mark.parametrize("step", [0, 1])
def test_each_pytest_step_collects_tests(step):
    """pytest exits 5 when a step selects nothing; both steps must collect (and together, all)."""
    argv = shlex.split([s.strip() for s in readme_test_command().split("&&") if s.strip().startswith("pytest")][step])
    argv = [a for a in argv[1:] if a not in ("-n", "3")] + ["--collect-only", "-q"]
    done = run_pytest(*argv, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    match = re.search(r"(\d+)/\d+ tests collected", done.stdout)
    assert match and int(match.group(1)) > 0, done.stdout[-500:]


# -- the end-of-session check, in a session of its own ------------------------------------------------

SESSION_TESTS = f"""
import json, os, sys, time
sys.path.insert(0, {str(ROOT)!r})
from tests import real_vllm

def launch(label):
    slot = real_vllm.LaunchSlot.acquire(label)
    time.sleep(0.5)
    slot.release()

def test_first():
    launch("first")

def test_second():
    launch("second")

def test_overlap():
    if os.environ.get("GUARD_FAKE_OVERLAP"):
        # Two launches that ran at once, as an unguarded launcher would leave them in the log.
        with open(real_vllm.launch_log_path(), "a") as log:
            for label in ("x", "y"):
                log.write(json.dumps({{"label": label, "session": os.environ[real_vllm.SESSION_ENV],
                                      "start_s": 100.0, "end_s": 200.0}}) + "\\n")
"""


@pytest.mark.parametrize("overlap", [False, True])
def test_the_session_ends_with_the_launch_check(pytester, monkeypatch, overlap):
    """Under two xdist workers the launches are serial and the session says so; an overlap in the
    log fails the session, naming both launches."""
    monkeypatch.setenv(real_vllm.LOCK_ENV, str(pytester.path / "launch.lock"))
    monkeypatch.delenv(real_vllm.SESSION_ENV, raising=False)
    if overlap:
        monkeypatch.setenv("GUARD_FAKE_OVERLAP", "1")
    pytester.makeconftest(f"import sys\nsys.path.insert(0, {str(ROOT)!r})\n"
                          "from tests.conftest import pytest_configure, pytest_sessionfinish, pytest_terminal_summary\n")
    pytester.makepyfile(test_launches=SESSION_TESTS)
    result = pytester_run(pytester, "-n", "2")
    if overlap:
        assert result.ret == 1
        result.stdout.fnmatch_lines(["*real vLLM launches OVERLAPPED (1 pair(s)): x [[]100.0, 200.0] and y*"])
    else:
        assert result.ret == 0
        result.stdout.fnmatch_lines(["*real vLLM launches: 2, one at a time (none overlapped*"])
    result.assert_outcomes(passed=3)
