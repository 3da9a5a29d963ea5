"""Context retrieval: does the answer carry the needle's exact value — and no distractor's?

Values are 7-digit numbers or short codes (``QXT-4821``). A number counts when it is written with
its meaning intact — ``1234567``, ``1,234,567``, ``1 234 567``, ``1.234.567`` or ``1234567.00`` —
and never when it is only part of a longer number (``12345678``, ``1234567.5``, ``0001234567``,
``1234567-8``). A code counts in any case, with or without its hyphen. Fences, bold, quotes and
prose around the value are fine. Naming two candidates is a guess, not an answer: an answer that
also names a distractor's value, or any other value of the needle's form ("1234567 or maybe
1234568"), is rejected.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence

from pytest_qualify.graders import Verdict

# Digit groups joined by single separators; a run glued to letters is part of a longer token.
# A run joined to other digits by a hyphen or dash ("1234567-8") is part of a longer identifier.
_NUMBER_RUN = re.compile(
    r"(?<![A-Za-z0-9])(?<!\d[-\u2010-\u2015])\d+(?:[ ,.'_\u00a0\u202f\u2009\u2019]\d+)*(?![A-Za-z0-9]|[-\u2010-\u2015]\d)"
)
_SPACES = " \u00a0\u202f\u2009"


def _interpret(groups: list[str], seps: list[str]) -> list[str]:
    """The numbers a run of digit groups writes: integers as plain digits, anything else
    (a non-zero fraction) as its raw text so it can never equal an integer value."""
    if not seps:
        return [groups[0]]
    if len(set(seps)) == 1 and 1 <= len(groups[0]) <= 3 and all(len(g) == 3 for g in groups[1:]):
        return ["".join(groups)]  # thousands grouping: 1,234,567 / 1 234 567 / 1.234.567
    last = seps[-1]
    head_groups, head_seps = groups[:-1], seps[:-1]
    if last in ".," and (not head_seps or (len(set(head_seps)) == 1 and head_seps[0] != last)):
        head = _interpret(head_groups, head_seps)
        if len(head) == 1 and head[0].isdigit():
            fraction = groups[-1]
            # 1234567.00 means 1234567; 1234567.5 is another number.
            return [head[0]] if set(fraction) == {"0"} else [f"{head[0]}.{fraction}"]
    if any(s in _SPACES for s in seps):
        # Space-separated numbers that are not a thousands grouping are separate numbers.
        out: list[str] = []
        start = 0
        for i, sep in enumerate(seps + [" "]):
            if sep in _SPACES:
                out.extend(_interpret(groups[start : i + 1], seps[start:i]))
                start = i + 1
        return out
    return ["".join(g + s for g, s in zip(groups, seps + [""]))]  # e.g. 1234567,7654321: not an integer


def numbers_in(text: str) -> list[str]:
    """Every number written in ``text``, integers normalised to plain digits."""
    text = unicodedata.normalize("NFKC", text)
    found: list[str] = []
    for match in _NUMBER_RUN.finditer(text):
        run = match.group(0)
        groups = re.findall(r"\d+", run)
        seps = re.findall(r"[^\d]", run)
        found.extend(_interpret(groups, seps))
    return found


def _code_regex(code: str) -> re.Pattern[str]:
    chunks = re.findall(r"[A-Za-z]+|\d+", code)
    body = r"[\s\-_\u2010-\u2015]?".join(re.escape(c) for c in chunks)
    return re.compile(r"(?<![A-Za-z0-9])" + body + r"(?![A-Za-z0-9])", re.I)


def value_in(text: str, value: str) -> bool:
    """Whether ``text`` writes ``value`` (a number by meaning, a code by its characters)."""
    if value.isdigit():
        # Digit for digit: "0001234567" is another identifier, not the value with padding.
        return value in numbers_in(text)
    return bool(_code_regex(value).search(unicodedata.normalize("NFKC", text)))


def _near_miss(text: str, value: str) -> str | None:
    """A candidate one character off the value (a slip, not a guess), for the reason."""
    if value.isdigit():
        candidates = [n for n in numbers_in(text) if n.isdigit()]
    else:
        candidates = [m.replace(" ", "-").upper() for m in re.findall(r"[A-Za-z]{3}[\s\-]?\d{4}", text)]
        candidates = [c if "-" in c else c[:3] + "-" + c[3:] for c in candidates]
    for cand in candidates:
        if len(cand) == len(value):
            diff = [i for i, (a, b) in enumerate(zip(cand, value.upper())) if a != b]
            if len(diff) == 1:
                return f"{cand!r} is one character off"
            if len(diff) == 2 and diff[1] == diff[0] + 1 and cand[diff[0]] == value[diff[1]] and cand[diff[1]] == value[diff[0]]:
                return f"{cand!r} swaps two characters"
    return None


def same_form(text: str, value: str) -> list[str]:
    """Every value of the needle's form the text writes: numbers of as many digits, or codes of
    the same letters-and-digits shape (upper case, hyphenated)."""
    if value.isdigit():
        return [n for n in numbers_in(text) if n.isdigit() and len(n) == len(value)]
    chunks = re.findall(r"[A-Za-z]+|\d+", value)
    # Capitals only: "for 2026" in prose is not a badge, "QXT 4812" is.
    shape = r"[\s\-_\u2010-\u2015]?".join(rf"[A-Z]{{{len(c)}}}" if c.isalpha() else rf"\d{{{len(c)}}}" for c in chunks)
    found = re.findall(r"(?<![A-Za-z0-9])" + shape + r"(?![A-Za-z0-9])", unicodedata.normalize("NFKC", text))
    return ["-".join(re.findall(r"[A-Za-z]+|\d+", f)).upper() for f in found]


def _shown(answer: str) -> str:
    text = " ".join(answer.split())
    return text if len(text) <= 80 else text[:77] + "..."


def grade_needle(
    answer: str | None,
    value: str,
    distractors: Mapping[str, str] | Sequence[str] = (),
    *,
    key: str = "",
) -> Verdict:
    """Accept when ``answer`` carries the needle ``value`` and none of the distractors' values.

    ``distractors`` maps other keys to their values (or is a plain list of values); ``key`` names
    the target needle in the reason.
    """
    if answer is None or not answer.strip():
        return Verdict.reject("empty answer")
    what = f"needle value {value!r}" + (f" (key {key!r})" if key else "")
    items: Iterable[tuple[str, str]] = (
        distractors.items() if isinstance(distractors, Mapping) else (("", v) for v in distractors)
    )
    named = [(k, v) for k, v in items if v != value and value_in(answer, v)]
    if named:
        k, v = named[0]
        also = " as well as the needle" if value_in(answer, value) else ""
        whose = f" (key {k!r})" if k else ""
        return Verdict.reject(f"answer {_shown(answer)!r} gives distractor value {v!r}{whose}{also}, not {what}")
    if value_in(answer, value):
        others = [c for c in same_form(answer, value) if c != value.upper() and not value_in(c, value)]
        if others:
            return Verdict.reject(f"answer {_shown(answer)!r} names {others[0]!r} as well as {what}: two candidates for one value")
        return Verdict.accept(f"found {what}")
    near = _near_miss(answer, value)
    return Verdict.reject(f"answer {_shown(answer)!r} lacks {what}" + (f": {near}" if near else ""))
