"""Prompt sizes in the server's tokens, each distinct prompt counted once per run.

A prompt's token count is a property of its text and of the served tokenizer and chat template:
counted once, it holds for every repetition and every module that sends the same prompt. On real
vLLM a ``/tokenize`` of a 262,144-token prompt costs the API server about a second of CPU, which is
what the harness adds to a run at GPU speed; so the :class:`Sizer` (the one object that sizes, one
per run and process) keeps

- every count it was given, keyed by the prompt's digest and the tokenizer's identity;
- every finished sizing (a lane, a bracket edge, a probe), keyed by what was sized, so the same
  prompt is rebuilt, not searched again, by the next item that needs it;
- the tokens per filler unit it learned (:class:`~pytest_qualify.tasks.haystack.UnitRate`), the
  next search's first guess: usually the only count a new lane needs is the one that verifies it.

Both records go to ``sizing.jsonl`` in the run folder as well (one line each, written whole under
a lock), so xdist workers share them: a sizing one worker finished is the sizing every worker
uses, the first one written wins. A count recorded under another tokenizer's identity is never
read. Every count is still the server's own: nothing here predicts a size it then trusts.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pytest_qualify.tasks.haystack import (
    Haystack, HaystackPlan, Messages, Sized, UnitRate, pad_messages, size_lane,
)

SIZING_FILE = "sizing.jsonl"


def prompt_digest(messages: Messages, **extra: Any) -> str:
    """The prompt's identity: sha256 of its messages (and any other counted field) as canonical JSON."""
    body = json.dumps({"messages": messages, **extra}, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(body.encode("utf-8")).hexdigest()


def tokenizer_identity(base_url: str, served_name: str, model: str = "", revision: str = "") -> str:
    """What decides a count: the endpoint and served name that answer ``/tokenize``, and the model
    and revision the profile declares (a changed revision may change the tokenizer or template)."""
    return f"{base_url.rstrip('/')} {served_name} {model}@{revision or '-'}"


class Sizer:
    """Counts chat prompts with ``count`` (the server's ``/tokenize``), each distinct prompt once.

    ``calls``: the counts this sizer asked the server for; ``reused``: the counts it answered from
    what it (or another worker) had already counted. ``store``: the run folder's shared file, or
    None to keep everything in this process."""

    def __init__(self, count: Callable[[Messages], int], tokenizer: str, store: Path | None = None) -> None:
        self._count = count
        self.tokenizer = tokenizer
        self.store = store
        self.rate = UnitRate()
        self.calls = 0
        self.reused = 0
        self._counts: dict[str, int] = {}
        self._sized: dict[str, dict[str, Any]] = {}
        self._read_to = 0  # bytes of the store already read

    def __repr__(self) -> str:
        return f"Sizer({self.tokenizer!r}, calls={self.calls}, reused={self.reused})"

    # -- counts ------------------------------------------------------------------------------------

    def count(self, messages: Messages) -> int:
        """The server's count of this chat prompt: asked once per run, remembered after."""
        key = prompt_digest(messages)
        if key not in self._counts:
            self._load()
        if key in self._counts:
            self.reused += 1
            return self._counts[key]
        tokens = int(self._count(messages))
        self.calls += 1
        self._counts[key] = tokens
        self._append({"tokenizer": self.tokenizer, "prompt": key, "tokens": tokens})
        return tokens

    __call__ = count

    # -- sizings -----------------------------------------------------------------------------------

    def sized(self, key: str, size: Callable[[], Sized], rebuild: Callable[[int], Messages]) -> Sized:
        """The sizing named ``key`` (what was sized and to what target): done by ``size`` the first
        time in the run, rebuilt by ``rebuild(units)`` plus its pad words every time after, with the
        count it was given. Where two workers sized it at once, both use the first one recorded.
        The result's ``calls`` are the counts this call asked the server for."""
        before = self.calls
        record = self._recall(key)
        fresh: Sized | None = None
        if record is None:
            fresh = size()
            record = self._remember(key, {"units": fresh.units, "pad": fresh.pad, "tokens": fresh.tokens,
                                          "target": fresh.target})
        if fresh is not None and (record["units"], record["pad"]) == (fresh.units, fresh.pad):
            return dataclasses.replace(fresh, calls=self.calls - before)
        messages = pad_messages(rebuild(int(record["units"])), int(record["pad"]))
        tokens = self.count(messages)
        return Sized(int(record["units"]), tokens, self.calls - before, messages, int(record["target"]),
                     pad=int(record["pad"]))

    def lane(self, plan: HaystackPlan, prompt_tokens: int, tolerance: int) -> Sized:
        """A context lane's prompt (``haystack.size_lane``), sized once per run: the integrity
        module's rebuild of a lane gets the very messages the lane was timed with."""
        return self.sized(f"lane {plan.seed} {prompt_tokens}±{tolerance}",
                          lambda: size_lane(plan, self.count, prompt_tokens, tolerance, rate=self.rate),
                          Haystack(plan).build)

    # -- the shared file ---------------------------------------------------------------------------

    def _recall(self, key: str) -> dict[str, Any] | None:
        if key not in self._sized:
            self._load()
        return self._sized.get(key)

    def _remember(self, key: str, record: dict[str, Any]) -> dict[str, Any]:
        """Record a finished sizing, unless another worker recorded the same one first: then that one."""
        line = {"tokenizer": self.tokenizer, "sizing": key, **record}
        if self.store is None:
            return self._sized.setdefault(key, line)
        with open(self.store, "ab+") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                self._read(fh)
                if key not in self._sized:
                    fh.write((json.dumps(line) + "\n").encode())
                    fh.flush()
                    self._sized[key] = line
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)
        return self._sized[key]

    def _append(self, line: dict[str, Any]) -> None:
        if self.store is None:
            return
        with open(self.store, "ab") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            fh.write((json.dumps(line) + "\n").encode())
            fh.flush()
            fcntl.flock(fh, fcntl.LOCK_UN)

    def _load(self) -> None:
        if self.store is None or not self.store.exists():
            return
        with open(self.store, "rb") as fh:
            fcntl.flock(fh, fcntl.LOCK_SH)
            try:
                self._read(fh)
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def _read(self, fh: Any) -> None:
        """Take in the lines written since the last read (whole lines only: writers hold the lock)."""
        fh.seek(self._read_to)
        data = fh.read()
        self._read_to += len(data)
        for raw in data.splitlines():
            try:
                line = json.loads(raw)
            except json.JSONDecodeError:
                continue
            if line.get("tokenizer") != self.tokenizer:
                continue
            if "prompt" in line:
                self._counts.setdefault(line["prompt"], int(line["tokens"]))
            elif "sizing" in line:
                self._sized.setdefault(line["sizing"], line)
