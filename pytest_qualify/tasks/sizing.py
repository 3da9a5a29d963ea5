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
  next search's first guess, and what a calibrated prompt's size is computed from.

A prompt re-seeded per repetition (a context lane, the integrity module's cache probes) is a new
text each time, but the same *kind* of prompt: once one of its kind has been sized by count, the
next is computed from the learned rate and sent with no ``/tokenize`` call, and the answer's own
``usage.prompt_tokens`` (exact: the server's count of the very request) proves it
(:meth:`Sizer.confirm`); a computed size its answer refutes is searched by count again, and its kind
is never computed again in this process.

The first prompt of a kind is not searched either: the sizer calibrates its tokens per filler unit
once per run on one small prompt (a haystack of ``CALIBRATION_UNITS`` pieces and its empty frame:
two ``/tokenize`` calls of a few thousand tokens, where a search of a 240K-token lane costs a
second of the API server's CPU a call) and computes the prompt from it, for its answer to prove in
the same way, over its own empty frame (one more small count: frames differ by tens of tokens between
haystacks); where the answer refutes it, it is searched by count, and its kind is computed from
that count after (:meth:`Sizer.confirm`). Every answer to such a prompt adds its filler to the rate
the next one is computed from. The window bracket's fitting prompt must be exact: it is computed
from the calibration's own rate, and proven by its answer's ``usage.prompt_tokens``
(``suites/test_window.py``); the over-window edge has no usage, so it is
counted (once per run) unless the refusal states the prompt's exact size (:func:`refusal_tokens`).

Both records go to ``sizing.jsonl`` in the run folder as well (one line each, written whole under
a lock), so xdist workers share them: a sizing one worker finished is the sizing every worker
uses, the first one written wins. A count recorded under another tokenizer's identity is never
read. Every count is the server's own: a computed size is trusted only once an answer's usage says it.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pytest_qualify.tasks.haystack import (
    Haystack, HaystackPlan, Messages, Sized, UnitRate, pad_messages, plan_haystack, size_lane,
)

SIZING_FILE = "sizing.jsonl"
# The calibration prompt: filler pieces enough for the rate's sampling error to stay well inside a
# lane's tolerance, few enough that counting it costs the server next to nothing.
CALIBRATION_UNITS = 8192
CALIBRATION_SEED = "sizing calibration"


@dataclasses.dataclass(frozen=True)
class Calibration:
    """The server's tokens per filler unit, measured once per run: the calibration haystack's empty
    frame (``frame_tokens``: system line, template, question) and the same haystack with ``units``
    filler pieces (``tokens``)."""

    units: int
    frame_tokens: int
    tokens: int

    @property
    def tokens_per_unit(self) -> float:
        return (self.tokens - self.frame_tokens) / self.units


# vLLM's over-window refusal, by release (docs/real-vllm.md, engines.toml): a count that is the
# prompt's own size, and one that is only a lower bound ("at least": 0.26.0 counts window − max_tokens
# + 1, 0.32.0 window + 1, whatever the prompt's size).
_EXACT_REFUSAL = (
    re.compile(r"you requested \d[\d,]* tokens \((?P<n>\d[\d,]*) in the messages"),
    re.compile(r"(?:your|the) (?:request|prompt) (?:has|contains) (?P<n>\d[\d,]*) input tokens"),
    re.compile(r"decoder prompt \(length (?P<n>\d[\d,]*)\)"),
)
_LOWER_BOUND_REFUSAL = re.compile(r"at least (?P<n>\d[\d,]*) input tokens")


def refusal_tokens(message: str) -> tuple[int, bool] | None:
    """The prompt's size as an over-window refusal states it, and whether it is exact (False: a lower
    bound only, vLLM's "at least N input tokens"); None when the message states none."""
    for pattern in _EXACT_REFUSAL:
        found = pattern.search(message)
        if found:
            return int(found.group("n").replace(",", "")), True
    found = _LOWER_BOUND_REFUSAL.search(message)
    return (int(found.group("n").replace(",", "")), False) if found else None


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

    def __init__(self, count: Callable[[Messages], int], tokenizer: str, store: Path | None = None,
                 calibration_units: int | None = CALIBRATION_UNITS) -> None:
        self._count = count
        # None: no calibration, the first prompt of a kind is searched by count.
        self.calibration_units = calibration_units
        self.calibration: Calibration | None = None
        self.tokenizer = tokenizer
        self.store = store
        self.rate = UnitRate()
        self.calls = 0
        self.reused = 0
        self._counts: dict[str, int] = {}
        self._sized: dict[str, dict[str, Any]] = {}
        self._read_to = 0  # bytes of the store already read
        self._kind_of: dict[str, str] = {}  # a computed prompt's digest -> its kind
        # A prompt computed from the calibration: its digest -> its own frame's count (build(0)).
        self._from_calibration: dict[str, int] = {}
        # Filler pieces and the tokens they made, frame taken off: the calibration's and every answer's
        # to a calibrated prompt (its usage less its own frame), pooled into one rate.
        self._filler: dict[str, tuple[int, int]] = {}
        self._refuted: set[str] = set()  # kinds whose computed size an answer refuted

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

    def sized(self, key: str, size: Callable[[], Sized], rebuild: Callable[[int], Messages],
              kind: str = "") -> Sized:
        """The sizing named ``key`` (what was sized and to what target): done by ``size`` the first
        time in the run, rebuilt by ``rebuild(units)`` plus its pad words every time after, with the
        count it was given. Where two workers sized it at once, both use the first one recorded.
        The result's ``calls`` are the counts this call asked the server for. ``kind``: what is
        sized whatever the seed (:meth:`about`), kept with the record."""
        before = self.calls
        record = self._recall(key)
        fresh: Sized | None = None
        if record is None:
            fresh = size()
            record = self._remember(key, {"units": fresh.units, "pad": fresh.pad, "tokens": fresh.tokens,
                                          "target": fresh.target, **({"kind": kind} if kind else {}),
                                          **({} if fresh.counted else {"computed": True})})
        if fresh is not None and (record["units"], record["pad"]) == (fresh.units, fresh.pad):
            return dataclasses.replace(fresh, calls=self.calls - before)
        messages = pad_messages(rebuild(int(record["units"])), int(record["pad"]))
        units, pad, target = int(record["units"]), int(record["pad"]), int(record["target"])
        if record.get("computed"):
            # Never counted: the answer's usage proves it (its proof, once given, is the count).
            digest = prompt_digest(messages)
            self._load()
            known = self._counts.get(digest)
            if known is None and record.get("kind"):
                self._kind_of[digest] = str(record["kind"])
            return Sized(units, int(record["tokens"]) if known is None else known, self.calls - before, messages,
                         target, pad=pad, counted=known is not None)
        tokens = self.count(messages)
        return Sized(units, tokens, self.calls - before, messages, target, pad=pad)

    def about(self, key: str, kind: str, build: Callable[[int], Messages], target: int, search: Callable[[], Sized],
              *, counted: bool = False, exact: bool = False) -> Sized:
        """A prompt of about ``target`` tokens that an answer's ``usage.prompt_tokens`` will prove,
        named ``key`` (:meth:`sized`). Once one of its ``kind`` (what is sized whatever the seed:
        ``"lane 32768±256"``) was counted in the run, it is computed from that count and the learned
        rate; before, from the run's calibration (:meth:`calibrate`): built and returned with no
        ``/tokenize`` call of its size, ``counted=False``, for :meth:`confirm` to prove. Without a
        calibration it is searched by count (``search``). ``exact``: the prompt must be exact, so its
        tokens per unit are the calibration's alone (one haystack, no other frames in them).
        ``counted``: search by count all the same (a computed size its answer refuted)."""
        if counted:
            return self.sized(f"{key} counted", search, build, kind)

        def size() -> Sized:
            computed = self._compute(kind, build, target) or self._calibrated(kind, build, target, exact)
            return search() if computed is None else computed

        return self.sized(key, size, build, kind)

    def confirm(self, sized: Sized, prompt_tokens: int | None, tolerance: int, *, below_only: bool = False) -> bool:
        """The answer's own count of a computed prompt (``usage.prompt_tokens``): recorded as the
        prompt's count and learned by the rate. False when it refutes the computed size (off the
        target by more than ``tolerance``; ``below_only``: above the target, or more than
        ``tolerance`` below it): the caller sizes by count and asks again, and this kind is not
        computed again from its anchor (one computed from the calibration is computed from the
        count it then gets). A counted prompt, or an answer without usage, refutes nothing."""
        if sized.counted or prompt_tokens is None:
            return True
        digest = prompt_digest(sized.messages)
        if digest not in self._counts:
            self._counts[digest] = int(prompt_tokens)
            self._append({"tokenizer": self.tokenizer, "prompt": digest, "tokens": int(prompt_tokens),
                          "from": "usage.prompt_tokens"})
        if sized.pad == 0:
            self.rate.learn(sized.units, int(prompt_tokens))
        off = int(prompt_tokens) - sized.target
        kind = self._kind_of.get(digest)
        if digest in self._from_calibration and sized.pad == 0:
            # Proven or refuted, the answer's count is the truth: its filler joins the pooled rate.
            self._filler[digest] = (sized.units, int(prompt_tokens) - self._from_calibration[digest])
        if (-tolerance <= off <= 0) if below_only else abs(off) <= tolerance:
            if kind and digest in self._from_calibration and sized.pad == 0:
                # Proven: the kind's anchor from now on, as a counted sizing would be.
                self._remember(f"{kind} proven {digest[:16]}", {"units": sized.units, "pad": 0,
                                                                "tokens": int(prompt_tokens), "target": sized.target,
                                                                "kind": kind, "proven_by": "usage.prompt_tokens"})
            return True
        if kind and digest not in self._from_calibration:
            self._refuted.add(kind)
        return False

    def _compute(self, kind: str, build: Callable[[int], Messages], target: int) -> Sized | None:
        """The prompt of ``kind`` computed from the kind's own counted sizing (its template, question
        and needles: another kind's offset is not this one's) and the learned tokens per unit."""
        if not kind or kind in self._refuted:
            return None
        self._load()
        anchors = [r for r in self._sized.values() if r.get("kind") == kind and not r.get("computed") and not r.get("pad")]
        slope = self.rate.tokens_per_unit
        if not anchors or not slope or slope <= 0:
            return None
        anchor = anchors[0]
        units = max(1, int(anchor["units"]) + round((target - int(anchor["tokens"])) / slope))
        messages = build(units)
        self._kind_of[prompt_digest(messages)] = kind
        tokens = round(int(anchor["tokens"]) + slope * (units - int(anchor["units"])))
        return Sized(units, tokens, 0, messages, target, counted=False)

    def calibrate(self) -> Calibration | None:
        """The run's calibration (one per run, shared by xdist workers through the store): the
        calibration haystack's frame and ``calibration_units`` pieces of it, counted. None where the
        sizer calibrates nothing."""
        if self.calibration_units is None:
            return None
        if self.calibration is None:
            self._load()
        if self.calibration is None:
            build = Haystack(plan_haystack(CALIBRATION_SEED, 0.5)).build
            units = self.calibration_units
            frame, tokens = self.count(build(0)), self.count(build(units))
            if tokens <= frame:
                return None  # a tokenizer that counts no filler: nothing to compute from
            found = Calibration(units, frame, tokens)
            self._append({"tokenizer": self.tokenizer, "calibration": dataclasses.asdict(found)})
            self._load()
            self.calibration = self.calibration or found
            self.rate.learn(units, tokens)  # a whole prompt's count, as every other point of the rate
        return self.calibration

    def _calibrated(self, kind: str, build: Callable[[int], Messages], target: int, exact: bool) -> Sized | None:
        """The first prompt of ``kind`` computed over its own empty frame (``build(0)``: system line,
        template, needles, question; one small count, since frames differ by tens of tokens between
        haystacks and tokenizers) and the filler's tokens per unit: the calibration's for an ``exact``
        prompt, else pooled over the calibration and every answer to a calibrated prompt so far (the
        more filler measured, the smaller the rate's error over a 240K-token prompt)."""
        calibration = self.calibrate()
        if calibration is None or kind in self._refuted:
            return None
        slope = calibration.tokens_per_unit
        if not exact and self._filler:
            pooled = [(calibration.units, calibration.tokens - calibration.frame_tokens), *self._filler.values()]
            slope = sum(t for _, t in pooled) / sum(u for u, _ in pooled)
        frame = self.count(build(0))
        units = max(1, round((target - frame) / slope))
        messages = build(units)
        digest = prompt_digest(messages)
        self._kind_of[digest] = kind
        self._from_calibration[digest] = frame
        return Sized(units, frame + round(slope * units), 0, messages, target, counted=False)

    def lane(self, plan: HaystackPlan, prompt_tokens: int, tolerance: int, *, counted: bool = False) -> Sized:
        """A context lane's prompt (``haystack.size_lane``), sized once per run: the integrity
        module's rebuild of a lane gets the very messages the lane was timed with. A lane of a
        size already counted (an earlier repetition's) is computed (:meth:`about`): the lane's
        answer proves it."""
        return self.about(f"lane {plan.seed} {prompt_tokens}±{tolerance}", f"lane {prompt_tokens}±{tolerance}",
                          Haystack(plan).build, prompt_tokens,
                          lambda: size_lane(plan, self.count, prompt_tokens, tolerance, rate=self.rate),
                          counted=counted)

    def recorded(self, key: str) -> bool:
        """Whether the sizing named ``key`` is on record (in this process or the run's file)."""
        return self._recall(key) is not None

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
            if "calibration" in line:
                if self.calibration is None:
                    self.calibration = Calibration(**line["calibration"])
                    self.rate.learn(self.calibration.units, self.calibration.tokens)
            elif "prompt" in line:
                self._counts.setdefault(line["prompt"], int(line["tokens"]))
            elif "sizing" in line:
                self._sized.setdefault(line["sizing"], line)
                if not line.get("computed") and not line.get("pad"):
                    self.rate.learn(int(line["units"]), int(line["tokens"]))  # another worker's count
