"""The answer contract: every item says where its answer goes and in what form, and a grader reads
only that slot, exactly.

A contract has one of three forms (PROTOCOL.md, "answer contract"), stated in the item's prompt
and written in its fixture:

- ``reply``: the whole reply is one value (a word, a number, a label). Formatting noise is
  tolerated — markdown emphasis, quotes, one code fence, trailing punctuation, a preamble line
  ending in a colon, a leading ``Answer:`` label, math notation around the value — any other
  content is not.
- ``line``: the reply ends with one line ``ANSWER: <value>``. Working before it is free and never
  read; the value is cleaned of the same noise as a whole reply.
- ``json``: the reply is one JSON object (a code fence and one line of prose before it
  tolerated) valid under the item's JSON Schema; each fact has its own field.

The rule all three follow: accept what a reasonable reader of the prompt accepts as following it;
reject anything that could hide a second candidate or a retraction. So the final line's label is
read in any case and with markdown emphasis around it ("Answer: 42", "**ANSWER:** 42", "**Answer:**
42"), and "Final answer:", "The answer is:" and "The final answer is:" are the same label; a value in math notation ("$42$", "\\(42\\)",
"\\[42\\]", "\\boxed{42}", "$\\boxed{42}$") reads as its content; one line of prose before a single
JSON object is tolerated whether or not it ends in a colon. But every labelled line is an answer
line (a second one anywhere is a format failure), a wrapper holds one value ("$42$ or $43$" is two
candidates), and text after the answer line or after the JSON object — where a retraction goes —
is a format failure.

A slot that is missing or malformed (no ``ANSWER`` line, two of them, text after it, a reply of
several lines, JSON that does not parse or does not validate) is a *format* failure: its reason
starts with ``format:`` and it is counted apart from a wrong fact. A slot that holds the wrong
value, or two candidates ("2 or 3", "Paris, Lyon"), is a *miss*. A length band measures what the
contract reads (:func:`measured_span`), never the working a ``line`` prompt invites.

What a slot accepts is data (:class:`Accept`): the accepted forms and the normalisation rules —
text or number, case, separators, thousands separators, units, a tolerance. Nothing else is
normalised, and nothing outside the slot is graded. Three spellings read alike everywhere, since
none can hide a second candidate: answer tags round the whole value ("<answer>42</answer>"),
digits grouped by a thin or no-break space as by commas ("1 234 567"), or by dots where no dot can
be a decimal point ("6.120.457", "6.120,5"; "6.120" alone stays a decimal), and a listed unit written
out or as a symbol ("-80 degrees C" or "-80 degC" for "°C"; the spellings are data, UNIT_SPELLINGS). Line ends are not content: a CRLF or CR reply
reads as its LF form, and trailing whitespace never changes a verdict.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from enum import StrEnum
from typing import Any

from pytest_qualify.graders import FORMAT, SlotRead, Verdict
from pytest_qualify.graders.text import groups_as_commas

class Form(StrEnum):
    """Where a contract's slot is: the whole reply, its final ``ANSWER:`` line, or one JSON object."""

    REPLY = "reply"
    LINE = "line"
    JSON = "json"


FORMS = tuple(f.value for f in Form)  # the words, as fixture data and error messages spell them


class FormatError(ValueError):
    """The slot is missing or malformed; the message says how (without the ``format:`` prefix)."""


def format_failure(why: str) -> Verdict:
    """A format failure: its kind is the field, ``format:`` the first word of its reason."""
    return Verdict.reject(f"{FORMAT}: {why}", FORMAT)


# -- accepted forms and normalisation rules (data) --------------------------------------------------


