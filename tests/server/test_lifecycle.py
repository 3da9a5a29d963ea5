"""Server lifecycle with a real child process (tests/fake_vllm.py standing in for vLLM): slow start
with progress, death during startup, identity mismatch, teardown of the whole process tree, one
server under xdist, and the loopback bind."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ..helpers import pytester_run, write_profile
from ..fake_vllm import HERE, event_pid, fake_command, pid_gone, read_events, wait_for
from pytest_qualify.server.lifecycle import (
    LaunchSpec,
    ServerProcess,
    StartupError,
    free_port,
    group_alive,
    pid_exit,
    root_cause,
)
from pytest_qualify.redaction import redact
from pytest_qualify.hooks.watch import STARTUP_LOG_SECTION
from pytest_qualify.hooks.collection import suites_dir

SMOKE = str(suites_dir() / "test_smoke.py")


def spec_for(tmp_path: Path, *switches: str, startup_timeout_s: float = 30.0, term_grace_s: float = 15.0,
             secrets: tuple[str, ...] = ()) -> LaunchSpec:
    port = free_port()
    argv = (sys.executable, str(HERE), "serve", "fake/model", *switches, "--host", "127.0.0.1", "--port", str(port))
    return LaunchSpec(argv=argv, host="127.0.0.1", port=port, log_path=tmp_path / "server.log",
                      startup_timeout_s=startup_timeout_s, term_grace_s=term_grace_s, secrets=secrets,
                      env={"FAKE_VLLM_EVENTS": str(tmp_path / "events")})


def launch(pytester: pytest.Pytester, tmp_path: Path, *switches: str, args: tuple[str, ...] = (),
           env: dict[str, str] | None = None) -> pytest.RunResult:
    """pytest in launch mode with the fake as the serve command, on the smoke module; ``env`` is
    added to the environment the subprocess inherits."""
    with pytest.MonkeyPatch.context() as mp:
        for key, value in (env or {}).items():
            mp.setenv(key, value)
        return pytester_run(pytester,
            f"--qualify={write_profile(tmp_path)}", "--qualify-serve-command", fake_command(*switches),
            "--qualify-evidence", str(tmp_path / "ev"), *args, SMOKE,
        )


# -- the engine (no pytest) ------------------------------------------------------------------------


def test_slow_start_reports_progress_with_the_newest_log_line(tmp_path):
    process = ServerProcess(spec_for(tmp_path, "--startup-s", "1.5"))
    lines: list[str] = []
    process.start()
    try:
        seconds = process.wait_ready(progress=lines.append, first_progress_s=0.5, progress_every_s=0.5)
    finally:
        process.stop()
    assert seconds >= 1.5
    assert lines, "no progress line during a 1.5 s start"
    assert all(re.search(r"waiting for http://127\.0\.0\.1:\d+/health: \d+ s elapsed; log: ", line) for line in lines), lines
    assert any("Loading safetensors checkpoint shards" in line for line in lines)


def test_exit_during_startup_fails_fast_with_code_command_and_log_tail(tmp_path):
    spec = spec_for(tmp_path, "--startup-s", "0.3", "--exit-during-startup", "7")
    process = ServerProcess(spec)
    t0 = time.monotonic()
    process.start()
    with pytest.raises(StartupError) as info:
        process.wait_ready()
    assert time.monotonic() - t0 < 10
    text = str(info.value)
    assert "exited during startup with exit code 7" in text
    assert f"command: {spec.display_command()}" in text
    assert "CUDA out of memory (simulated)" in text and "Loading safetensors" in text


def test_startup_timeout_stops_the_group(tmp_path):
    process = ServerProcess(spec_for(tmp_path, "--startup-s", "60", "--spawn-child", startup_timeout_s=1.0))
    process.start()
    with pytest.raises(StartupError, match="not ready after the startup timeout of 1 s"):
        process.wait_ready()
    assert not group_alive(process.pid)
    child = event_pid(tmp_path / "events", "child")
    assert child is not None and pid_gone(child)


def test_stop_kills_the_whole_tree_including_a_child_that_ignores_sigterm(tmp_path):
    process = ServerProcess(spec_for(tmp_path, "--spawn-child"))
    process.start()
    process.wait_ready()
    assert wait_for(lambda: event_pid(tmp_path / "events", "child") is not None, 10)
    child = event_pid(tmp_path / "events", "child")
    assert not pid_gone(child)
    process.stop()
    assert pid_gone(process.pid) and pid_gone(child)
    assert not group_alive(process.pid)


def test_a_leader_that_ignores_sigterm_is_killed_after_the_grace(tmp_path):
    process = ServerProcess(spec_for(tmp_path, "--ignore-sigterm", "60", term_grace_s=1.0))
    process.start()
    process.wait_ready()
    t0 = time.monotonic()
    process.stop()
    assert 0.9 <= time.monotonic() - t0 < 8
    assert "sigterm" in read_events(tmp_path / "events")
    assert process.exit_code == -signal.SIGKILL
    assert not group_alive(process.pid)


def test_begin_stop_signals_at_once_and_stop_waits_only_the_rest_of_the_grace(tmp_path):
    # The run's end tells the server to stop before the bundle is written; unconfigure's stop()
    # then waits what is left of the term grace, not a whole grace more.
    process = ServerProcess(spec_for(tmp_path, "--ignore-sigterm", "60", term_grace_s=2.0))
    process.start()
    process.wait_ready()
    t0 = time.monotonic()
    process.begin_stop()
    assert time.monotonic() - t0 < 0.5 and wait_for(lambda: "sigterm" in read_events(tmp_path / "events"), 10)
    process.begin_stop()  # once only: the grace counts from the first
    time.sleep(1.5)
    t1 = time.monotonic()
    process.stop()
    assert time.monotonic() - t1 < 1.5, "stop() waited a whole grace after begin_stop()"
    assert read_events(tmp_path / "events").count("sigterm") == 1
    assert process.exit_code == -signal.SIGKILL and not group_alive(process.pid)


def _interrupt_when(condition, timeout_s: float = 60.0):  # type: ignore[no-untyped-def]
    """KeyboardInterrupt in the main thread as soon as ``condition()`` holds, like a Ctrl-C, without
    signalling the test runner's own process group. Returns what restores the SIGALRM handler."""

    def handler(signum, frame):  # type: ignore[no-untyped-def]
        raise KeyboardInterrupt("simulated Ctrl-C")

    previous = signal.signal(signal.SIGALRM, handler)
    main = threading.main_thread().ident
    assert main is not None
    done = threading.Event()

    def watch() -> None:
        if wait_for(lambda: done.is_set() or condition(), timeout_s) and not done.is_set():
            signal.pthread_kill(main, signal.SIGALRM)

    threading.Thread(target=watch, daemon=True).start()

    def restore() -> None:
        done.set()
        signal.signal(signal.SIGALRM, previous)

    return restore


