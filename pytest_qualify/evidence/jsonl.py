"""The run folder's shared JSON-lines files (the answer journal, the transcripts): xdist workers
append to one file, so a line is written whole under an exclusive lock and read under a shared one;
a line cut by a killed worker is skipped on reading (it judges nothing). No pytest here."""

from __future__ import annotations

import fcntl
import json
from pathlib import Path
from typing import Any


def append_line(path: Path, line: str) -> None:
    """Append one already-serialised (and, where it must be, redacted) JSON line."""
    with open(path, "a", encoding="utf-8") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        fh.write(line + "\n")
        fh.flush()
        fcntl.flock(fh, fcntl.LOCK_UN)


def read_lines(path: Path) -> list[dict[str, Any]]:
    """The file's records in the order written; none when the file does not exist."""
    if not path.exists():
        return []
    with open(path, encoding="utf-8") as fh:
        fcntl.flock(fh, fcntl.LOCK_SH)
        lines = fh.readlines()
        fcntl.flock(fh, fcntl.LOCK_UN)
    out = []
    for line in lines:
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out