@dataclass(frozen=True)
class Accept:
    """What one slot accepts. ``kind`` "text": the slot equals one of ``forms`` after Unicode NFKC,
    whitespace collapsed, case folded (unless ``case``), and — with ``separators`` — hyphens,
    underscores and spaces read alike ("7Q-5531" = "7Q 5531"). ``kind`` "number": the slot is one
    number (a typographic minus reads as minus; "2,350" reads as 2350 when ``thousands``; one of
    ``units`` may follow or precede it: "2,350 EUR", "€2,350") within ``tolerance`` of one of
    ``forms``. A string value, and each text form, is first cleaned of formatting noise
    (:func:`clean_value`: "Blue." and '"Blue"' read as "Blue"); a tilde never is noise ("~42" is
    a hedge)."""

    forms: tuple[str, ...]
    kind: str = "text"
    case: bool = False
    separators: bool = False
    thousands: bool = True
    units: tuple[str, ...] = ()
    tolerance: float = 0.0

    def __post_init__(self) -> None:
        if not self.forms:
            raise ValueError("an accepted slot needs at least one form")
        if self.kind not in ("text", "number"):
            raise ValueError(f"kind must be 'text' or 'number', not {self.kind!r}")
        if self.kind == "number":
            for form in self.forms:
                if _number(form, self) is None:
                    raise ValueError(f"number form {form!r} is not a number")

    @classmethod
    def of(cls, raw: "Mapping[str, Any] | Sequence[Any] | str | int | float") -> "Accept":
        """From fixture data: a bare value or list of forms (text), or a table with ``accept`` and
        the rules (``kind``, ``case``, ``separators``, ``thousands``, ``units``, ``tolerance``)."""
        if isinstance(raw, Mapping):
            forms = raw.get("accept", raw.get("forms"))
            if forms is None:
                raise ValueError(f"a slot table needs 'accept': {dict(raw)!r}")
            forms = forms if isinstance(forms, (list, tuple)) else [forms]
            unknown = set(raw) - {"accept", "forms", "kind", "case", "separators", "thousands", "units", "tolerance"}
            if unknown:
                raise ValueError(f"unknown slot rule(s) {sorted(unknown)}")
            kind = raw.get("kind") or ("number" if all(isinstance(f, (int, float)) and not isinstance(f, bool) for f in forms) else "text")
            return cls(tuple(str(f) for f in forms), kind=kind, case=bool(raw.get("case", False)),
                       separators=bool(raw.get("separators", False)), thousands=bool(raw.get("thousands", True)),
                       units=tuple(raw.get("units", ())), tolerance=float(raw.get("tolerance", 0.0)))
        forms = raw if isinstance(raw, (list, tuple)) else [raw]
        kind = "number" if all(isinstance(f, (int, float)) and not isinstance(f, bool) for f in forms) else "text"
        return cls(tuple(str(f) for f in forms), kind=kind)

    @property
    def shown(self) -> str:
        return " or ".join(repr(f) for f in self.forms)


def _nfkc(text: str) -> str:
    """NFKC, after digits grouped by thin or no-break spaces, or by dots where no dot can be a
    decimal point ("6.120.457", "6.120,5"), are written with commas (NFKC would make those spaces
    plain ones, and "1 234" two numbers)."""
    return unicodedata.normalize("NFKC", groups_as_commas(text))


def _fold(text: str, accept: Accept) -> str:
    text = _nfkc(text)
    if accept.separators:
        text = re.sub(r"[\s_\-\u2010-\u2015\u2212]+", " ", text)
    text = re.sub(r"\s+", " ", text).strip()
    return text if accept.case else text.casefold()


_MINUS = "\u2212\u2012\u2013\u2014\ufe63\uff0d"
_NUMBER_RE = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|[-+]?\.\d+")


def _number(text: str, accept: Accept) -> Decimal | None:
    """The slot read as one number under the slot's rules, or None when it is not one number."""
    text = _without_unit(_nfkc(text).strip(), accept.units)
    text = re.sub(f"^[{_MINUS}]", "-", text)
    if not re.fullmatch(_NUMBER_RE, text):
        return None
    if "," in text:
        if not accept.thousands:
            return None
        text = text.replace(",", "")
    try:
        return Decimal(text)
    except InvalidOperation:
        return None


# How a unit is spelt, as data: each written-out spelling and the symbol it reads as. A unit written
# out or as a symbol reads alike: "degrees C", "deg. C", "deg C", "degC", "°C", "℃" and "° C" are one
# unit, "degrees" and "°" another, "degF", "degrees Fahrenheit" and "°F" a third. Spellings become
# symbols (a spelling is a whole word: "degCC" and "degK" are none), then case, spaces and periods go.
UNIT_SPELLINGS: Mapping[str, tuple[str, ...]] = {
    "°C": ("degC",),                             # pint's and UDUNITS' spelling
    "°F": ("degF",),
    "°": ("degrees", "degree", "deg"),
    "C": ("celsius", "centigrade"),
    "F": ("fahrenheit",),
}
_UNIT_SYMBOL = {spelling.casefold(): symbol for symbol, spellings in UNIT_SPELLINGS.items() for spelling in spellings}
_UNIT_SPELLING_RE = re.compile(
    r"(?<![^\W\d_])(?:" + "|".join(sorted(map(re.escape, _UNIT_SYMBOL), key=len, reverse=True)) + r")(?![^\W\d_])",
    re.I)
# The slot split round its one number: what comes before it, the number, what comes after it.
_UNIT_SPLIT_RE = re.compile(f"(?P<pre>\\D*?)\\s*(?P<num>[-+{_MINUS}]?\\.?\\d[\\d,.]*)\\s*(?P<post>\\D*)")


