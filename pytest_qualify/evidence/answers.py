"""The run's answer journal (``answers.jsonl``): every protocol answer, keyed by its request.

The integrity module holds the answering server to the judged one (MLPerf's TEST01): an answer
must equal every earlier answer to the same request in this run — from another module, another
repetition, the streamed or the plain path. The key is the request without what may differ between
two honest asks of it (the cache salt, streaming, the client's time limit). xdist workers share the
run folder, so lines are appended under a file lock. No pytest here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pytest_qualify.evidence import transcripts
from pytest_qualify.evidence.jsonl import append_line, read_lines
from pytest_qualify.gate.slo import CheckRow
from pytest_qualify.graders import Verdict
from pytest_qualify.graders.integrity import RecordedAnswer, check_same_answers
from pytest_qualify.request_key import request_key as key_of

JOURNAL_FILE = "answers.jsonl"
HELD_TITLE = "Integrity: sampled answers held to the end of the run"
# Each journaled answer says its role (the asker passes it to ``qualify_ask``), so the run-end row
# finds its answers by role, never by the name of the test that asked.
ANSWER = "answer"  # any protocol answer
HELD = "held"  # the integrity module's sample: the whole journal is held to its request at the end
TIMED = "timed"  # the context module's timed, streamed lane answer
REASKED = "reasked"  # the integrity module's re-ask of a timed request (TEST01 on the timing phase)
ROLES = (ANSWER, HELD, TIMED, REASKED)
# Not an answer: a grader's verdict on one item (``checks.require``), the proof that a passed item
# was graded (``gate.decide.proof_of_grading``). Its line has no request key.
VERDICT = "verdict"


def request_key(messages: Sequence[Mapping[str, Any]], params: Mapping[str, Any]) -> str:
    """The journal's key of a request asked with these messages and parameters (``request_key.py``
    says what the same request is)."""
    return key_of({"messages": list(messages), **params})


def append(run_dir: Path, key: str, answer: RecordedAnswer, salt: str | None = None, role: str = ANSWER) -> None:
    """``salt``: the request's cache salt, kept so a later ask can be the very same request (the
    timed re-ask); never part of the key. ``role``: one of ``ROLES``."""
    if role not in ROLES:
        raise ValueError(f"journal role {role!r}: expected one of {', '.join(ROLES)}")
    fields = {"key": key, "role": role, **answer.as_dict(), **({"salt": salt} if salt is not None else {})}
    append_line(run_dir / JOURNAL_FILE, json.dumps(fields, ensure_ascii=False, default=str))


def append_verdict(run_dir: Path, test: str, ok: bool) -> None:
    """One verdict a grader reached on the item ``test`` (its node id)."""
    append_line(run_dir / JOURNAL_FILE, json.dumps({"role": VERDICT, "test": test, "ok": ok}))


def record(run_dir: Path, asked: Mapping[str, Any], answer: RecordedAnswer | None, *, salt: str | None = None,
           role: str = ANSWER, secrets: Sequence[str] = ()) -> None:
    """One protocol answer's evidence, written together: its journal line (when an answer came) and
    its transcript line (``asked``: ``transcripts.asked_record``, the request as sent and the answer
    or the error that came instead), the one call ``qualify_ask`` makes per answer."""
    if answer is not None:
        append(run_dir, str(asked["key"]), answer, salt=salt, role=role)
    transcripts.append(run_dir, asked, secrets)


def record_verdict(run_dir: Path, test: str, verdict: Verdict, secrets: Sequence[str] = ()) -> None:
    """One verdict a grader reached on the item ``test`` (``checks.require``): its journal line and,
    when its contract read any, the slots it read (``Verdict.slots``) in the transcripts."""
    append_verdict(run_dir, test, verdict.ok)
    if verdict.slots:
        transcripts.append(run_dir, transcripts.slots_record(test, [s.as_dict() for s in verdict.slots]), secrets)


def graded_tests(run_dir: Path) -> set[str]:
    """The node ids of the items whose graders recorded at least one verdict in this run."""
    return {str(d.get("test")) for d in _lines(run_dir) if d.get("role") == VERDICT}


def _lines(run_dir: Path) -> list[dict[str, Any]]:
    return read_lines(run_dir / JOURNAL_FILE)


def answers_to(run_dir: Path, key: str) -> list[RecordedAnswer]:
    """The journal's answers to this request, oldest first."""
    return [RecordedAnswer.from_dict(d) for d in _lines(run_dir) if d.get("key") == key]


def timed_answers(run_dir: Path, key: str) -> list[tuple[RecordedAnswer, str | None]]:
    """The context module's answers to this request (its timed, streamed ones), oldest first, each
    with the cache salt it was asked under."""
    return [(RecordedAnswer.from_dict(d), d.get("salt")) for d in _lines(run_dir)
            if d.get("key") == key and d.get("role") == TIMED]


def held_to_the_end(run_dir: Path) -> CheckRow | None:
    """The integrity module's sampled requests, held once more when the run is over: every answer
    the journal has to each of them, also those asked after the integrity module ran (the tools
    and reasoning modules come after it, and so does a model swapped in behind the route late in
    the run), equals the first. None when the integrity module held no answer (not in the run).

    The timed requests the integrity module re-asked (a context lane's, per repetition) are held the
    same way, whichever came first under xdist; each must also have the context module's own timed
    answer in the journal, or the timing phase was not held to anything: the row is then not
    measured (INCOMPLETE), never a pass — the integrity item alone compared only its own stream."""
    lines = _lines(run_dir)
    by_key: dict[Any, list[dict[str, Any]]] = {}
    for d in lines:
        by_key.setdefault(d.get("key"), []).append(d)
    held = [d for d in lines if d.get("role") in (HELD, REASKED)]
    keys = list(dict.fromkeys(d["key"] for d in held))
    if not keys:
        return None
    timed = {d["key"]: str(d.get("test", "")) for d in held if d.get("role") == REASKED}
    answers = 0
    for key in keys:
        asked = [RecordedAnswer.from_dict(d) for d in by_key[key]]
        answers += len(asked)
        for n, later in enumerate(asked[1:], start=1):
            verdict = check_same_answers(later, asked[:1])
            if not verdict.ok:
                return CheckRow(HELD_TITLE, f"{later.test}: answer {n + 1} of {len(asked)} differs", "all equal",
                                False, f"{HELD_TITLE}: {later.test} (answer {n + 1} of {len(asked)} to the same "
                                       f"request): {verdict.reason}")
    unheld = [test for key, test in timed.items()
              if not any(d.get("role") == TIMED for d in by_key[key])]
    if unheld:
        return CheckRow(HELD_TITLE, None, "all equal", False,
                        f"{HELD_TITLE}: the timing phase was not held for {', '.join(sorted(unheld))}: the context "
                        "module's timed answer to the same request is not in the run (its lane item did not run, "
                        "or asked another request)")
    sampled = len(keys) - len(timed)
    held_to = [f"{sampled} sampled requests"] if sampled or not timed else []
    held_to += [f"{len(timed)} timed context-lane requests"] if timed else []
    return CheckRow(HELD_TITLE, f"{answers} answers to {' and '.join(held_to)}, all equal", "all equal", True)
