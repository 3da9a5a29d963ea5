"""When the engine was busy: the union of the intervals in which it had a request running.

The sum of the requests' end-to-end latencies (``vllm:e2e_request_latency_seconds_sum``) counts a
second twice when two requests overlap, and counts a queued request's wait as busy time although
the engine was serving another one then (the load module's level 2 at ``--max-num-seqs 1``). The
engine's busy time is the union of the intervals from each answered request's start to its end:
a second in which at least one request was running counts once, a second in which none was counts
not at all. Queue time is excluded: a request's interval starts when the engine admitted it (the
reference server's scheduler), or at the earliest moment known on the server's side (the steering
proxy's forward to vLLM: vLLM's own queue time is then inside the interval, and counts only where
another request was running, which the union already holds once).

Where the intervals come from, one JSON line per answered request:

- ``busy.jsonl`` (``{"start": epoch_s, "end": epoch_s}``): the reference server started by the bench
  (``bench/busy_reference.py``: from the scheduler's admission to the request's release);
- ``steer.jsonl`` (the steering proxy's log, ``started_at`` / ``ended_at`` on each chat request it
  forwarded, HTTP 200 only): a steered run, launch or attach mode.

No pytest, no server here: pure functions over intervals, tested in ``tests/project/test_bench_busy.py``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

BUSY_LOG = "busy.jsonl"
STEER_LOG = "steer.jsonl"


@dataclass(frozen=True)
class Interval:
    """One request's time on the engine, in seconds of one clock (epoch seconds in the logs)."""

    start_s: float
    end_s: float

    @property
    def length_s(self) -> float:
        return max(0.0, self.end_s - self.start_s)


def union_s(intervals: Iterable[Interval]) -> float:
    """Seconds covered by at least one interval (overlaps counted once, gaps not at all)."""
    total, reach = 0.0, None
    for iv in sorted((iv for iv in intervals if iv.end_s > iv.start_s), key=lambda iv: iv.start_s):
        if reach is None or iv.start_s >= reach:
            total += iv.end_s - iv.start_s
            reach = iv.end_s
        elif iv.end_s > reach:
            total += iv.end_s - reach
            reach = iv.end_s
    return total


def summed_s(intervals: Iterable[Interval]) -> float:
    """The old measure on the same intervals: every request's length, overlaps counted again."""
    return sum(iv.length_s for iv in intervals)


def clipped(intervals: Iterable[Interval], start_s: float, end_s: float) -> list[Interval]:
    """The parts of the intervals inside ``[start_s, end_s]`` (the run's own span)."""
    out = []
    for iv in intervals:
        a, b = max(iv.start_s, start_s), min(iv.end_s, end_s)
        if b > a:
            out.append(Interval(a, b))
    return out


def read_busy_log(path: Path) -> list[Interval]:
    """``busy.jsonl``: one ``{"start", "end"}`` line per answered request."""
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
            out.append(Interval(float(row["start"]), float(row["end"])))
        except (ValueError, KeyError, TypeError):
            continue  # a line cut by the server's stop
    return out


def read_steer_log(path: Path) -> list[Interval]:
    """The steering proxy's answered chat requests (HTTP 200) that carry their forward's times."""
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        start, end = row.get("started_at"), row.get("ended_at")
        if row.get("status") == 200 and isinstance(start, (int, float)) and isinstance(end, (int, float)):
            out.append(Interval(float(start), float(end)))
    return out


def find_intervals(folders: Sequence[Path]) -> tuple[list[Interval], str] | None:
    """The first per-request log found in ``folders`` (the bench's own folder, the run's bundle),
    with what it is; None when the run kept none (an unsteered launch: vLLM logs no request's times)."""
    for folder in folders:
        if (folder / BUSY_LOG).is_file():
            return read_busy_log(folder / BUSY_LOG), f"{BUSY_LOG} (the reference server's scheduler: admitted to released)"
        if (folder / STEER_LOG).is_file():
            found = read_steer_log(folder / STEER_LOG)
            if found:
                return found, f"{STEER_LOG} (the steering proxy: forwarded to vLLM to the answer's last byte, HTTP 200)"
    return None