def _unit_key(unit: str) -> str:
    text = _UNIT_SPELLING_RE.sub(lambda m: _UNIT_SYMBOL[m.group(0).casefold()], unicodedata.normalize("NFKC", unit))
    return re.sub(r"[\s.]+", "", text).casefold()


def _without_unit(text: str, units: Sequence[str]) -> str:
    """The number without one listed unit before or after it ("2,350 EUR", "€2,350", "-80 degrees
    C" for "°C"); the text unchanged when anything else is round the number. A unit holds no digit,
    so no second candidate can hide in it."""
    if not units:
        return text
    m = _UNIT_SPLIT_RE.fullmatch(text)
    if m is None:
        return text
    pre, num, post = m.group("pre"), m.group("num"), m.group("post")
    if pre and post or not (pre or post):
        return text
    return num if _unit_key(pre or post) in {_unit_key(u) for u in units} else text


def numbers_in(text: str) -> list[str]:
    """Every number written in a slot (to tell a hedge, "2 or 3", from a malformed slot)."""
    return _NUMBER_RE.findall(re.sub(f"[{_MINUS}](?=\\d)", "-", _nfkc(text)))


def compare(value: Any, accept: Accept, name: str = "answer") -> Verdict:
    """The slot's value against its accepted forms, exactly under the slot's rules. A JSON number
    or string is read alike; a list, an object, a boolean or null is never a scalar value."""
    if value is None or isinstance(value, (list, dict, bool)):
        return format_failure(f"{name} must be one value, got {json.dumps(value)}")
    raw = format(value, "f") if isinstance(value, Decimal) else str(value)
    if isinstance(value, float) and value.is_integer():
        raw = str(int(value))
    if isinstance(value, str):
        # A JSON field's string, like a reply's slot, may carry formatting noise ("Blue.", '"OPEN"').
        raw = clean_value(_newlines(raw), marks=False) if raw.strip() else raw
    if not raw.strip():
        return format_failure(f"{name} is empty")
    if accept.kind == "number":
        got = _number(raw, accept)
        if got is None:
            found = numbers_in(raw)
            if not found:
                return format_failure(f"{name} {raw!r} is not a number")
            if len(found) > 1:
                return Verdict.reject(f"{name} {raw!r} holds {len(found)} candidates ({', '.join(found)}), expected {accept.shown}")
            return Verdict.reject(f"{name} {raw!r} holds more than the number, expected {accept.shown}")
        tolerance = Decimal(str(accept.tolerance))
        if any(abs(got - _number(f, accept)) <= tolerance for f in accept.forms):  # type: ignore[operator]
            return Verdict.accept(f"{name} {raw!r}")
        within = f" (tolerance {accept.tolerance:g})" if accept.tolerance else ""
        return Verdict.reject(f"{name} is {raw!r}, expected {accept.shown}{within}")
    if _fold(raw, accept) in {_fold(clean_value(f), accept) for f in accept.forms}:
        return Verdict.accept(f"{name} {raw!r}")
    return Verdict.reject(f"{name} is {raw!r}, expected {accept.shown}")


# -- finding the slot -------------------------------------------------------------------------------

_FENCE_RE = re.compile(r"^(```|~~~)[\w+.-]*[ \t]*\n(.*?)\n?\1$", re.S)
# No "~" here: "~42" is a hedge and "~~42~~" a struck-out value, never noise around one.
_NOISE_EDGE = "*_`\"'\u201c\u201d\u2018\u2019\u00ab\u00bb \t"
_TRAILING_PUNCT = ".!;,"
# "Answer:", "Final answer:", "The answer is:", "The final answer is:": one label, with or without "final".
_LABEL_RE = re.compile(r"^(?:the\s+)?(?:final\s+)?answer(?:\s+is)?\s*[*_]*\s*:\s*", re.I)
_LIST_MARK_RE = re.compile(r"^(?:[-*+>]|#{1,6})\s+")
# A value inside the angle brackets of a template's placeholder ("ANSWER: <42>"): the brackets are
# copied from a prompt's notation, not part of the value. One pair, around the whole value only.
_PLACEHOLDER_RE = re.compile(r"^<([^<>]+)>$")
# Answer tags round a whole value ("<answer>42</answer>", "<final_answer>…</final_answer>"): what
# some chat templates (Hunyuan's) and many prompts put round the answer. A pair is read as its
# content only when it wraps the whole value and holds no answer tag of its own, so
# "<answer>42</answer> <answer>43</answer>" stays two values; its block over three lines
# ("<answer>\n42\n</answer>") is that one line.
_ANSWER_TAGS = r"answer|final[_ -]?answer|final|response|result|output"
_ANSWER_TAG_RE = re.compile(
    rf"^<\s*({_ANSWER_TAGS})\s*>[ \t]*((?:(?!<\s*/?\s*(?:{_ANSWER_TAGS})\s*>).)*?)[ \t]*<\s*/\s*\1\s*>$", re.I | re.S)