def test_ctrl_c_while_stopping_still_kills_the_group(tmp_path):
    process = ServerProcess(spec_for(tmp_path, "--ignore-sigterm", "60", "--spawn-child", term_grace_s=30.0))
    process.start()
    process.wait_ready()
    # The second Ctrl-C comes once the server has its SIGTERM (and ignores it).
    restore = _interrupt_when(lambda: "sigterm" in read_events(tmp_path / "events"))
    t0 = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            process.stop()
    finally:
        restore()
    assert time.monotonic() - t0 < 8, "the second interrupt did not cut the 30 s grace short"
    assert not group_alive(process.pid)
    child = event_pid(tmp_path / "events", "child")
    assert child is not None and pid_gone(child)


def test_ctrl_c_during_startup_leaves_nothing_running(tmp_path):
    from pytest_qualify.profiles import load_profile
    from pytest_qualify.settings import resolve
    from pytest_qualify.server.target import start_target

    profile = load_profile(str(write_profile(tmp_path)))
    settings = resolve({"qualify_serve_command": fake_command("--startup-s", "60", "--spawn-child")}, {}, lambda k: None)
    events = tmp_path / "events"
    os.environ["FAKE_VLLM_EVENTS"] = str(events)
    # Ctrl-C once the server and its engine-like child are up, during the 60 s startup.
    restore = _interrupt_when(lambda: event_pid(events, "child") is not None)
    try:
        with pytest.raises(KeyboardInterrupt):
            start_target(profile, settings, tmp_path, None)
    finally:
        restore()
        os.environ.pop("FAKE_VLLM_EVENTS", None)
    leader, child = event_pid(events, "leader"), event_pid(events, "child")
    assert leader is not None and child is not None
    assert pid_gone(leader) and pid_gone(child) and not group_alive(leader)


def test_exit_code_of_a_process_we_did_not_start_is_read_from_its_zombie():
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(5)"])
    try:
        assert wait_for(lambda: pid_exit(proc.pid)[0], 10)
        assert pid_exit(proc.pid) == (True, 5)  # not reaped yet: the status is still there
    finally:
        proc.wait()
    assert pid_exit(proc.pid) == (True, None)


def test_display_command_redacts_secrets(tmp_path):
    spec = spec_for(tmp_path, "--api-key", "sk-test-123456", secrets=("sk-test-123456",))
    assert "sk-test-123456" not in spec.display_command()
    assert redact("key sk-test-123456 end", ("sk-test-123456",)) == "key *** end"


# -- launch mode end to end --------------------------------------------------------------------------


def test_launch_mode_slow_start_shows_progress_and_passes(pytester, tmp_path):
    events = tmp_path / "events"
    result = launch(pytester, tmp_path, "--startup-s", "3", "--spawn-child", env={"FAKE_VLLM_EVENTS": str(events)})
    out = result.stdout.str()
    assert result.ret == 0, out
    assert "qualify: launching: " in out and "fake_vllm.py serve pytest-qualify/small-chat" in out
    progress = [line for line in out.splitlines() if "qualify: waiting for http://127.0.0.1:" in line]
    assert progress and "Loading safetensors checkpoint shards" in progress[0]
    assert "QUALIFICATION: PASS" in out
    # Teardown left nothing behind: leader, its process group, and the engine-like grandchild.
    leader, child = event_pid(events, "leader"), event_pid(events, "child")
    assert leader is not None and child is not None
    assert pid_gone(leader) and pid_gone(child) and not group_alive(leader)


