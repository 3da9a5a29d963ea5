"""Text normalisation shared by graders: what real models write around an answer."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Iterator
from decimal import Decimal, InvalidOperation

from pytest_qualify.graders import Verdict

FENCE_RE = re.compile(r"```[\w+-]*\n?(.*?)```", re.S)


def strip_fences(text: str) -> str:
    """The inside of code fences (all of them, joined), or the text itself when it has none."""
    blocks = FENCE_RE.findall(text)
    return "\n".join(blocks) if blocks else text


def normalize(text: str) -> str:
    """Case-folded, NFKC, with runs of whitespace collapsed."""
    return re.sub(r"\s+", " ", unicodedata.normalize("NFKC", text)).strip().casefold()


def contains_answer(content: str | None, accepted: Iterable[str]) -> Verdict:
    """Whether the answer holds one of the accepted forms as a whole word (case/space-insensitive)."""
    accepted = list(accepted)  # iterated twice: once to match, once for the reason
    if content is None or not content.strip():
        return Verdict.reject("empty answer")
    text = normalize(content)
    for form in accepted:
        if re.search(r"(?<!\w)" + re.escape(normalize(form)) + r"(?!\w)", text):
            return Verdict.accept(f"found {form!r}")
    shown = content.strip().replace("\n", " ")
    return Verdict.reject(f"answer {shown[:120]!r} holds none of {list(accepted)}")


# -- numbers, phrases and JSON inside free text ----------------------------------------------------

# A number as people and models write it: optional sign, thousands commas, decimals ("1,299.50").
NUMBER_RE = re.compile(r"(?<![\d.])[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?![\d])")
# What may stand between the parts of a phrase or code ("7Q-5531", "7q 5531", "7Q–5531").
PHRASE_GAP = r"[\s\-\u2010-\u2015_.:/]*"


def parse_number(text: str) -> Decimal | None:
    """The value of one number as written ("1,299.50", "+3", "3.0"), or None when it is not one."""
    text = text.strip()
    if not NUMBER_RE.fullmatch(text):
        return None
    try:
        return Decimal(text.replace(",", ""))
    except InvalidOperation:
        return None


def numbers_in(text: str) -> list[Decimal]:
    """Every number written in the text, as exact decimals (so 3 == 3.0 == 3.00)."""
    from decimal import Decimal

    # NFKC leaves the typographic minus alone; people write it for negative numbers ("−80 °C").
    text = unicodedata.normalize("NFKC", text).replace("\u2212", "-")
    return [Decimal(m.group().replace(",", "")) for m in NUMBER_RE.finditer(text)]


def contains_number(content: str | None, value: "int | float | str") -> Verdict:
    """Whether the text writes this number, in any equal form ("2350", "2,350", "2350.00")."""
    from decimal import Decimal

    if content is None or not content.strip():
        return Verdict.reject("empty answer")
    wanted = Decimal(str(value).replace(",", ""))
    if wanted in numbers_in(content):
        return Verdict.accept(f"found {value}")
    shown = content.strip().replace("\n", " ")
    return Verdict.reject(f"answer {shown[:120]!r} lacks the number {value}")


def phrase_pattern(phrase: str) -> re.Pattern[str]:
    """A case-insensitive whole-word pattern for a phrase whose separators may vary."""
    chunks = [re.escape(c) for c in re.split(r"[\W_]+", normalize(phrase)) if c]
    return re.compile(r"(?<![^\W_])" + PHRASE_GAP.join(chunks) + r"(?![^\W_])")


def contains_phrase(content: str | None, phrase: str) -> bool:
    """Whether the text holds the phrase as whole words, ignoring case and separators."""
    if not content or not re.search(r"[^\W_]", phrase):
        return False
    return phrase_pattern(phrase).search(normalize(content)) is not None


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