_ANSWER_BLOCK_RE = re.compile(
    rf"^([^\n<]*?)<\s*({_ANSWER_TAGS})\s*>[ \t]*\n?[ \t]*((?:(?!<\s*/?\s*(?:{_ANSWER_TAGS})\s*>)[^\n])*?)[ \t]*\n?[ \t]*<\s*/\s*\2\s*>([ \t*_`]*)$",
    re.I | re.M)


def _one_line_answer_tags(text: str) -> str:
    """An answer-tag block over several lines, holding one line, written as one line."""
    return _ANSWER_BLOCK_RE.sub(lambda m: f"{m.group(1)}<{m.group(2)}>{m.group(3)}</{m.group(2)}>{m.group(4)}", text)


def _unfence(text: str) -> str:
    m = _FENCE_RE.match(text.strip())
    return m.group(2).strip() if m else text.strip()


_INVISIBLE = dict.fromkeys(map(ord, "\u200b\u200c\u200d\u2060\ufeff"))


def _newlines(text: str) -> str:
    """CRLF and CR line ends read as LF, and zero-width characters (a BOM, a zero-width space) are
    dropped: neither is ever part of a slot."""
    return text.replace("\r\n", "\n").replace("\r", "\n").translate(_INVISIBLE)


def _drop_preamble(text: str) -> str:
    """A first line ending in a colon ("Here is the answer:") is a preamble, not content."""
    lines = text.strip().split("\n")
    if len(lines) > 1 and lines[0].rstrip().rstrip("*_").endswith(":"):
        return "\n".join(lines[1:]).strip()
    return text.strip()


# Math notation around a whole value: the value is what it renders as. Each pair wraps the whole
# value and holds no delimiter of its own inside, so "$42$ or $43$" is two values, never one.
_MATH_PAIRS = (
    re.compile(r"^\$\$((?:(?!\$).)+)\$\$$", re.S),
    re.compile(r"^\$([^$]+)\$$", re.S),
    re.compile(r"^\\\(((?:(?!\\[()]).)+)\\\)$", re.S),
    re.compile(r"^\\\[((?:(?!\\[\[\]]).)+)\\\]$", re.S),
)
# Commands whose one argument is the value as rendered: a box, upright or bold text.
_MATH_COMMANDS = ("boxed", "fbox", "text", "textrm", "textbf", "mathrm", "mathbf", "mathit", "textit", "operatorname")
_MATH_COMMAND_RE = re.compile(r"^\\(" + "|".join(_MATH_COMMANDS) + r")\s*\{")
# Inside math: "5\text{ pm}" renders "5 pm", "2{,}350" and "2\,350" render as grouped digits.
_MATH_TEXT_RE = re.compile(r"\\(?:text|textrm|mathrm)\s*\{([^{}\\$]*)\}")
_MATH_GROUP_RE = re.compile(r"(?<=\d)(?:\{,\}|\\,)(?=\d{3}(?!\d))")


def _command_argument(value: str) -> str | None:
    """The argument of a math command (``\\boxed{…}``) that spans the whole value, or None."""
    m = _MATH_COMMAND_RE.match(value)
    if m is None:
        return None
    depth = 0
    for i in range(m.end() - 1, len(value)):
        if value[i] == "{":
            depth += 1
        elif value[i] == "}":
            depth -= 1
            if depth == 0:
                return value[m.end():i] if i == len(value) - 1 else None
    return None


def unwrap_math(value: str) -> str:
    """A value written in math notation read as its content: ``$42$``, ``$$42$$``, ``\\(42\\)``,
    ``\\[42\\]``, ``\\boxed{42}``, ``$\\boxed{42}$`` (and ``\\text{…}`` inside them) all read "42".
    Only a wrapper around the whole value is removed: "\\boxed{42} \\boxed{43}" stays two values."""
    inside = False
    while True:
        before = value
        for pair in _MATH_PAIRS:
            m = pair.match(value)
            if m:
                value, inside = m.group(1).strip(), True
                break
        else:
            argument = _command_argument(value)
            if argument is not None:
                value, inside = argument.strip(), True
        if value == before:
            break
    if inside:
        value = _MATH_TEXT_RE.sub(r"\1", value)
        value = _MATH_GROUP_RE.sub(",", value)
        value = re.sub(r"\\[,;: ]", " ", value).replace("\\!", "")  # LaTeX spaces
        value = value.replace("\\%", "%").replace("\\$", "$")
        value = re.sub(r"\s+", " ", value).strip()
    return value


