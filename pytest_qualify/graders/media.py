"""Graders of the multimodal corpus and of media admission: pure functions, text in, verdict out.

A corpus item's answer is one JSON object under the item's contract (media/manifest.toml,
graders/contract.py): each fact in its own field — a count, a colour, a direction, a label, the
video event and its ``start_s`` / ``end_s`` seconds (within the manifest's tolerance). The grader
reads only that object and compares each field exactly with its accepted forms; a field holding
two candidates ("2 or 3") is a miss, a missing or malformed object a ``format:`` failure.

Media admission: an HTTP refusal is judged by its status and by the terms its error message names
(the limit, the media kind); the count asked at the limit is a whole-reply number; a tool call made
from a video carries the event and its interval as schema-valid arguments.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any

from pytest_qualify.graders import Verdict
from pytest_qualify.graders.contract import Accept, Contract, Form, grade


def grade_item(item_id: str, content: str | None, contract: Contract, *, finish_reason: str | None = None) -> Verdict:
    """A corpus item's answer under its contract; the reason starts with the item id."""
    if finish_reason == "length":
        return Verdict.reject(f"item {item_id}: answer truncated (finish_reason 'length')")
    verdict = grade(content, contract)
    return verdict.reworded(f"item {item_id}: {verdict.reason}")


def count_contract(count: int) -> Contract:
    """The media-admission question at the limit: the whole reply is the number of media sent."""
    return Contract(Form.REPLY, Accept((str(count),), kind="number"), value_hint="the number")


def grade_count(content: str | None, count: int) -> Verdict:
    return grade(content, count_contract(count), name="count")


def _excerpt(content: str, limit: int = 120) -> str:
    shown = " ".join(content.split())
    return repr(shown if len(shown) <= limit else shown[: limit - 1] + "…")


def _fmt_s(x: float) -> str:
    return f"{x:g}"


_WORD_RE = re.compile(r"\d+|[^\W\d_]+")
_NUMBER_WORDS = {w: str(n) for n, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve".split())}


def names(message: str, term: str) -> bool:
    """Whether an error message names ``term``: a number as that number (in digits or a word up to
    twelve), a word as that word or its plural ("image" in "image(s)", "images"); not inside another
    word. An engine's message is not a model's answer: this is the only word rule left here."""
    words = [_NUMBER_WORDS.get(w, w) for w in _WORD_RE.findall(unicodedata.normalize("NFKC", message).casefold())]
    term = term.casefold()
    return term in words or f"{term}s" in words


def _show(term: str) -> str:
    return f"'{term}'"


def grade_refusal(status: int | None, message: str, *, case: str, must_name: Sequence[str] = ()) -> Verdict:
    """An HTTP 400 refusal (never a 5xx, never a 200) whose message names each ``must_name`` term."""
    if status is None:
        return Verdict.reject(f"{case}: no HTTP answer")
    if status == 200:
        return Verdict.reject(f"{case}: accepted with HTTP 200; expected an HTTP 400 refusal")
    if status >= 500:
        return Verdict.reject(f"{case}: HTTP {status} (server error) instead of an HTTP 400 refusal: {_excerpt(message)}")
    if status != 400:
        return Verdict.reject(f"{case}: expected HTTP 400, got HTTP {status}: {_excerpt(message)}")
    missing = [t for t in must_name if not names(message, t)]
    if missing:
        return Verdict.reject(f"{case}: HTTP 400 message {_excerpt(message)} does not name {', '.join(map(_show, missing))}")
    return Verdict.accept(f"{case}: refused with HTTP 400")


def grade_limit_refusal(status: int | None, message: str, *, kind: str, limit: int, sent: int) -> Verdict:
    """Over-limit media: HTTP 400 whose message names the limit, e.g. "At most 4 image(s) ..."."""
    return grade_refusal(status, message, case=f"{sent} {kind}s (limit {limit})", must_name=(str(limit), kind))


def grade_event_call(
    calls: Sequence[tuple[str, str]],
    *,
    function: Mapping[str, Any],
    event: str,
    interval_s: tuple[float, float],
    tolerance_s: float,
) -> Verdict:
    """One call of ``function`` with schema-valid arguments: the event and its start/end seconds."""
    import jsonschema

    name = function["name"]
    if not calls:
        return Verdict.reject(f"no tool call (expected {name})")
    if len(calls) != 1:
        return Verdict.reject(f"expected one call of {name}, got {len(calls)}: {[c[0] for c in calls]}")
    called, raw = calls[0]
    if called != name:
        return Verdict.reject(f"called {called!r} instead of {name!r}")
    try:
        args = json.loads(raw) if raw else {}
    except ValueError as exc:
        return Verdict.reject(f"{name} arguments are not JSON ({exc}): {raw[:120]!r}")
    schema = function.get("parameters") or {"type": "object"}
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(args))
    if error is not None:
        where = ".".join(str(p) for p in error.absolute_path) or "arguments"
        return Verdict.reject(f"{name} {where} violates the tool schema: {error.message}")
    problems = []
    if str(args.get("event", "")).casefold() != event.casefold():
        problems.append(f"event {args.get('event')!r} is not {event!r}")
    for key, truth in zip(("start_s", "end_s"), interval_s):
        value = args.get(key)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or abs(value - truth) > tolerance_s + 1e-9:
            problems.append(f"{key} {value!r} is not {_fmt_s(truth)} ± {_fmt_s(tolerance_s)}")
    if problems:
        return Verdict.reject(f"{name}: " + "; ".join(problems))
    return Verdict.accept(f"{name}({args})")
