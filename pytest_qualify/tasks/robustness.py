"""The robustness module's mechanics: send one hostile request raw and judge the answer's status,
and keep every failing example replayable in the run's evidence; and the run's record of a property
one item proved for others (``proofs.jsonl``). No pytest here; the requests themselves come from
``hostile.py``.
"""

from __future__ import annotations

import fcntl
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_qualify.tasks import hostile

if TYPE_CHECKING:
    import httpx

FAILURES_FILE = "robustness-failures.jsonl"
PROOFS_FILE = "proofs.jsonl"
# The engine behaviour the window bracket's over-window refusal and the robustness module's
# over-window class both prove: one giant prompt proves it, and the other item relies on that proof.
OVER_WINDOW_REFUSED = "a prompt over the window is refused with a 4xx, and the server still serves"
# 4xx answers that mean the request was never judged: they cannot count as a refusal.
NOT_A_JUDGEMENT = {407: "proxy authentication", 429: "rate limited"}  # 401/403: AuthRejected, raised


@dataclass(frozen=True)
class Outcome:
    status: int | None
    response: str
    elapsed_s: float
    problem: str | None  # None: refused with a 4xx, as it must be
    connection_lost: bool = False
    timed_out: bool = False


def send_hostile(http: httpx.Client, example: hostile.Hostile, timeout_s: float) -> Outcome:
    """POST the example's exact bytes; a 4xx that judged the request is the only right answer."""
    import httpx

    t0 = time.perf_counter()
    try:
        resp = http.post(hostile.CHAT_PATH, content=example.body, headers={"Content-Type": "application/json"},
                         timeout=timeout_s)
    except httpx.TimeoutException:
        elapsed = time.perf_counter() - t0
        return Outcome(None, "", elapsed, f"no answer after {elapsed:.1f} s (limit {timeout_s:.1f} s)", timed_out=True)
    except httpx.TransportError as exc:
        elapsed = time.perf_counter() - t0
        return Outcome(None, "", elapsed, f"connection lost without an answer ({type(exc).__name__}: {exc})",
                       connection_lost=True)
    elapsed = time.perf_counter() - t0
    status, text = resp.status_code, resp.text[:500]
    if status in (401, 403):
        # Our key refused: the request was not judged, and neither is the item (the pytest side
        # counts it as credentials refused, never as the deployment's answer).
        from pytest_qualify.client.errors import AuthRejected

        raise AuthRejected(f"POST {hostile.CHAT_PATH}", text, status=status)
    if status in NOT_A_JUDGEMENT:
        problem: str | None = f"HTTP {status} ({NOT_A_JUDGEMENT[status]}): the request was not judged"
    elif 400 <= status < 500:
        problem = None
    elif status >= 500:
        problem = f"HTTP {status} instead of a 4xx refusal"
    else:
        problem = f"HTTP {status}: answered instead of refused"
    return Outcome(status, text, elapsed, problem)


def record_failure(run_dir: Path, nodeid: str, example: hostile.Hostile, outcome: Outcome) -> int:
    """Append one failing example to ``robustness-failures.jsonl``; returns its line number (1-based)."""
    line = json.dumps({
        "test": nodeid, "class": example.kind, "what": example.note, "problem": outcome.problem,
        "status": outcome.status, "response": outcome.response, "elapsed_s": round(outcome.elapsed_s, 3),
        "request": example.replay(),
    }, ensure_ascii=False)
    path = run_dir / FAILURES_FILE
    with open(path, "a+", encoding="utf-8") as fh:
        # xdist workers share the evidence directory: one writer at a time, whole lines.
        fcntl.flock(fh, fcntl.LOCK_EX)
        fh.seek(0)
        number = sum(1 for _ in fh) + 1
        fh.write(line + "\n")
        fh.flush()
        fcntl.flock(fh, fcntl.LOCK_UN)
    return number


@dataclass(frozen=True)
class Proof:
    """One item's proof of an engine property, for the items that rely on it: which item, whether
    the property held there, and what it saw (the prompt's size, the refusal)."""

    property: str
    nodeid: str
    held: bool
    detail: str


def _append_line(path: Path, line: str) -> None:
    with open(path, "a", encoding="utf-8") as fh:
        # xdist workers share the evidence directory: one writer at a time, whole lines.
        fcntl.flock(fh, fcntl.LOCK_EX)
        fh.write(line + "\n")
        fh.flush()
        fcntl.flock(fh, fcntl.LOCK_UN)


def record_proof(run_dir: Path, proof: Proof) -> None:
    """Put one proof on the run's record (``proofs.jsonl``), held or not."""
    _append_line(run_dir / PROOFS_FILE, json.dumps({"property": proof.property, "nodeid": proof.nodeid,
                                                    "held": proof.held, "detail": proof.detail}, ensure_ascii=False))


def proofs_of(run_dir: Path, prop: str) -> list[Proof]:
    """Every proof of ``prop`` on the run's record so far, in the order they were made."""
    path = run_dir / PROOFS_FILE
    if not path.is_file():
        return []
    out = []
    for raw in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(raw)
        except ValueError:
            continue
        if row.get("property") == prop:
            out.append(Proof(prop, str(row["nodeid"]), bool(row["held"]), str(row.get("detail", ""))))
    return out