def clean_value(text: str, marks: bool = True) -> str:
    """A one-line value without its formatting noise: list marks, a heading mark, markdown
    emphasis and quotes around it, trailing punctuation, a leading ``Answer:`` label, the angle
    brackets of a copied placeholder ("<42>"), answer tags around it ("<answer>42</answer>"), math
    notation around it (:func:`unwrap_math`).
    ``marks=False`` (a JSON string) keeps a leading "- ", "> " or "# " and any "$": inside a JSON
    string they are no markdown or math, and "> 4", "- 80" or "$42" would change the value."""
    value = text.strip()
    while True:
        before = value
        if marks:
            value = _LIST_MARK_RE.sub("", value)
        value = value.strip(_NOISE_EDGE)
        value = _LABEL_RE.sub("", value)
        value = _PLACEHOLDER_RE.sub(r"\1", value)
        value = value.rstrip(_TRAILING_PUNCT).strip()
        if marks:
            value = _ANSWER_TAG_RE.sub(r"\2", value).strip()
            value = unwrap_math(value)
        if value == before:
            return value


def reply_slot(content: str | None) -> str:
    """The whole reply as one value; :class:`FormatError` when it is empty or several lines."""
    text = _one_line_answer_tags(_newlines(content or "")).strip()
    if not text:
        raise FormatError("empty reply, expected the answer alone")
    text = _drop_preamble(_unfence(_drop_preamble(text)))
    text = _unfence(text)
    lines = [line for line in text.split("\n") if line.strip()]
    if len(lines) != 1:
        raise FormatError(f"the reply must be the answer alone, got {len(lines)} lines: {_short(content)}")
    value = clean_value(lines[0])
    if not value:
        raise FormatError(f"empty answer in {_short(content)}")
    return value


# The final line's label as a reader of the prompt accepts it: "ANSWER:" in any case ("Answer:",
# "answer:"), or "Final answer:" ("The final answer is:", "The answer is:": "final" or not, one label),
# with markdown around it ("**Answer:** 42",
# "**ANSWER: 42**", "### Answer: 42", "> ANSWER: 42", "`ANSWER: 42`"). Every line so labelled is an
# answer line, so a second one anywhere ("answer: 43" in the working) is a second candidate.
_ANSWER_LINE_RE = re.compile(
    r"^[\s>#*+\-_`]*(?:the[ \t]+)?(?:final[ \t]+)?answer(?:[ \t]+is)?[ \t]*[*_`]*[ \t]*:[*_`]*[ \t]*(.*)$", re.I)
# A line that is one answer-tag pair ("<answer>42</answer>", markdown around it) is an answer line
# too, labelled by its tags: beside an "ANSWER:" line it is a second one. Only the tags that name
# the answer label a line; <result> or <output> in the working may be a step's, not the answer.
_ANSWER_TAG_LINE_RE = re.compile(r"^[\s>*_`]*(<\s*(?:answer|final[_ -]?answer)\s*>.*)$", re.I)
# A display-math block given as the value on the lines after an empty label ("ANSWER:\n\\[\n42\n\\]").
_DISPLAY_MATH_RE = re.compile(r"^(?:\\\[.*\\\]|\$\$.*\$\$)$", re.S)


def _answer_lines(content: str | None) -> tuple[list[str], list[int]]:
    """The reply's non-empty lines (NFKC, a closing code fence dropped) and which are answer lines."""
    text = _one_line_answer_tags(_newlines(content or "")).strip()
    lines = [line for line in text.split("\n") if line.strip()]
    while lines and lines[-1].strip() in ("```", "~~~"):
        lines.pop()
    # NFKC: a fullwidth label ("ANSWER：42") is the same label.
    lines = [_nfkc(line) for line in lines]
    return lines, [i for i, line in enumerate(lines) if _ANSWER_LINE_RE.match(line) or _is_tag_line(line)]


def _is_tag_line(line: str) -> bool:
    m = _ANSWER_TAG_LINE_RE.match(line)
    return m is not None and _ANSWER_TAG_RE.match(m.group(1).rstrip().rstrip("*_`").rstrip()) is not None


