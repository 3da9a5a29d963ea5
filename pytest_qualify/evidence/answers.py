"""The run's answer journal (``answers.jsonl``): every protocol answer, keyed by its request.

The integrity module holds the answering server to the judged one (MLPerf's TEST01): an answer
must equal every earlier answer to the same request in this run — from another module, another
repetition, the streamed or the plain path. The key is the request without what may differ between
two honest asks of it (the cache salt, streaming, the client's time limit). xdist workers share the
run folder, so lines are appended under a file lock. No pytest here.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pytest_qualify.graders.integrity import RecordedAnswer

JOURNAL_FILE = "answers.jsonl"
# Fields two honest asks of the same request may differ in.
NOT_IN_KEY = frozenset({"cache_salt", "stream", "stream_options", "timeout_s", "prompt_tokens_hint"})


def request_key(messages: Sequence[Mapping[str, Any]], params: Mapping[str, Any]) -> str:
    """A digest of the request's messages and every parameter that changes the answer."""
    body = {"messages": list(messages), **{k: v for k, v in params.items() if k not in NOT_IN_KEY}}
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()[:32]


def append(run_dir: Path, key: str, answer: RecordedAnswer) -> None:
    line = json.dumps({"key": key, **answer.as_dict()}, ensure_ascii=False, default=str)
    with open(run_dir / JOURNAL_FILE, "a", encoding="utf-8") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        fh.write(line + "\n")
        fh.flush()
        fcntl.flock(fh, fcntl.LOCK_UN)


def answers_to(run_dir: Path, key: str) -> list[RecordedAnswer]:
    """The journal's answers to this request, oldest first."""
    path = run_dir / JOURNAL_FILE
    if not path.exists():
        return []
    out = []
    with open(path, encoding="utf-8") as fh:
        fcntl.flock(fh, fcntl.LOCK_SH)
        lines = fh.readlines()
        fcntl.flock(fh, fcntl.LOCK_UN)
    for line in lines:
        try:
            data = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut by a killed worker judges nothing
        if data.get("key") == key:
            out.append(RecordedAnswer.from_dict(data))
    return out
