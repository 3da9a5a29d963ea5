"""Graders of the multimodal corpus and of media admission: pure functions, text in, verdict out.

Word rules (decided here, property-tested in tests/test_graders_media.py):

- Matching is case-insensitive (NFKC, case-folded) on whole words; a word is a run of letters,
  so "nonalert" does not contain "alert" while "non-alert", "**ALERT**" and "alert's" do.
- A required or forbidden word also matches its regular plural ("alert" -> "alerts",
  "box" -> "boxes", "sky" -> "skies"); other inflections do not ("alerting", "alerted"): they
  name an action, not the thing the item asks about.
- A word the answer itself negates ("bottom half (not the top half)") is not said: it neither
  satisfies a required term nor trips a forbidden one (graders/text.py, :func:`states`).
- A number matches any number of equal value, in digits or words: "5" matches "five", "5.0"
  and "05"; "42" matches "forty-two".
- ``a|b`` in a term lists equal alternatives ("up|upward|upwards").
- An item with an interval must name it — "2–3 s", "2-3 seconds", "from 2 to 3 seconds",
  "between 2 s and 3 s", "00:02–00:03", "2.0 to 3.0 s", "starts at 2 s and ends at 3 s", "between the 2-second and 3-second marks",
  "from second 2 to second 3", "for 1 second, starting at the 2 s mark" — each
  end within the tolerance, and must name no other interval: a hedge between two intervals is a
  wrong answer, not a right one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pytest_qualify.graders import Verdict
from pytest_qualify.graders.text import mentions, normalize, rival_claim, states, tokens, words_to_digits  # noqa: F401 (re-exported word rules)

_NUMBER_RE = re.compile(r"\d+(?:\.\d+)?")

# Interval forms. NUM is a plain number of seconds; TS a clock time (m:ss, h:mm:ss, optional .f).
_NUM = r"\d+(?:\.\d+)?"
_TS = r"\d{1,2}(?::\d{2}){1,2}(?:\.\d+)?"
_UNIT = r"(?:seconds|second|secs|sec|s)\b"
_SEP = r"(?:-|–|—|−|->|→|to|and|until|till|through|thru)"
_INTERVAL_RES = (
    # 00:02–00:03, 0:02 to 0:03
    re.compile(rf"(?<![\d:.])({_TS})\s*{_SEP}\s*({_TS})(?!\d|:\d)"),
    # from 2 to 3 [s], between 2 [s] and 3 [s], between the 2-second and 3-second marks, from
    # second 2 to second 3: the preposition makes the pair an interval
    re.compile(rf"\b(?:from|between)\s+(?:the\s+)?(?:(?:second|sec)\s+)?(?:t\s*=\s*)?({_NUM})\s*-?\s*(?:{_UNIT})?\s*(?:marks?\s*)?"
               rf"{_SEP}\s*(?:the\s+)?(?:(?:second|sec)\s+)?(?:t\s*=\s*)?({_NUM})(?!\d|[.:]\d)"),
    # 2–3 s, 2 s - 3 s, 2.0 to 3.0 seconds: a unit must follow the second number ...
    re.compile(rf"(?<![\d.:])({_NUM})\s*(?:{_UNIT})?\s*{_SEP}\s*({_NUM})\s*{_UNIT}"),
    # ... or the first one (2 s to 3), or precede both (seconds 2 to 3)
    re.compile(rf"(?<![\d.:])({_NUM})\s*{_UNIT}\s*{_SEP}\s*({_NUM})(?!\d|[.:]\d)"),
    re.compile(rf"\b(?:seconds|second|secs|sec)\s+({_NUM})\s*{_SEP}\s*({_NUM})(?!\d|[.:]\d)"),
)
_START_WORDS = r"(?:starts?|started|starting|begins?|began|beginning|appears?|appeared|appearing|shows up|is shown|becomes visible|comes on)"
_END_WORDS = r"(?:ends?|ended|ending|disappears?|disappeared|disappearing|vanish(?:es|ed)?|goes away|is gone|stops?|stopped|until|till)"
_TIME = rf"(?:{_TS}|{_NUM}\s*{_UNIT}|{_NUM})"
_START_END_RE = re.compile(
    rf"\b{_START_WORDS}\b[^.;\d]{{0,30}}?({_TS}|{_NUM})\s*(?:{_UNIT})?[^.;\d]{{0,60}}?\b{_END_WORDS}\b[^.;\d]{{0,30}}?({_TIME})"
)
# A start and a duration: "for 1 second, starting at the 2 s mark", "from 2 s, lasting 1 s".
_FROM = r"(?:starting|beginning|from|at)\s+(?:at\s+)?(?:the\s+)?(?:t\s*=\s*)?"
_FOR = r"(?:for|lasting|lasts)\s+(?:about\s+|roughly\s+)?"
_DURATION_RES = (
    re.compile(rf"\b{_FOR}(?P<dur>{_NUM})\s*{_UNIT}[^.;\d]{{0,30}}?\b{_FROM}(?P<start>{_TS}|{_NUM})(?!\d|[.:]\d)"),
    re.compile(rf"\b{_FROM}(?P<start>{_TS}|{_NUM})\s*(?:{_UNIT})?\s*(?:mark\s*)?[^.;\d]{{0,30}}?\b{_FOR}(?P<dur>{_NUM})\s*{_UNIT}"),
)


def _show(term: str) -> str:
    return "'" + "' or '".join(alt.strip() for alt in term.split("|")) + "'"


def grade_words(content: str | None, required: Iterable[str], forbidden: Iterable[str] = ()) -> Verdict:
    """Every required term present, no forbidden term present; the reason names each failure."""
    if content is None or not content.strip():
        return Verdict.reject("empty answer")
    # A required word the answer negates is not said; a forbidden one it negates ("bottom half,
    # not the top half") is not claimed, nor one named in passing after the answer ("the square
    # appears first, then the triangle"): only one offered as an answer is (graders/text.py).
    required, forbidden = list(required), list(forbidden)
    problems = [f"missing required word {_show(t)}" for t in required if not states(content, t)]
    said = [t for t in required if states(content, t)]
    for term in forbidden:
        if states(content, term) and (not said or rival_claim(content, said, [term])):
            problems.append(f"forbidden word {_show(term)} present")
    if problems:
        return Verdict.reject("; ".join(problems) + f" in answer {_excerpt(content)}")
    return Verdict.accept("all required words present, no forbidden word")


def _excerpt(content: str, limit: int = 120) -> str:
    shown = " ".join(content.split())
    return repr(shown if len(shown) <= limit else shown[: limit - 1] + "…")


def _seconds(value: str) -> float:
    value = value.strip()
    if ":" in value:
        total = 0.0
        for part in value.split(":"):
            total = total * 60 + float(part)
        return total
    return float(re.match(_NUM, value).group(0))  # type: ignore[union-attr]


def find_intervals(content: str) -> list[tuple[float, float]]:
    """Every time interval (start, end) in seconds that the text names, in order of appearance."""
    text = words_to_digits(normalize(content))
    found: list[tuple[int, int, tuple[float, float]]] = []
    for pattern in (*_INTERVAL_RES, _START_END_RE):
        for m in pattern.finditer(text):
            span = m.span()
            if any(span[0] < end and start < span[1] for start, end, _ in found):
                continue  # an earlier, more specific form already read this stretch of text
            found.append((span[0], span[1], (_seconds(m.group(1)), _seconds(m.group(2)))))
    for pattern in _DURATION_RES:
        for m in pattern.finditer(text):
            span = m.span()
            if any(span[0] < end and start < span[1] for start, end, _ in found):
                continue
            start_s = _seconds(m.group("start"))
            found.append((span[0], span[1], (start_s, start_s + float(m.group("dur")))))
    return [pair for _, _, pair in sorted(found)]


def _fmt_s(x: float) -> str:
    return f"{x:g}"


def grade_interval(content: str | None, truth_s: tuple[float, float], tolerance_s: float) -> Verdict:
    """The answer names the true interval (each end within tolerance) and no other interval."""
    if content is None or not content.strip():
        return Verdict.reject("empty answer")
    want = f"{_fmt_s(truth_s[0])}–{_fmt_s(truth_s[1])} s"
    intervals = find_intervals(content)
    if not intervals:
        return Verdict.reject(f"names no time interval (expected {want})")

    def close(pair: tuple[float, float]) -> bool:
        return abs(pair[0] - truth_s[0]) <= tolerance_s + 1e-9 and abs(pair[1] - truth_s[1]) <= tolerance_s + 1e-9

    wrong = [p for p in intervals if not close(p)]
    shown = ", ".join(f"{_fmt_s(a)}–{_fmt_s(b)} s" for a, b in wrong)
    if len(wrong) == len(intervals):
        return Verdict.reject(f"interval {shown} is not {want} (±{_fmt_s(tolerance_s)} s)")
    if wrong:
        return Verdict.reject(f"names {want} but also {shown}: an answer must name one interval")
    return Verdict.accept(f"names {want}")


def grade_item(
    item_id: str,
    content: str | None,
    *,
    required: Sequence[str],
    forbidden: Sequence[str] = (),
    interval_s: tuple[float, float] | None = None,
    tolerance_s: float = 0.5,
    finish_reason: str | None = None,
) -> Verdict:
    """A corpus item's strict assertions; the reason starts with the item id."""
    if content is None or not content.strip():
        return Verdict.reject(f"item {item_id}: empty answer")
    problems = []
    if finish_reason == "length":
        problems.append("answer truncated (finish_reason 'length')")
    words = grade_words(content, required, forbidden)
    if not words.ok:
        problems.append(words.reason)
    if interval_s is not None:
        interval = grade_interval(content, interval_s, tolerance_s)
        if not interval.ok:
            problems.append(interval.reason)
    if problems:
        return Verdict.reject(f"item {item_id}: " + "; ".join(problems))
    return Verdict.accept(f"item {item_id}: all assertions hold")


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
    missing = [t for t in must_name if not mentions(message, t)]
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
