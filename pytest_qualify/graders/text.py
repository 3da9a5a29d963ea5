"""Text normalisation shared by graders: what real models write around an answer."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable

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
    if content is None or not content.strip():
        return Verdict.reject("empty answer")
    text = normalize(content)
    for form in accepted:
        if re.search(r"(?<!\w)" + re.escape(normalize(form)) + r"(?!\w)", text):
            return Verdict.accept(f"found {form!r}")
    shown = content.strip().replace("\n", " ")
    return Verdict.reject(f"answer {shown[:120]!r} holds none of {list(accepted)}")
