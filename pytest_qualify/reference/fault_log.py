"""Which armed faults engaged, and when: the reference server's record and the plugin's reading of it.

A fault switch that never met a request it applies to changed nothing, and a run that PASSes with it
on proves nothing (``die_after=100000`` on a run of a few hundred requests). So every place that
applies a fault says so (``Faults.engage``), and the server keeps, per armed fault, whether it
engaged and when it first did: after how many chat requests (the one that met it included) and how
many seconds after the server started. The record is a file in the run folder
(``reference-faults.json``), rewritten at each fault's first engagement and before its effect, so a
fault that ends the process (``die_after``) or hangs it (``hang_after``) is on record too. The plugin
reads it at the end of the run: every armed fault is listed in ``summary.json``, and one that never
engaged leaves the run INCOMPLETE. No HTTP and no pytest here.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FAULT_LOG = "reference-faults.json"


@dataclass(frozen=True)
class Engagement:
    """One armed fault: whether it engaged, and its first engagement."""

    fault: str  # as armed: NAME or NAME=ARG
    name: str
    what: str  # what the switch breaks (faults.py or its oracle's FAULTS)
    engaged: bool
    chat_requests: int | None = None  # chat requests the server had received when it first engaged
    after_s: float | None = None  # seconds after the server started

    def as_dict(self) -> dict[str, Any]:
        return {"fault": self.fault, "name": self.name, "what": self.what, "engaged": self.engaged,
                "chat_requests": self.chat_requests, "after_s": self.after_s}


class EngagementLog:
    """The server's side: first engagements, kept in memory and, once a path is given, in the file.

    Thread-safe; a fault already on record costs one dictionary look-up, so the hot paths (a fault
    that touches every answer) may report each time they apply it."""

    def __init__(self, armed: Mapping[str, tuple[str, str]] | None = None) -> None:
        # name -> (the switch as armed, what it breaks)
        self._armed = dict(armed or {})
        self._first: dict[str, tuple[int | None, float]] = {}
        self._lock = threading.Lock()
        self._started = time.monotonic()
        self._path: Path | None = None
        self._chat_requests: Callable[[], int] | None = None

    def count_chat(self, counter: Callable[[], int]) -> None:
        """How the server counts its chat requests (read at each first engagement)."""
        self._chat_requests = counter

    def keep(self, path: Path) -> None:
        """Write the record to ``path`` now (every armed fault, none engaged yet) and at each first engagement."""
        with self._lock:
            self._path = path
            self._write()

    def engaged(self, name: str) -> None:
        if name in self._first or name not in self._armed:
            return
        with self._lock:
            if name in self._first:
                return
            count = self._chat_requests() if self._chat_requests is not None else None
            self._first[name] = (count, round(time.monotonic() - self._started, 3))
            self._write()

    def records(self) -> list[Engagement]:
        out = []
        for name, (spec, what) in self._armed.items():
            first = self._first.get(name)
            out.append(Engagement(spec, name, what, first is not None, *(first or (None, None))))
        return out

    def _write(self) -> None:
        if self._path is None:
            return
        data = {"what": "the reference server's armed faults: whether each engaged, and its first engagement "
                        "(chat_requests: the chat requests received by then, that one included; after_s: seconds "
                        "after the server started)",
                "faults": [r.as_dict() for r in self.records()]}
        # Written whole and renamed, so a reader never sees half a file; a hidden name stays out of the bundle.
        tmp = self._path.with_name(f".{self._path.name}.tmp")
        tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, self._path)


# -- the plugin's side: reading the record at the end of a run -------------------------------------------


@dataclass(frozen=True)
class FaultRecord:
    """The run's armed faults as the server recorded them (``recorded_in`` None: it kept no record)."""

    faults: tuple[Engagement, ...]
    recorded_in: str | None
    note: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"recorded_in": self.recorded_in, "note": self.note, "armed": [f.as_dict() for f in self.faults]}

    def never_engaged(self) -> list[str]:
        """One run-level reason per armed fault that never engaged: the run cannot show it is caught."""
        if self.recorded_in is None:
            names = ", ".join(f.fault for f in self.faults)
            return [f"fault {names} not shown to engage: {self.note}"]
        return [f"fault {f.fault} never engaged: {f.what or 'its switch'}, and no request of this run met it; "
                "the run cannot show that the fault is caught" for f in self.faults if not f.engaged]


def read_record(run_dir: Path, armed: Sequence[str]) -> FaultRecord:
    """The armed faults (``NAME[=ARG]`` as the run switched them on) with what the server's record
    says of each; every one not engaged when the record is missing or unreadable."""
    path = run_dir / FAULT_LOG
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))["faults"]
        by_name = {str(row["name"]): row for row in rows}
    except FileNotFoundError:
        return _unrecorded(armed, f"the reference server kept no record of its faults ({FAULT_LOG})")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return _unrecorded(armed, f"the reference server's record of its faults ({FAULT_LOG}) cannot be read: {exc}")
    out = []
    for spec in armed:
        name = spec.partition("=")[0]
        row = by_name.get(name) or {}
        out.append(Engagement(spec, name, str(row.get("what") or ""), row.get("engaged") is True,
                              row.get("chat_requests"), row.get("after_s")))
    return FaultRecord(tuple(out), FAULT_LOG)


def _unrecorded(armed: Sequence[str], note: str) -> FaultRecord:
    return FaultRecord(tuple(Engagement(spec, spec.partition("=")[0], "", False) for spec in armed), None, note)