def line_slot(content: str | None) -> str:
    """The value of the reply's final answer line (``ANSWER:``, its label in any case, with
    markdown emphasis, or ``Final answer:``); :class:`FormatError` when there is none, more than
    one, or text after it (a closing code fence aside; the one line or display-math block after an
    empty label is the value itself)."""
    if not _newlines(content or "").strip():
        raise FormatError("empty reply, expected a final line 'ANSWER: <value>'")
    lines, answers = _answer_lines(content)
    if not answers:
        raise FormatError(f"no final line 'ANSWER: <value>' in {_short(content)}")
    if len(answers) > 1:
        shown = "; ".join(repr(lines[i].strip()) for i in answers)
        raise FormatError(f"{len(answers)} ANSWER lines ({shown}), expected exactly one")
    label = _ANSWER_LINE_RE.match(lines[answers[0]])
    raw = label.group(1) if label else lines[answers[0]]  # an answer-tag line: clean_value reads the tags
    rest = lines[answers[0] + 1:]
    # An empty label with its value on the one line after it ("**Answer:**\n42"), or a display-math
    # block after it, reads as that value; anything more after the label is text after it.
    if rest and not clean_value(raw) and (len(rest) == 1 or _DISPLAY_MATH_RE.match("\n".join(r.strip() for r in rest))):
        raw, rest = " ".join(r.strip() for r in rest), []
    if rest:
        raise FormatError(f"text after the ANSWER line: {rest[0].strip()!r}")
    value = clean_value(raw)
    if not value:
        raise FormatError("the ANSWER line is empty")
    return value


def measured_span(content: str | None, contract: "Contract") -> tuple[str, str]:
    """The part of a reply a length band measures, and what it is called: the slot and whatever
    follows it (padding goes after an answer), never the working a ``line`` prompt invites before
    its answer line. ``reply`` and ``json`` prompts ask for the value alone, so there the whole
    reply is measured, as it was sent (surrounding whitespace included); so is a ``line`` reply
    without exactly one answer line (no slot tells the working apart)."""
    text = content or ""
    if contract.form is not Form.LINE:
        return text, "visible answer"
    lines, answers = _answer_lines(text)
    if len(answers) != 1:
        return text, "visible answer"
    normalised = _nfkc(_one_line_answer_tags(_newlines(text)))
    at = normalised.rfind(lines[answers[0]])
    return (normalised[at:] if at >= 0 else text), "answer line"


def outside_slot(content: str | None, contract: "Contract") -> str:
    """What a reply holds besides its slot and the noise the contract tolerates round it, as it
    stands (its lines joined), "" when there is nothing: the working before an answer line and any
    line after it (``line``); every line of a reply that is not one value (``reply``); the lines
    round a JSON object beyond one line of prose before it (``json``). A one-line reply with no slot
    ("5 pm" with no ``ANSWER`` label) holds a malformed slot, not working: "". Nothing here is read
    for its meaning; the reasoning module asks it where no reasoning came back (thinking on)."""
    text = _newlines(content or "").strip()
    lines = [line for line in text.split("\n") if line.strip()]
    if contract.form is Form.LINE:
        found, answers = _answer_lines(text)
        if not answers:
            return text if len(lines) > 1 else ""
        try:
            line_slot(text)
            after: list[str] = []
        except FormatError:
            after = found[answers[-1] + 1:]
        return "\n".join(found[:answers[0]] + after).strip()
    if contract.form is Form.REPLY:
        try:
            reply_slot(text)
            return ""
        except FormatError:
            return text if len(lines) > 1 else ""
    try:
        before, _, after_text = locate_json(text)
    except FormatError:
        return text if len(lines) > 1 else ""
    prose = [line for line in before.split("\n") if line.strip()]
    return "\n".join((prose if len(prose) > 1 else []) + ([after_text] if after_text else [])).strip()


def block_slot(content: str | None, what: str = "the answer") -> str:
    """The reply as one block of text (a diff, a listing), for graders whose slot is the whole
    reply: a preamble line ending in a colon and one code fence around the block are tolerated and
    removed; the block's own lines are returned as written. :class:`FormatError` when it is empty.
    Whether anything else is left around the block is the caller's to judge (it knows the block's
    grammar)."""
    text = _newlines(content or "").strip()
    if not text:
        raise FormatError(f"empty reply, expected {what}")
    block = _unfence(_drop_preamble(_unfence(text)))
    if not block.strip():
        raise FormatError(f"empty {what} in {_short(content)}")
    return block


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    twice = sorted({k for k in keys if keys.count(k) > 1})
    if twice:
        raise FormatError(f"key(s) {', '.join(map(repr, twice))} given twice")
    return dict(pairs)