def test_launch_mode_exit_during_startup_fails_in_seconds_with_the_log_tail(pytester, tmp_path):
    t0 = time.monotonic()
    result = launch(pytester, tmp_path, "--startup-s", "0.5", "--exit-during-startup", "7")
    elapsed = time.monotonic() - t0
    out = result.stdout.str()
    assert result.ret == pytest.ExitCode.INTERRUPTED  # verdict INCOMPLETE: nothing was judged
    assert elapsed < 60  # the profile's startup timeout is 600 s: this must not wait for it
    assert "server exited during startup with exit code 7" in out
    assert "command: " in out and "fake_vllm.py serve pytest-qualify/small-chat" in out
    assert "--served-model-name small-chat-4k --max-model-len 4096" in out
    result.assert_outcomes(errors=6)  # 5 items and the gate's test case for the failed start (not judged)
    assert "ERROR" in out and "qualify.gate::server_startup_failed" in out
    assert "QUALIFICATION: INCOMPLETE" in out and "server startup failed" in out
    # Each error keeps the one-line reason and the command in its message; the log's tail is a
    # section of the report after it, not part of the message.
    error = out[out.index("ERROR at setup of test_health"):]
    error = error[:error.index("ERROR at setup of", 30)]
    message, title, tail = error.partition(STARTUP_LOG_SECTION)
    assert title, error
    assert "server exited during startup with exit code 7" in message and "command: " in message
    # The one-line reason names the engine's own exception; the rest of the log stays in the section.
    assert ("server exited during startup with exit code 7 after" in message
            and ": torch.OutOfMemoryError: CUDA out of memory (simulated)\n" in message), message
    assert "Loading safetensors" not in message
    assert "CUDA out of memory (simulated)" in tail
    assert "INCOMPLETE" in out and "torch.OutOfMemoryError: CUDA out of memory (simulated)" in out.split("QUALIFICATION: INCOMPLETE")[-1]


def test_launch_mode_identity_mismatch_names_both_values(pytester, tmp_path):
    result = launch(pytester, tmp_path, "--report-root", "other-org/other-model", "--report-max-model-len", "2048")
    out = result.stdout.str()
    # The identity item and the gate's test case for the first step's stop.
    result.assert_outcomes(passed=4, failed=2)
    assert "qualify.gate::the_served_identity_is_not_the" in out
    assert "root is 'other-org/other-model', expected 'pytest-qualify/small-chat'" in out
    assert "max_model_len is 2048, expected 4096" in out


def test_launch_mode_binds_loopback_unless_the_profile_says_otherwise(pytester, tmp_path):
    launches = tmp_path / "launches"
    result = launch(pytester, tmp_path, env={"FAKE_VLLM_LAUNCH_LOG": str(launches)})
    assert result.ret == 0
    assert "host=127.0.0.1" in launches.read_text()
    assert "--host 127.0.0.1 --port" in result.stdout.str()


def test_exactly_one_server_under_xdist(pytester, tmp_path):
    launches = tmp_path / "launches"
    result = launch(pytester, tmp_path, args=("-n", "2", "--repeat", "2"), env={"FAKE_VLLM_LAUNCH_LOG": str(launches)})
    assert result.ret == 0, result.stdout.str()
    result.assert_outcomes(passed=10)
    assert len(launches.read_text().splitlines()) == 1


DATA = Path(__file__).parent / "data"


def test_root_cause_is_the_engines_first_exception_past_its_wrappers():
    # vLLM 0.32.0 (CPU) asked for an fp8 KV cache on a CPU without AVX-512: the worker's exception,
    # then "Worker failed with error ..." and "Engine core initialization failed. See root cause above."
    log = (DATA / "vllm-0.32.0-cpu-fp8-kv-no-avx512.log").read_text()
    assert root_cause(log) == "NotImplementedError: FP8 KV cache on CPU requires x86 with AVX-512 or AMX."
    assert root_cause("ERROR [fake-vllm] torch.OutOfMemoryError: CUDA out of memory (simulated)") == (
        "torch.OutOfMemoryError: CUDA out of memory (simulated)")
    assert root_cause("ValueError: Available memory on node 0 is less than desired") == (
        "ValueError: Available memory on node 0 is less than desired")


@pytest.mark.parametrize("log", [
    "",
    (DATA / "vllm-0.32.0-cpu-tiny-llama.log").read_text(),  # a clean start
    # Only the wrappers: they point at a cause the log does not hold.
    "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
    "RuntimeError: Worker failed with error 'x', please check the stack trace above for the root cause",
    # "error" in prose, not an exception line.
    "WARNING 12-06 [system_utils.py:255] Found ulimit of 20000 and failed to automatically increase with error "
    "current limit exceeds maximum limit.",
    "INFO the error: rate is 0",
    "    raise NotImplementedError(",
])
def test_no_root_cause_where_the_log_names_no_exception(log: str):
    assert root_cause(log) is None
