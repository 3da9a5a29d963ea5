"""Steering, the log and its reader: one JSON line per chat request through the proxy
(``steer.jsonl``), and the run-level reasons it gives to leave a steered run INCOMPLETE: an answer
that is not the forced one was never a judgement of the deployment, neither PASS nor FAIL."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

STEER_LOG = "steer.jsonl"


@dataclass(frozen=True)
class SteerRecord:
    """One chat request through the proxy, as one line of ``steer.jsonl``."""

    seq: int
    status: int
    stream: bool
    forced: bool  # a constraint was sent
    held: bool | None  # the forced answer came back exactly (None: nothing forced or refused)
    reason: str = ""  # why nothing was forced, or what differed
    changes: tuple[str, ...] = ()
    forced_text: str | None = None
    prompt: str = ""  # the start of the last user message, to find the item
    faults: tuple[str, ...] = ()  # the answer faults that changed the forced answer (oracle Reply.faults)
    # The caller's max_tokens, kept below the forced answer (kept_for_cut): held means a start of the
    # forced text came back cut by it (held_cut); ``finish`` is how vLLM ended that answer.
    cut: int | None = None
    finish: str | None = None
    # Nothing was to be forced: the request is not the oracles' to answer (malformed input, the
    # caller's own constraint, a fixed-length probe) and went to vLLM as it came.
    passed_through: bool = False
    # When the proxy sent the request to vLLM and when the answer's last byte had gone back (epoch
    # seconds): the request's time on the server's side, for the bench's union of the engine's busy time.
    started_at: float | None = None
    ended_at: float | None = None

    @property
    def breaks_steering(self) -> bool:
        """A 200 answer that is not the oracle's: the plugin graded a random model's text."""
        return self.status == 200 and self.held is not True and not self.passed_through


PASSTHROUGH = "passed through:"  # how the log words a passed-through request's reason
OWN_CONSTRAINT = "the caller sent its own structured-output constraint"


@dataclass(frozen=True)
class Unforced:
    """Why a chat request goes to vLLM unforced, and whether that is a pass-through (nothing to
    force) rather than an answer the oracles should have given and could not."""

    reason: str
    passed_through: bool = False

    @classmethod
    def passthrough(cls, why: str) -> "Unforced":
        return cls(f"{PASSTHROUGH} {why}", passed_through=True)


def incomplete_reasons(log_path: Path, faults: Sequence[str] = ()) -> list[str]:
    """The run-level reasons a steered run is INCOMPLETE: every answered request whose forced answer
    did not come back (or that could not be forced), a steering that forced nothing at all, and a
    lane-keyed answer fault (``faults``: the run's fault switches, ``NAME[=ARG]``) that changed no
    forced answer: a fault that never engaged cannot show that the plugin catches it."""
    if not log_path.is_file():
        return [f"steering: no log {log_path.name}: the steering proxy recorded no request"]
    from pytest_qualify.reference.oracle_context import LANE_FAULTS

    records = [SteerRecord(**{**row, "changes": tuple(row.get("changes") or ()),
                              "faults": tuple(row.get("faults") or ())})
               for row in map(json.loads, log_path.read_text(encoding="utf-8").splitlines()) if row]
    reasons = [f"steering: request {r.seq} ({'stream' if r.stream else 'no stream'}, prompt {r.prompt!r:.60}): "
               f"{'forced answer did not hold: ' if r.forced else 'not forced: '}{r.reason}"
               for r in records if r.breaks_steering]
    # A run whose every request carried its own constraint (the parsers stage) forced nothing by design:
    # its module proves its own forcing.
    own = records and all(r.passed_through and r.reason.endswith(OWN_CONSTRAINT) for r in records)
    if not any(r.forced and r.held for r in records) and not own:
        reasons.append(f"steering: no forced answer came back from vLLM in {len(records)} chat requests")
    engaged = {name for r in records if r.held for name in r.faults}
    for spec in faults:
        name = spec.partition("=")[0]
        if name in LANE_FAULTS and name not in engaged:
            reasons.append(f"steering: fault {spec} never changed a forced answer (no context prompt of its lane "
                           f"reached vLLM, or none was counted in that lane): the run cannot show it is caught")
    return reasons
