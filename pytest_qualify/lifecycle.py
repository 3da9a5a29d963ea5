"""Server lifecycle: launch a server process, wait until it is ready, stop its whole process tree.

This module knows nothing of pytest (like pytest-xprocess's engine). The plugin describes a launch
with a :class:`LaunchSpec`; :class:`ServerProcess` runs it in its own process group with its output
in a log file, polls ``/health`` with progress reports, and fails fast — exit code, exact command and
log tail — when the process dies before it is ready.
"""

from __future__ import annotations

import ctypes
import os
import shlex
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

LOG_TAIL_LINES = 50
REDACTED = "***"


class StartupError(RuntimeError):
    """The server did not become ready; the message carries the command, exit code and log tail."""


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


def redact(text: str, secrets: Sequence[str]) -> str:
    for secret in secrets:
        if secret:
            text = text.replace(secret, REDACTED)
    return text


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


def _die_with_parent() -> None:
    # Own process group (so teardown reaches every child) and SIGTERM when the launching process
    # dies, even by SIGKILL: a server must never outlive the run that owns it.
    os.setsid()
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


class ServerProcess:
    """One launched server process group."""

    def __init__(self, spec: LaunchSpec) -> None:
        self.spec = spec
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_at: float | None = None
        self.ready_s: float | None = None

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
                preexec_fn=_die_with_parent,
            )
        except OSError as exc:
            raise StartupError(
                f"could not launch the server: {exc.strerror or exc}\ncommand: {spec.display_command()}"
            ) from exc
        finally:
            log.close()
        self.started_at = time.monotonic()

    def _failure(self, what: str) -> StartupError:
        return StartupError(
            f"{what}\ncommand: {self.spec.display_command()}\n"
            f"log: {self.spec.log_path}\n--- last {LOG_TAIL_LINES} log lines ---\n{self.log_tail()}"
        )

    def wait_ready(
        self,
        progress: Callable[[str], None] | None = None,
        progress_every_s: float = 10.0,
        poll_s: float = 0.25,
    ) -> float:
        """Poll ``/health`` until 200; return seconds taken. Raise StartupError on death or timeout."""
        assert self.proc is not None and self.started_at is not None, "start() first"
        url = self.spec.base_url + self.spec.health_path
        deadline = self.started_at + self.spec.startup_timeout_s
        next_progress = self.started_at + progress_every_s
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
                next_progress = now + progress_every_s
            time.sleep(poll_s)

    def stop(self) -> int | None:
        """SIGTERM the process group, wait, then SIGKILL it. Safe to call twice."""
        proc = self.proc
        if proc is None:
            return None
        try:
            pgid = os.getpgid(proc.pid)
        except ProcessLookupError:
            pgid = proc.pid
        _signal_group(pgid, signal.SIGTERM)
        try:
            proc.wait(timeout=self.spec.term_grace_s)
        except subprocess.TimeoutExpired:
            pass
        # Children may linger after the leader exits (engine workers): kill the whole group.
        _signal_group(pgid, signal.SIGKILL)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        return proc.returncode


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def group_alive(pgid: int) -> bool:
    """Whether any process of the group still exists (zombies aside)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # Fields after the command name: state, ppid, pgrp.
        rest = stat.rsplit(")", 1)[1].split()
        if int(rest[2]) == pgid and rest[0] != "Z":
            return True
    return False


def render_argv(template: Sequence[str], values: Mapping[str, str]) -> tuple[str, ...]:
    """Fill ``{model}``-style placeholders; literal braces (JSON flags) are left alone."""
    out = []
    for arg in template:
        for key, value in values.items():
            arg = arg.replace("{" + key + "}", value)
        out.append(arg)
    return tuple(out)
