"""Plain text parsers the tool grader uses: words and numbers of a place name, one number as
written, the JSON objects of a call written as text.

No grader reads free prose for its meaning: every item has an answer contract
(graders/contract.py) and its grader reads only the slot. The negation windows, rival candidates
and hedge words that once lived here are gone with it.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from decimal import Decimal, InvalidOperation


def normalize(text: str) -> str:
    """Case-folded, NFKC, with runs of whitespace collapsed."""
    return re.sub(r"\s+", " ", unicodedata.normalize("NFKC", text)).strip().casefold()


_UNITS = {
    "zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
    "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14,
    "fifteen": 15, "sixteen": 16, "seventeen": 17, "eighteen": 18, "nineteen": 19,
}
_TENS = {"twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90}
# Letter boundaries, not \b: "_one_" (markdown emphasis) holds the word "one".
_COMPOUND_RE = re.compile(r"(?<![^\W\d_])(" + "|".join(_TENS) + r")[\s-](" + "|".join(k for k, v in _UNITS.items() if 0 < v < 10) + r")(?![^\W\d_])")
_NUMBER_WORD_RE = re.compile(r"(?<![^\W\d_])(" + "|".join([*_UNITS, *_TENS]) + r")(?![^\W\d_])")
# A dash or minus sign written before a number, not between two: "–80 °C", "−80" mean -80; "2–3" is a range.
_MINUS_RE = re.compile(r"(?<![\w.])[\u2212\u2012\u2013\u2014\ufe63\uff0d](?=\d)")
# A token: a signed or plain number, or a run of letters ("non-alert" is two words, "nonalert" one).
TOKEN_RE = re.compile(r"(?<![\w.])-\d+(?:\.\d+)?|\d+(?:\.\d+)?|[^\W\d_]+")


def words_to_digits(text: str) -> str:
    """Number words become digits: "forty-two" -> "42", "three" -> "3" (text already case-folded)."""
    text = _COMPOUND_RE.sub(lambda m: str(_TENS[m.group(1)] + _UNITS[m.group(2)]), text)
    return _NUMBER_WORD_RE.sub(lambda m: str(_UNITS.get(m.group(1), _TENS.get(m.group(1), 0))), text)


def prepared(text: str) -> str:
    """The text as the word rules read it: NFKC, case-folded, typographic minus as "-", number words as digits."""
    text = _MINUS_RE.sub("-", unicodedata.normalize("NFKC", text)).replace("\u2019", "'")
    return words_to_digits(normalize(text))


def tokens(text: str) -> list[str]:
    """Words (letter runs) and numbers of a text, normalised as :func:`prepared` does."""
    return TOKEN_RE.findall(prepared(text))


# Digit grouping as SI and French typography write it: a thin space (U+2009), a narrow no-break
# space (U+202F) or a no-break space (U+00A0) between groups of three digits. One separator
# throughout, 1-3 digits then groups of exactly three: "1 234 567" is the number "1,234,567"
# is. A plain space, a group of another size ("12 34"), a trailing short group ("1 234 56") or two
# separators mixed keep the digits apart, so two separate numbers never merge into one.
GROUP_SPACES = "\u2009\u202f\u00a0"
_SPACE_GROUPED_RE = re.compile(
    r"(?<![\d.,])(?<!\d[" + GROUP_SPACES + r"])\d{1,3}([" + GROUP_SPACES + r"])\d{3}(?:\1\d{3})*(?!\d|\1\d|[" + GROUP_SPACES + r"]\d)")


def space_groups_as_commas(text: str) -> str:
    """Digits grouped by a thin, narrow no-break or no-break space, written with commas instead
    ("1\u202f234\u202f567" -> "1,234,567"), so they read as one number wherever a comma-grouped one
    does; every other character is left as it is. Apply before NFKC, which turns those spaces into
    plain ones."""
    return _SPACE_GROUPED_RE.sub(lambda m: m.group(0).replace(m.group(1), ","), text)


# Digit grouping by dots (German, Spanish, Brazilian usage: "6.120.457", "6.120,5"), read as grouping
# only where no dot can be a decimal point: two or more dot groups of three, or one or more followed
# by a decimal comma. "6.120" alone stays what it is everywhere else: a decimal point ("6.12").
# The whole run must be the number: a digit, dot or comma glued to either end leaves it as written
# ("1.234.5678", "6.120.457.1", "1,6.120.457").
_DOT_GROUPED_RE = re.compile(r"(?<![\d.,])(\d{1,3}(?:\.\d{3})+)(?:,(\d+))?(?![\d]|[.,]\d)")


def _dot_group(m: re.Match[str]) -> str:
    whole, decimals = m.group(1), m.group(2)
    if decimals is None and whole.count(".") < 2:
        return m.group(0)  # "6.120": a decimal point as much as a grouping, so left as written
    return whole.replace(".", ",") + (f".{decimals}" if decimals is not None else "")


def dot_groups_as_commas(text: str) -> str:
    """Digits grouped by dots where no dot can be a decimal point, written as commas group them
    ("6.120.457" -> "6,120,457", "6.120,5" -> "6,120.5"); "6.120" and every other character are
    left as they are."""
    return _DOT_GROUPED_RE.sub(_dot_group, text)


def groups_as_commas(text: str) -> str:
    """Every unambiguous digit grouping (:func:`space_groups_as_commas`, :func:`dot_groups_as_commas`)
    written with commas, so it reads as one number wherever a comma-grouped one does."""
    return dot_groups_as_commas(space_groups_as_commas(text))


# A number as people and models write it: optional sign, thousands commas, decimals ("1,299.50").
NUMBER_RE = re.compile(r"(?<![\d.])[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?![\d])")


def parse_number(text: str) -> Decimal | None:
    """The value of one number as written ("1,299.50", "1 299.50" with a thin space, "1.299,50",
    "+3", "3.0"), or None when it is not one."""
    text = groups_as_commas(text).strip()
    if not NUMBER_RE.fullmatch(text):
        return None
    try:
        return Decimal(text.replace(",", ""))
    except InvalidOperation:
        return None




def json_objects(text: str) -> Iterator[dict]:
    """Every JSON object that can be read starting at some "{" of the text, in order."""
    import json

    decoder = json.JSONDecoder()
    for start in (i for i, ch in enumerate(text) if ch == "{"):
        try:
            value, _ = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            yield value
