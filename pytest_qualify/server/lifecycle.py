"""Server lifecycle: launch a server process, wait until it is ready, stop its whole process tree.

This module knows nothing of pytest (like pytest-xprocess's engine). The plugin describes a launch
with a :class:`LaunchSpec`; :class:`ServerProcess` runs it in its own process group with its output
in a log file, polls ``/health`` with progress reports, and fails fast — exit code, exact command and
log tail — when the process dies before it is ready.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pytest_qualify.redaction import redact

LOG_TAIL_LINES = 50
# Between a startup failure's reason (what, command, log path) and the log's tail.
LOG_TAIL_HEADER = f"--- last {LOG_TAIL_LINES} log lines ---\n"
PR_SET_PDEATHSIG = 1
# How long teardown waits for the killed group to disappear before reporting survivors.
KILL_WAIT_S = 5.0


class StartupError(RuntimeError):
    """The server did not become ready; the message carries the command, exit code and log tail."""


def split_startup_error(message: str) -> tuple[str, str]:
    """A startup failure's message as (the reason with command and log path, the log's tail);
    the tail is empty when the failure has none (an endpoint that could not be reached)."""
    reason, _, tail = message.partition(LOG_TAIL_HEADER)
    return reason.rstrip("\n"), tail


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def port_is_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
        return True


def tail(path: Path, lines: int = LOG_TAIL_LINES, secrets: Sequence[str] = ()) -> str:
    """The last ``lines`` lines of a log file (secrets redacted); empty when there is none."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 256 * 1024))
            data = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return redact("\n".join(data.splitlines()[-lines:]), secrets)


# An exception line in a server log, after vLLM's "(Worker pid=N) ERROR 12-06 10:50:49 [file.py:1063] " prefix.
_EXCEPTION_LINE = re.compile(r"(?:^|\] |^\S.*? )(?P<what>(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception): \S.*)$")
# vLLM's wrappers around the cause: each says "see above", and the cause is the line they wrap.
_WRAPPERS = ("Engine core initialization failed", "Worker failed with error", "Worker proc ", "See root cause above")


def root_cause(log_text: str) -> str | None:
    """The engine's own first exception line in a startup log ("NotImplementedError: FP8 KV cache on
    CPU requires x86 with AVX-512 or AMX."), its wrappers skipped; None when the log names none."""
    for line in log_text.splitlines():
        found = _EXCEPTION_LINE.search(line.rstrip())
        if found and not any(w in found["what"] for w in _WRAPPERS):
            return found["what"]
    return None


@dataclass(frozen=True)
class LaunchSpec:
    """How to start one server and how to tell that it is ready."""

    argv: tuple[str, ...]
    host: str
    port: int
    log_path: Path
    startup_timeout_s: float
    env: Mapping[str, str] = field(default_factory=dict)
    health_path: str = "/health"
    secrets: tuple[str, ...] = ()
    term_grace_s: float = 15.0

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def display_command(self) -> str:
        """The exact command, shell-quoted, with secrets redacted."""
        return redact(shlex.join(self.argv), self.secrets)