# One code fence anywhere in the reply (after a preamble line, before trailing text).
_INNER_FENCE_RE = re.compile(r"^[ \t]*(```|~~~)[\w+.-]*[ \t]*\n(.*?)\n?[ \t]*\1[ \t]*$", re.S | re.M)


def _decoder() -> json.JSONDecoder:
    return json.JSONDecoder(object_pairs_hook=_no_duplicate_keys)


def locate_json(content: str | None) -> tuple[str, Any, str]:
    """The reply's JSON value and the text before and after it, found before anything around it is
    judged: one code fence is removed, then the value is the whole reply when it is one JSON value,
    else the object at the first "{" (a preamble holds no brace). :class:`FormatError` when there is
    none or it does not parse (a key given twice included)."""
    text = _newlines(content or "").strip()
    if not text:
        raise FormatError("empty reply, expected one JSON object")
    tagged = _ANSWER_TAG_RE.match(text)  # answer tags round the whole reply, and nothing else
    if tagged is not None:
        text = tagged.group(2).strip()
    fence = _INNER_FENCE_RE.search(text)
    if fence is not None:
        text = (text[:fence.start()] + fence.group(2) + text[fence.end():]).strip()
    try:
        whole, end = _decoder().raw_decode(text)
        if not text[end:].strip() or isinstance(whole, dict):
            return "", whole, _no_stray_fence(text[end:])
    except json.JSONDecodeError:
        pass
    start = text.find("{")
    if start < 0:
        raise FormatError(f"not one JSON object (no object found): {_short(content)}")
    try:
        obj, end = _decoder().raw_decode(text, start)
    except json.JSONDecodeError as exc:
        raise FormatError(f"not one JSON object ({exc.msg} at char {exc.pos}): {_short(content)}") from None
    return text[:start].strip(), obj, _no_stray_fence(text[end:])


def _no_stray_fence(after: str) -> str:
    """The text after the object, without a lone fence mark: a fence left unopened or unclosed
    around the object ("{...}\n```", "```json\n{...}") is no text."""
    after = after.strip()
    return "" if after in ("```", "~~~") else after


