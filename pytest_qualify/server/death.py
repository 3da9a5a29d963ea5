"""A server's death, confirmed and accounted for once: after a refused connection, is the server
gone (its process exited) or does it still answer; and the run's one account of the death
(``server-death.txt`` in the run folder), which the first process to find it writes and every
other process (each xdist worker, the controller) adopts. No pytest: ``hooks/watch.py`` turns
what this says into failed tests. Beside ``liveness.py``, which asks whether a server that
refused something still serves."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pytest_qualify.server.target import Target

# The first process to find the server dead writes the account here; xdist workers share run_dir,
# so every worker and the controller report the same death the same way.
DEATH_FILE = "server-death.txt"
HEALTH_PROBE_TIMEOUT_S = 5.0
EXIT_WAIT_S = 2.0
DEATH_LOG_LINES = 20
TAIL_SEP = f"\n--- last {DEATH_LOG_LINES} lines of the server log ---\n"


@dataclass(frozen=True)
class WatchedServer:
    """The server as its death is checked: the launched target in this process, or (an xdist
    worker) the pid and log the controller handed over; attached, neither (its death is unknown)."""

    base_url: str
    target: Target | None = None
    pid: int | None = None
    log_path: str | None = None
    secrets: tuple[str, ...] = ()

    def process_gone(self) -> str | None:
        """Why the launched server process is gone; None while it runs or when attached (unknown)."""
        if self.target is not None:
            return self.target.died()
        if self.pid:
            from pytest_qualify.server.target import process_gone

            return process_gone(int(self.pid))
        return None

    def probe_health(self) -> str | None:
        """The connection error when /health cannot be reached; None when the server answers at
        all (any status) or is merely slow (a hung server is not a dead one)."""
        from pytest_qualify.server.target import probe_health

        probe = probe_health(self.base_url, HEALTH_PROBE_TIMEOUT_S)
        return None if probe.status is not None or probe.timed_out else probe.error

    def confirm_death(self) -> str | None:
        """After a failed connection: how the server is gone, or None when it still answers."""
        refused = self.probe_health()
        if refused is None:
            return None
        target = self.target
        pid = target.process.pid if target is not None and target.process else self.pid
        if not pid:
            return f"the endpoint no longer accepts connections ({refused})"
        # The listening socket closes a moment before the process is reaped: wait for the exit code.
        deadline = time.monotonic() + EXIT_WAIT_S
        while (how := self.process_gone()) is None:
            if time.monotonic() >= deadline:
                return f"server process (pid {pid}) is running but refuses connections ({refused})"
            time.sleep(0.05)
        return how

    def death_account(self, during: str, how: str) -> str:
        """The account of a death: the reason, then the server log's tail."""
        from pytest_qualify.server.target import log_tail

        if self.target is not None:
            text = self.target.log_tail(DEATH_LOG_LINES)
        else:
            text = log_tail(self.log_path, self.secrets, DEATH_LOG_LINES)
        reason = f"server died during {during}: {how}"
        if text.strip():
            reason += TAIL_SEP + text
        return reason


def split_death(account: str) -> tuple[str, str]:
    """A death's account as written to DEATH_FILE: (the reason, the server log's tail)."""
    reason, _, tail = account.partition(TAIL_SEP)
    return reason, tail


def write_account(run_dir: Path, account: str) -> str:
    """Record a death's account; the first finder's account wins, in every process: the account
    that stands (this one, or one another process wrote first)."""
    # Written whole under a name of its own, then linked into place: the account appears complete or
    # not at all, so a process that reads it never meets it half written (and never takes an empty
    # file for no account and writes a second one).
    draft = run_dir / f".{DEATH_FILE}.{os.getpid()}"
    try:
        draft.write_text(account, encoding="utf-8")
        os.link(draft, run_dir / DEATH_FILE)
    except FileExistsError:
        account = read_account(run_dir) or account
    except OSError:  # a file system without hard links: created exclusively, then written
        try:
            with open(run_dir / DEATH_FILE, "x", encoding="utf-8") as fh:
                fh.write(account)
        except FileExistsError:
            account = read_account(run_dir) or account
        except OSError:
            pass
    finally:
        draft.unlink(missing_ok=True)
    return account


def read_account(run_dir: Path) -> str | None:
    """Another process's account of the death, if one was written."""
    try:
        text = (run_dir / DEATH_FILE).read_text(encoding="utf-8")
    except OSError:
        return None
    return text or None