def _child_setup(parent_pid: int) -> Callable[[], None]:
    """What the child runs between fork and exec."""

    def setup() -> None:
        # Own process group (so teardown reaches every child) and SIGTERM when the launching
        # process dies, even by SIGKILL: a server must never outlive the run that owns it.
        os.setsid()
        try:
            libc = ctypes.CDLL("libc.so.6", use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        except OSError:
            return
        # The parent may have died between fork and prctl: then no signal would ever come.
        if os.getppid() != parent_pid:
            os._exit(1)

    return setup


# The guard: a process of its own session that outlives a pytest killed by SIGKILL. It reads a pipe
# only pytest can write to; at its end (pytest closed it, or died by any signal) it stops the
# server's process group as ``ServerProcess.stop`` does. The kernel's parent-death signal reaches the
# server's leader alone; a tree whose leader dies on SIGTERM without its workers (engine processes,
# tensor-parallel workers that ignore SIGTERM) would otherwise outlive the run.
_GUARD = """
import os, signal, sys, time
pgid, grace = int(sys.argv[1]), float(sys.argv[2])
for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(sig, signal.SIG_IGN)
sys.stdin.buffer.read()
def alive():
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
if alive():
    os.killpg(pgid, signal.SIGTERM)
    end = time.monotonic() + grace
    while alive() and time.monotonic() < end:
        time.sleep(0.1)
    if alive():
        os.killpg(pgid, signal.SIGKILL)
"""


class ServerProcess:
    """One launched server process group."""

    def __init__(self, spec: LaunchSpec) -> None:
        self.spec = spec
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_at: float | None = None
        self.ready_s: float | None = None
        self.guard: subprocess.Popen[bytes] | None = None
        self._guard_pipe: int | None = None
        self._term_sent_at: float | None = None  # when begin_stop() sent SIGTERM (monotonic)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    @property
    def exit_code(self) -> int | None:
        return self.proc.poll() if self.proc else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        return tail(self.spec.log_path, lines, self.spec.secrets)

    def start(self) -> None:
        spec = self.spec
        spec.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **spec.env}
        log = open(spec.log_path, "ab")
        try:
            self.proc = subprocess.Popen(
                list(spec.argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                preexec_fn=_child_setup(os.getpid()),
            )
        except OSError as exc:
            raise StartupError(
                f"could not launch the server: {exc.strerror or exc}\ncommand: {spec.display_command()}"
            ) from exc
        finally:
            log.close()
        self.started_at = time.monotonic()
        self._start_guard(self.proc.pid)
        # Safety net for an exit that skips the plugin's teardown (an error inside pytest itself).
        atexit.register(self.stop)

    def _start_guard(self, pgid: int) -> None:
        """The guard of this server's group (``_GUARD``); the pipe's write end stays in this process
        only (not inheritable, opened after the server started)."""
        read, write = os.pipe()
        try:
            self.guard = subprocess.Popen(
                [sys.executable, "-c", _GUARD, str(pgid), str(self.spec.term_grace_s)], stdin=read,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        except OSError:
            os.close(write)
            return
        finally:
            os.close(read)
        self._guard_pipe = write

    def _release_guard(self) -> None:
        """After the group is gone: the guard finds nothing to stop and exits."""
        if self._guard_pipe is not None:
            os.close(self._guard_pipe)
            self._guard_pipe = None
        if self.guard is not None:
            try:
                self.guard.wait(timeout=KILL_WAIT_S)
            except subprocess.TimeoutExpired:
                self.guard.kill()

    def _failure(self, what: str) -> StartupError:
        cause = root_cause(tail(self.spec.log_path, 2000, self.spec.secrets))
        if cause:
            what = f"{what}: {cause}"
        return StartupError(
            f"{what}\ncommand: {self.spec.display_command()}\n"
            f"log: {self.spec.log_path}\n{LOG_TAIL_HEADER}{self.log_tail()}"
        )

    def wait_ready(
        self,
        progress: Callable[[str], None] | None = None,
        progress_every_s: float = 10.0,
        poll_s: float = 0.25,
        first_progress_s: float = 2.0,
    ) -> float:
        """Poll ``/health`` until 200; return seconds taken. Raise StartupError on death or timeout.

        Progress lines come early and then less often (2 s, 4 s, 8 s, ... capped at
        ``progress_every_s``): an operator sees at once that a slow start is moving."""
        assert self.proc is not None and self.started_at is not None, "start() first"
        url = self.spec.base_url + self.spec.health_path
        deadline = self.started_at + self.spec.startup_timeout_s
        interval = min(first_progress_s, progress_every_s)
        next_progress = self.started_at + interval
        while True:
            code = self.proc.poll()
            if code is not None:
                raise self._failure(
                    f"server exited during startup with exit code {code} "
                    f"after {time.monotonic() - self.started_at:.1f} s"
                )
            try:
                with urllib.request.urlopen(url, timeout=2.0) as resp:
                    if resp.status == 200:
                        self.ready_s = time.monotonic() - self.started_at
                        return self.ready_s
            except (urllib.error.URLError, OSError, ValueError):
                pass
            now = time.monotonic()
            if now >= deadline:
                self.stop()
                raise self._failure(
                    f"server not ready after the startup timeout of {self.spec.startup_timeout_s:g} s"
                )
            if progress is not None and now >= next_progress:
                newest = self.log_tail(1).strip() or "(no log output yet)"
                progress(f"waiting for {url}: {now - self.started_at:.0f} s elapsed; log: {newest[:160]}")
                interval = min(interval * 2, progress_every_s)
                next_progress = now + interval
            time.sleep(poll_s)

    def begin_stop(self) -> None:
        """SIGTERM the process group now and return at once: the server shuts down while the run
        writes its bundle, and :meth:`stop` waits for what is left of the term grace. Once only."""
        if self.proc is None or self._term_sent_at is not None:
            return
        self._term_sent_at = time.monotonic()
        _signal_group(self.proc.pid, signal.SIGTERM)

    def stop(self) -> int | None:
        """SIGTERM the process group (unless :meth:`begin_stop` did), wait what is left of the term
        grace, then SIGKILL it and wait until no member is left.

        Safe to call twice. A KeyboardInterrupt while waiting (a second Ctrl-C, or SIGTERM to
        pytest) cuts the polite wait short; the group is still killed before it propagates."""
        proc = self.proc
        if proc is None:
            return None
        # setsid() made the leader's pid the group id; getpgid() would fail once it is reaped.
        pgid = proc.pid
        interrupted: BaseException | None = None
        try:
            self.begin_stop()
            assert self._term_sent_at is not None
            try:
                proc.wait(timeout=max(0.0, self._term_sent_at + self.spec.term_grace_s - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        except KeyboardInterrupt as exc:
            interrupted = exc
        finally:
            # Children may linger after the leader exits (engine workers): kill the whole group.
            _signal_group(pgid, signal.SIGKILL)
            try:
                proc.wait(timeout=KILL_WAIT_S)
            except subprocess.TimeoutExpired:
                pass
            wait_group_gone(pgid, KILL_WAIT_S)
            self._release_guard()
        if interrupted is not None:
            raise interrupted
        return proc.returncode


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _stat_fields(pid: int) -> list[str] | None:
    """Fields of ``/proc/PID/stat`` after the command name (state is the first), or None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()


def group_alive(pgid: int) -> bool:
    """Whether any process of the group still exists (zombies aside)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        rest = _stat_fields(int(entry.name))
        # Fields after the command name: state, ppid, pgrp.
        if rest is not None and int(rest[2]) == pgid and rest[0] != "Z":
            return True
    return False


def wait_group_gone(pgid: int, timeout_s: float) -> bool:
    """Wait until no live process is left in the group; True when it is empty."""
    deadline = time.monotonic() + timeout_s
    while group_alive(pgid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def pid_exit(pid: int) -> tuple[bool, int | None]:
    """(exited, exit code) of a process that is not our child, e.g. the server seen from an
    xdist worker. A zombie still carries its wait status (``/proc/PID/stat`` field 52), so the
    code is known until the parent reaps it; after that it is gone with the process."""
    rest = _stat_fields(pid)
    if rest is None:
        return True, None
    if rest[0] not in ("Z", "X"):
        return False, None
    try:
        status = int(rest[-1])
    except (IndexError, ValueError):
        return True, None
    if os.WIFEXITED(status):
        return True, os.WEXITSTATUS(status)
    if os.WIFSIGNALED(status):
        return True, -os.WTERMSIG(status)
    return True, None


def render_argv(template: Sequence[str], values: Mapping[str, str]) -> tuple[str, ...]:
    """Fill ``{model}``-style placeholders; literal braces (JSON flags) are left alone."""
    out = []
    for arg in template:
        for key, value in values.items():
            arg = arg.replace("{" + key + "}", value)
        out.append(arg)
    return tuple(out)