def json_slot(content: str | None, schema: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The reply as one JSON object valid under ``schema``; :class:`FormatError` when it is not
    one object or does not validate (the message names the field). One line of prose before the
    object (fenced or not, a colon at its end or not) is tolerated; more lines before it, a second
    object, or any text after it (where a retraction goes) are not."""
    before, obj, after = locate_json(content)
    if after:
        second = next((True for i, ch in enumerate(after) if ch == "{" and _decodes_object(after, i)), False)
        if second:
            raise FormatError(f"text after the JSON object: a second JSON object, expected one: {_short(after)}")
        raise FormatError(f"text after the JSON object: {_short(after)}")
    prose = [line for line in before.split("\n") if line.strip()]
    if len(prose) > 1:
        raise FormatError(f"{len(prose)} lines of text before the JSON object, expected at most one: {_short(before)}")
    if not isinstance(obj, dict):
        raise FormatError(f"expected a JSON object, got {type(obj).__name__}")
    if schema is not None:
        import jsonschema

        errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(obj), key=lambda e: list(e.absolute_path))
        if errors:
            first = errors[0]
            where = "/".join(str(p) for p in first.absolute_path) or "the object"
            raise FormatError(f"JSON does not match the answer schema at {where}: {first.message}")
    return obj


def _decodes_object(text: str, at: int) -> bool:
    try:
        return isinstance(json.JSONDecoder().raw_decode(text, at)[0], dict)
    except json.JSONDecodeError:
        return False


def _short(text: str | None, limit: int = 120) -> str:
    flat = " ".join((text or "").split())
    return repr(flat if len(flat) <= limit else flat[: limit - 1] + "\u2026")


# -- contracts --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Contract:
    """One item's answer contract: its form, what its slot (or each JSON field) accepts, and, for
    ``json``, the schema the object must satisfy. :meth:`instruction` is what the prompt states."""

    form: Form  # a fixture's word ("reply", "line", "json") is read as its Form
    accept: Accept | None = None  # reply / line
    fields: Mapping[str, Accept] = field(default_factory=dict)  # json: the graded fields
    schema: Mapping[str, Any] | None = None  # json
    value_hint: str = "the answer"  # how the prompt names the value ("the number", "one word")
    wording: str = ""  # the item's own sentence for the prompt, when the generic one does not fit

    def __post_init__(self) -> None:
        if self.form not in FORMS:
            raise ValueError(f"form must be one of {FORMS}, not {self.form!r}")
        object.__setattr__(self, "form", Form(self.form))
        if self.form in (Form.REPLY, Form.LINE) and self.accept is None:
            raise ValueError(f"a {self.form.value!r} contract needs accepted forms")
        if self.form is Form.JSON and self.schema is None:
            raise ValueError("a 'json' contract needs a schema")

    @classmethod
    def of(cls, raw: Mapping[str, Any]) -> "Contract":
        """From fixture data: ``form``, optional ``value_hint`` and ``wording``; for ``reply`` and
        ``line`` the slot's ``accept`` and rules (as :meth:`Accept.of` reads a table); for ``json``
        the ``schema`` and the graded ``fields`` (``{field: forms or table}``)."""
        data = dict(raw)
        form = data.pop("form", None)
        hint = str(data.pop("value_hint", "the answer"))
        wording = str(data.pop("wording", ""))
        if form == Form.JSON:
            unknown = set(data) - {"schema", "fields"}
            if unknown:
                raise ValueError(f"unknown contract key(s) {sorted(unknown)}")
            return cls(Form.JSON, fields=accepts(data.get("fields")), schema=data.get("schema"), value_hint=hint, wording=wording)
        if form not in FORMS:
            raise ValueError(f"contract form must be one of {FORMS}, not {form!r}")
        return cls(Form(form), accept=Accept.of(data), value_hint=hint, wording=wording)

    def grade(self, content: str | None, name: str = "answer") -> Verdict:
        """:func:`grade` under this contract."""
        return grade(content, self, name)

    def instruction(self) -> str:
        """The sentence the prompt ends with, so the model knows where its answer goes."""
        if self.wording:
            return self.wording
        if self.form is Form.REPLY:
            return f"Reply with {self.value_hint} only."
        if self.form is Form.LINE:
            # No "<placeholder>" in the wording: a model copies the brackets around its value.
            return (f"You may reason first; then end your reply with one final line that starts with 'ANSWER: ' "
                    f"and gives {self.value_hint}, with nothing after that line.")
        keys = ", ".join(f'"{k}"' for k in (self.schema or {}).get("properties", {}))
        return (f"Reply with one JSON object only, with the fields {keys}, matching this JSON Schema: "
                f"{json.dumps(self.schema, separators=(',', ':'))}")


@dataclass(frozen=True)
class Question:
    """One item asked with a contract: ``text`` is the question, :attr:`prompt` the question with
    the contract stated after it (what is sent), ``answer`` the ground truth the reference server
    replies with (it must pass its own contract)."""

    id: str
    text: str
    contract: Contract
    answer: str = ""

    @property
    def prompt(self) -> str:
        return f"{self.text.rstrip()} {self.contract.instruction()}"

    def grade(self, content: str | None) -> Verdict:
        return self.contract.grade(content)


def slot_of(content: str | None, contract: Contract) -> "str | dict[str, Any]":
    """The slot's raw value under the contract (a string, or the JSON object); FormatError otherwise."""
    if contract.form is Form.REPLY:
        return reply_slot(content)
    if contract.form is Form.LINE:
        return line_slot(content)
    return json_slot(content, contract.schema)


def grade(content: str | None, contract: Contract, name: str = "answer") -> Verdict:
    """Find the slot, then compare it (or each graded JSON field) with its accepted forms. The
    verdict carries what was read (:attr:`Verdict.slots`)."""
    try:
        slot = slot_of(content, contract)
    except FormatError as exc:
        return format_failure(str(exc)).with_slots(SlotRead(name, None, str(exc)))
    read = SlotRead(name, slot)
    if isinstance(slot, dict):
        return grade_fields(slot, contract.fields).with_slots(read)
    assert contract.accept is not None
    return compare(slot, contract.accept, name).with_slots(read)


def grade_fields(obj: Mapping[str, Any], fields: Mapping[str, Accept]) -> Verdict:
    """Every graded field of a JSON slot against its accepted forms; a missing field is a format
    failure (the schema should have said so), all misses are named in the reason."""
    missing = [name for name in fields if name not in obj]
    if missing:
        return format_failure(f"missing field(s) {', '.join(map(repr, missing))}")
    verdicts = [compare(obj[name], accept, f"field {name!r}") for name, accept in fields.items()]
    formats = [v.reason for v in verdicts if v.is_format]
    if formats:
        return format_failure("; ".join(r.removeprefix(f"{FORMAT}: ") for r in formats))
    if not all(verdicts):
        return Verdict.all_failed(verdicts)
    return Verdict.accept(f"{len(fields)} field(s) as expected")


def accepts(raw: Mapping[str, Any] | None) -> dict[str, Accept]:
    """Fixture data ``{field: forms or table}`` → ``{field: Accept}``."""
    return {name: Accept.of(value) for name, value in (raw or {}).items()}
