"""Word rules and text helpers that graders/media.py, graders/triage.py and graders/diff.py still use.

The modules graded under an answer contract (graders/contract.py) read only their slot and use
none of the word rules below (negation windows, rival candidates, hedges); those remain only until
the media and triage graders move to the contract too. ``parse_number`` (the tool grader) and
``json_objects`` / ``find_json_object`` (a call written as text; triage) are plain parsers.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Iterator, Sequence
from decimal import Decimal, InvalidOperation


FENCE_RE = re.compile(r"```[\w+-]*\n?(.*?)```", re.S)


def strip_fences(text: str) -> str:
    """The inside of code fences (all of them, joined), or the text itself when it has none."""
    blocks = FENCE_RE.findall(text)
    return "\n".join(blocks) if blocks else text


def normalize(text: str) -> str:
    """Case-folded, NFKC, with runs of whitespace collapsed."""
    return re.sub(r"\s+", " ", unicodedata.normalize("NFKC", text)).strip().casefold()


# -- words, numbers and who states what --------------------------------------------------------------
# The rule these helpers implement for media and triage: words match as words, numbers as numbers, a mention the answer itself negates ("not the top half") or ranks below
# the answer ("Saturn is only the second largest") is not a claim, and two candidates for one fact
# are a miss.

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
_NUMBER_TOKEN_RE = re.compile(r"-?\d+(?:\.\d+)?")
# What ends a clause: a negation or a ranking does not reach across it.
# A full stop ends a clause only at the end of a word that is no title ("Dr. Okoro", "2.5 s").
_CLAUSE_END = re.compile(r"(?<!\bdr)(?<!\bmr)(?<!\bmrs)(?<!\bms)(?<!\bst)(?<!\bvs)(?<!\bno)\.(?=\s|$)|[;:!?()\[\]{},\n\u2014]|\s-\s")
_NEGATION_BEFORE = re.compile(
    r"(?:\b(?:not|no|never|neither|nor|unlike|except|excluding|without|isn't|isnt|aren't|wasn't|"
    r"rather than|instead of|other than|as opposed to)|n't)"
    r"\s+(?:(?:the|a|an|in|on|at|of|to|for|it|its|it's|is|was|be|moving|move|moves|going|go|goes)\s+){0,3}"
    # ... and the rest of a negated list: "not Lyon or Marseille", "(not up or down)"
    r"(?:[^\W\d_]+(?:[\s-][^\W\d_]+)?(?:\s+(?:or|nor|and)\s+|\s*,\s*))*$"
)
_RANKED_BELOW_AFTER = re.compile(
    r"^[\s*_`'\"]*(?:(?:is|was|'s|ranks|comes|being|would be)\s+)?(?:(?:only|just|merely|actually)\s+)?"
    r"(?:(?:the|a)\s+)?(?:(?:distant|close|clear)\s+)?"
    r"(?:second|2nd|third|3rd|runner[- ]up|not\b|isn't\b|smaller|smallest|wrong|incorrect)"
)
_HEDGE_RE = re.compile(r"\b(?:or|maybe|perhaps|possibly|probably|either)\b|/")
# A change of mind reaches across sentences: "Jupiter. Actually, wait: Saturn."
_CHANGE_OF_MIND_RE = re.compile(r"\b(?:actually|wait|or rather|correction|i mean|on second thought)\b")
_SENTENCE_END = re.compile(r"(?<!\bdr)(?<!\bmr)(?<!\bms)(?<!\bmrs)(?<!\bst)(?<!\bvs)(?<!\bno)[.;!](?:\s|$)|\n")  # not "?": "Paris? Or Lyon?" is one hedge
# Nothing but markdown around a term in its clause: "Bottom. **Top**" offers it as an answer.
_BARE_RE = re.compile(r"[\s*_`'\"~>#-]*")
# Two terms written side by side as a list of candidates: "blue, red", "blue and red", "blue/red".
_JOINED_RE = re.compile(r"^[\s*_`'\",/()\[\]-]*(?:(?:and|or|&|plus)[\s*_`'\",/()\[\]-]*)?$")


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


def is_number(token: str) -> bool:
    return _NUMBER_TOKEN_RE.fullmatch(token) is not None


def _plurals(word: str) -> set[str]:
    forms = {word, word + "s", word + "es"}
    if word.endswith("y") and len(word) > 1:
        forms.add(word[:-1] + "ies")
    return forms


def term_spans(text: str, term: str) -> list[tuple[int, int]]:
    """Where one term (a word, a number or a phrase of them) stands in ``prepared`` text.

    Words match whole, the last one also in its regular plural ("circle" -> "circles"); numbers
    match by value ("5" = "5.0" = "five", "-80" never "80").
    """
    parts = TOKEN_RE.findall(prepared(term))
    if not parts:
        return []
    found = [(m.group(0), m.start(), m.end()) for m in TOKEN_RE.finditer(text)]
    n = len(parts)
    spans = []
    for start in range(len(found) - n + 1):
        window = found[start : start + n]
        for i, (want, (got, _, _)) in enumerate(zip(parts, window)):
            if is_number(want):
                ok = is_number(got) and float(got) == float(want)
            elif i == n - 1:
                ok = got in _plurals(want)
            else:
                ok = got == want
            if not ok:
                break
        else:
            spans.append((window[0][1], window[-1][2]))
    return spans


def disowned(text: str, start: int, end: int) -> bool:
    """Whether the answer itself takes back the mention at ``text[start:end]``: negated in its clause
    ("not the top half", "rather than Saturn") or ranked below the answer ("Saturn is only the
    second largest")."""
    before = _CLAUSE_END.split(text[max(0, start - 80) : start])[-1]
    after = _CLAUSE_END.split(text[end : end + 80])[0]
    return bool(_NEGATION_BEFORE.search(before) or _RANKED_BELOW_AFTER.match(after))


def mentions(text: str, term: str) -> bool:
    """Whether ``text`` names ``term`` at all (``a|b`` lists alternatives)."""
    ready = prepared(text)
    return any(term_spans(ready, alt.strip()) for alt in term.split("|"))


def states(text: str, term: str) -> bool:
    """Whether ``text`` names ``term`` as a claim: a mention it negates or ranks below does not count."""
    ready = prepared(text)
    return any(not disowned(ready, s, e) for alt in term.split("|") for s, e in term_spans(ready, alt.strip()))


def _claims(ready: str, terms: Iterable[str]) -> list[tuple[int, int, str]]:
    """(start, end, term) of every claim of these terms in ``prepared`` text, in order."""
    spans = [(s, e, term) for term in terms for alt in term.split("|")
             for s, e in term_spans(ready, alt.strip()) if not disowned(ready, s, e)]
    return sorted(spans)


def rival_claim(content: str, answers: Iterable[str], rivals: Iterable[str]) -> str | None:
    """Why a rival candidate counts as a second answer, or None when it is only mentioned.

    A rival counts when it comes before every answer term (the answer leads with it), stands alone
    in its clause ("Bottom. Top."), stands side by side with one ("blue, red", "Jupiter or
    Saturn"), or is offered with a hedge ("maybe",
    "or" in the same sentence; "actually", "wait" anywhere). Named after the answer in passing
    ("Jupiter, followed by Saturn"; "4 green squares and 2 red ones") it is context, not a claim.
    """
    ready = prepared(content)
    return rival_reason(ready, _claims(ready, answers), _claims(ready, rivals))


def rival_reason(text: str, said: Sequence[tuple[int, int, str]], others: Sequence[tuple[int, int, str]]) -> str | None:
    """:func:`rival_claim` over claims already found in ``text``: (start, end, term), sorted."""
    ready = text
    if not said:
        return None
    first = said[0][0]
    for start, end, rival in others:
        if start < first:
            return f"names {rival!r} before {said[0][2]!r}"
        before = _CLAUSE_END.split(ready[max(0, start - 80) : start])[-1]
        after = _CLAUSE_END.split(ready[end : end + 80])[0]
        if _BARE_RE.fullmatch(before) and _BARE_RE.fullmatch(after):
            return f"names {rival!r} on its own as well as {said[0][2]!r}"
        for a_start, a_end, answer in said:
            lo, hi = (a_end, start) if a_end <= start else (end, a_start)
            between = ready[lo:hi] if lo <= hi else ""
            if (_JOINED_RE.match(between) or _CHANGE_OF_MIND_RE.search(between)
                    or (_HEDGE_RE.search(between) and not _SENTENCE_END.search(between))):
                return f"names {rival!r} as well as {answer!r}"
    return None


# -- one number, and JSON inside free text -----------------------------------------------------------

# A number as people and models write it: optional sign, thousands commas, decimals ("1,299.50").
NUMBER_RE = re.compile(r"(?<![\d.])[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?![\d])")


def parse_number(text: str) -> Decimal | None:
    """The value of one number as written ("1,299.50", "+3", "3.0"), or None when it is not one."""
    text = text.strip()
    if not NUMBER_RE.fullmatch(text):
        return None
    try:
        return Decimal(text.replace(",", ""))
    except InvalidOperation:
        return None


class JsonNotFound(ValueError):
    """No JSON object could be read from the text; the message says why (absent, truncated)."""


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


def find_json_object(text: str | None) -> dict:
    """The first JSON object in the text: inside code fences or with prose around it.

    Raises :class:`JsonNotFound` naming what went wrong, so a truncated object is reported as
    truncated rather than as missing.
    """
    if text is None or not text.strip():
        raise JsonNotFound("empty answer")
    for candidate in (strip_fences(text), text):
        for value in json_objects(candidate):
            return value
    shown = text.strip().replace("\n", " ")
    if any(_unclosed(text, i) for i, ch in enumerate(text) if ch == "{"):
        raise JsonNotFound(f"truncated JSON in answer {shown[-80:]!r}")
    raise JsonNotFound(f"no JSON object in answer {shown[:120]!r}")


def _unclosed(text: str, start: int) -> bool:
    """Whether the object opened at ``start`` is still open when the text ends (cut short)."""
    depth, in_string, escaped = 0, False, False
    for ch in text[start:]:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
            if depth == 0:
                return False
    return depth > 0
