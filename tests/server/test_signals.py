"""Ctrl-C (SIGINT), SIGTERM and SIGHUP to pytest during startup, during a test and during teardown leave no
server process: checked by pid and by process group, with real children (the fake vLLM with an
engine-like grandchild that ignores SIGTERM, and the reference server)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from ..helpers import start_pytest, write_profile

pytestmark = pytest.mark.e2e
from ..fake_vllm import event_pid, fake_command, pid_gone, read_events, wait_for
from pytest_qualify.server.lifecycle import group_alive
from pytest_qualify.hooks.collection import suites_dir

SMOKE = str(suites_dir() / "test_smoke.py")
# The tests wait on events (a line in pytest's output, a line from the fake, the process's exit),
# never on a time: this only ends a run that would otherwise hang. That pytest honoured the signal
# is its exit status (INTERRUPTED; a run that ignored it would go on and end otherwise), not how
# soon it exited: a loaded machine may take long over the evidence.
HANG_GUARD_S = 300.0


class PytestRun:
    """pytest in its own session (so only the signals we send reach it), output to a file."""

    def __init__(self, tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.out_path = tmp_path / "pytest-output.txt"
        self.events = tmp_path / "events"
        full_env = {"PYTHONUNBUFFERED": "1", "FAKE_VLLM_EVENTS": str(self.events), **(env or {})}
        with open(self.out_path, "wb") as out:
            self.proc = start_pytest(
                "-v", "--qualify-evidence", str(tmp_path / "ev"), *args, SMOKE,
                cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT, env=full_env,
                start_new_session=True, preexec_fn=_default_signal_handling,
            )

    def output(self) -> str:
        return self.out_path.read_text(errors="replace")

    def send(self, sig: int) -> None:
        os.kill(self.proc.pid, sig)

    def wait_exit(self) -> int:
        try:
            return self.proc.wait(timeout=HANG_GUARD_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            pytest.fail(f"pytest did not exit within {HANG_GUARD_S:g} s of the signal:\n{self.output()}")

    def wait_exit_after(self, timeout_s: float) -> int:
        """The exit status of a run left to end on its own."""
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            pytest.fail(f"pytest did not end within {timeout_s:g} s:\n{self.output()}")

    def wait_for_output(self, pattern: str, timeout_s: float = HANG_GUARD_S) -> re.Match[str]:
        assert wait_for(lambda: re.search(pattern, self.output()) is not None, timeout_s), (
            f"never saw {pattern!r} in:\n{self.output()}")
        match = re.search(pattern, self.output())
        assert match is not None
        return match

    def wait_for_event(self, event: str, timeout_s: float = HANG_GUARD_S) -> None:
        assert wait_for(lambda: any(line.startswith(event) for line in read_events(self.events)), timeout_s), (
            f"the fake never reported {event!r}; events {read_events(self.events)}; output:\n{self.output()}")

    def kill_leftovers(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def _default_signal_handling() -> None:
    # A parent shell may start us with SIGINT ignored (background jobs): then Python would never
    # raise KeyboardInterrupt. The child gets the defaults a terminal user has.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


@pytest.fixture
def run_pytest(tmp_path):  # type: ignore[no-untyped-def]
    runs: list[PytestRun] = []

    def start(*args: str, env: dict[str, str] | None = None) -> PytestRun:
        run = PytestRun(tmp_path, *args, env=env)
        runs.append(run)
        return run

    yield start
    for run in runs:
        run.kill_leftovers()


def launch_args(tmp_path: Path, *switches: str) -> tuple[str, ...]:
    return (f"--qualify={write_profile(tmp_path)}", "--qualify-serve-command", fake_command(*switches))


def assert_fake_tree_gone(run: PytestRun) -> None:
    leader, child = event_pid(run.events, "leader"), event_pid(run.events, "child")
    assert leader is not None and child is not None, read_events(run.events)
    assert pid_gone(leader), f"server leader {leader} still running"
    assert pid_gone(child), f"engine-like grandchild {child} still running"
    assert not group_alive(leader), f"process group {leader} still has members"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_during_startup(run_pytest, tmp_path, sig):
    run = run_pytest(*launch_args(tmp_path, "--startup-s", "120", "--spawn-child"))
    run.wait_for_event("child")
    run.send(sig)
    code = run.wait_exit()
    assert code == pytest.ExitCode.INTERRUPTED, run.output()
    assert_fake_tree_gone(run)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=["SIGINT", "SIGTERM", "SIGHUP"])
def test_signal_during_a_test_launch_mode(run_pytest, tmp_path, sig):
    run = run_pytest(*launch_args(tmp_path, "--spawn-child", "--fault", "slow=120"))
    run.wait_for_event("chat")  # a short-answer test is waiting for its answer
    run.send(sig)
    code = run.wait_exit()
    assert code == pytest.ExitCode.INTERRUPTED, run.output()
    assert "test_short_answer" in run.output()
    assert_fake_tree_gone(run)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_during_a_test_reference_server(run_pytest, tmp_path, sig):
    run = run_pytest(f"--qualify={write_profile(tmp_path)}", "--qualify-endpoint", "reference",
                     "--qualify-reference-fault", "slow=120")
    pid = int(run.wait_for_output(r"server ready at \S+ after [\d.]+ s \(pid (\d+)\)").group(1))
    # The three quick smoke tests passed; the short answer now waits on the slow server.
    run.wait_for_output(r"test_engine_version\[rep1of1\] PASSED")
    run.wait_for_output(r"test_short_answer\[rep1of1-q1\]")  # -v names a test when it starts
    assert not pid_gone(pid)
    run.send(sig)
    code = run.wait_exit()
    assert code == pytest.ExitCode.INTERRUPTED, run.output()
    assert pid_gone(pid) and not group_alive(pid)


def test_signal_during_teardown(run_pytest, tmp_path):
    # The server ignores SIGTERM for 60 s; Ctrl-C while teardown waits for it ends the wait.
    run = run_pytest(*launch_args(tmp_path, "--spawn-child", "--ignore-sigterm", "60"))
    run.wait_for_event("sigterm")
    # The server is told to stop as the bundle is begun; teardown waits for it once the bundle is written.
    assert wait_for(lambda: any((tmp_path / "ev").glob("*/report.html")), 30.0), run.output()
    time.sleep(0.5)
    t0 = time.monotonic()
    run.send(signal.SIGINT)
    run.wait_exit()
    assert time.monotonic() - t0 < 10, "teardown waited out the 15 s grace despite Ctrl-C"
    assert "5 passed" in run.output()
    assert_fake_tree_gone(run)


def test_second_ctrl_c_still_cleans_up(run_pytest, tmp_path):
    run = run_pytest(*launch_args(tmp_path, "--spawn-child", "--ignore-sigterm", "60", "--fault", "slow=120"))
    run.wait_for_event("chat")
    run.send(signal.SIGINT)  # first Ctrl-C: during a test
    run.wait_for_event("sigterm")  # teardown asked the server to stop; it ignores that for 60 s
    t0 = time.monotonic()
    run.send(signal.SIGINT)  # second Ctrl-C: stop waiting, kill the group
    code = run.wait_exit()
    assert time.monotonic() - t0 < 10
    assert code == pytest.ExitCode.INTERRUPTED, run.output()
    assert_fake_tree_gone(run)


def test_sigint_during_a_test_under_xdist(run_pytest, tmp_path):
    run = run_pytest(*launch_args(tmp_path, "--spawn-child", "--fault", "slow=120"), "-n", "2")
    run.wait_for_event("chat")
    run.send(signal.SIGINT)
    code = run.wait_exit()
    assert code == pytest.ExitCode.INTERRUPTED, run.output()
    assert_fake_tree_gone(run)


# -- a tensor-parallel launch: workers forked the way vLLM's multiprocessing executor forks them --------

TP_WORKERS = 2
TREE_GONE_S = 40.0  # the guard's polite wait (the profile's term grace), then SIGKILL of the group


def tp_tree(run: PytestRun) -> list[int]:
    """The leader, the engine process and every worker, once all have reported."""
    assert wait_for(lambda: sum(line.startswith("worker ") for line in read_events(run.events)) == TP_WORKERS, 60), (
        f"the fake's workers never all started; events {read_events(run.events)}; output:\n{run.output()}")
    events = read_events(run.events)
    pids = [int(line.split()[1]) for line in events if line.split()[0] in ("leader", "engine", "worker")]
    assert len(pids) == 2 + TP_WORKERS, events
    assert all(not pid_gone(pid) for pid in pids), events
    return pids


def assert_tp_tree_gone(run: PytestRun, pids: list[int], within_s: float) -> None:
    leader = pids[0]
    gone = wait_for(lambda: all(pid_gone(pid) for pid in pids) and not group_alive(leader), within_s, poll_s=0.2)
    left = [pid for pid in pids if not pid_gone(pid)]
    assert gone, f"still running {within_s:g} s later: {left} of {pids} (events {read_events(run.events)})"


def test_tensor_parallel_workers_are_gone_after_teardown(run_pytest, tmp_path):
    run = run_pytest(*launch_args(tmp_path, "--workers", str(TP_WORKERS)))
    pids = tp_tree(run)
    code = run.wait_exit_after(120.0)
    assert code in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED), run.output()
    assert_tp_tree_gone(run, pids, 5.0)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["SIGINT", "SIGKILL"])
def test_tensor_parallel_workers_are_gone_after_a_signal_to_pytest(run_pytest, tmp_path, sig):
    # Workers that ignore SIGINT and SIGTERM and never look at their parent, a leader that dies on
    # SIGTERM without them: after SIGINT the plugin's teardown kills the group; after SIGKILL of
    # pytest (no teardown at all) the guard does, once pytest's end closes its pipe.
    run = run_pytest(*launch_args(tmp_path, "--workers", str(TP_WORKERS), "--fault", "slow=120"))
    pids = tp_tree(run)
    run.wait_for_event("chat")  # a short-answer test is waiting for its answer
    run.send(sig)
    code = run.wait_exit()
    if sig == signal.SIGINT:
        assert code == pytest.ExitCode.INTERRUPTED, run.output()
        assert_tp_tree_gone(run, pids, 5.0)
    else:
        assert code == -signal.SIGKILL
        assert_tp_tree_gone(run, pids, TREE_GONE_S)
