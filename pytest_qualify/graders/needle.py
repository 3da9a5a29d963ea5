"""Context retrieval: is the reply the needle's exact value?

The answer contract (``fixtures/haystack/needles.toml``, stated by the question: "Reply with the
code only.") makes the whole reply the slot (graders/contract.py): formatting noise around the
value is tolerated — markdown, quotes, a fence, trailing punctuation, an ``Answer:`` label — and
the slot must equal one of the accepted forms (the value, with thousands commas for a number,
without its hyphen for a code; case free). Anything else in the slot — a sentence, a second value,
a distractor's value, a padded or longer number — is a miss; a reply that is not one value is a
``format:`` failure. A miss's reason says what the slot holds when it is recognisable: a
distractor's value (which key), or a value one character off the needle's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from pytest_qualify.graders import Verdict
from pytest_qualify.graders.contract import Accept, Contract, Form, FormatError, format_failure, reply_slot


def needle_contract(value: str) -> Contract:
    """The contract a needle question states when the template gives none: the value alone."""
    forms = (value, f"{int(value):,}") if value.isdigit() else (value, value.replace("-", ""))
    return Contract(Form.REPLY, Accept(tuple(dict.fromkeys(forms)), separators=not value.isdigit()))


def _same(slot: str, value: str, rules: Accept) -> bool:
    """Whether the slot is ``value`` under the slot's own rules (case, separators)."""
    from pytest_qualify.graders.contract import compare

    probe = Accept(needle_contract(value).accept.forms, case=rules.case, separators=rules.separators)  # type: ignore[union-attr]
    return compare(slot, probe).ok


def _near_miss(slot: str, value: str) -> str | None:
    """The slot is one character off the value, or two neighbours swapped (a slip, not a guess)."""
    cand = slot.strip().upper()
    want = value.upper()
    if len(cand) != len(want):
        return None
    diff = [i for i, (a, b) in enumerate(zip(cand, want)) if a != b]
    if len(diff) == 1:
        return f"{slot!r} is one character off"
    if len(diff) == 2 and diff[1] == diff[0] + 1 and cand[diff[0]] == want[diff[1]] and cand[diff[1]] == want[diff[0]]:
        return f"{slot!r} swaps two characters"
    return None


def grade_needle(
    answer: str | None,
    value: str,
    distractors: Mapping[str, str] | Sequence[str] = (),
    *,
    key: str = "",
    contract: Contract | None = None,
) -> Verdict:
    """Accept when the reply's slot is the needle ``value`` in one of the contract's forms.

    ``distractors`` maps other keys to their values (or is a plain list of values) and ``key``
    names the target needle: both only explain a miss, they never change the verdict.
    """
    contract = contract or needle_contract(value)
    assert contract.accept is not None
    what = f"needle value {value!r}" + (f" (key {key!r})" if key else "")
    try:
        slot = reply_slot(answer)
    except FormatError as exc:
        return format_failure(f"{exc} (expected {what} alone)")
    graded = contract.grade(slot)  # the slot it read travels on every verdict below
    if graded.ok:
        return Verdict.accept(f"found {what}").with_slots(*graded.slots)
    items: Iterable[tuple[str, str]] = (
        distractors.items() if isinstance(distractors, Mapping) else (("", v) for v in distractors)
    )
    for k, v in items:
        if v != value and _same(slot, v, contract.accept):
            whose = f" (key {k!r})" if k else ""
            return Verdict.reject(f"answer {slot!r} gives distractor value {v!r}{whose}, not {what}").with_slots(
                *graded.slots)
    near = _near_miss(slot, value)
    return Verdict.reject(f"answer {slot!r} lacks {what}" + (f": {near}" if near else "")).with_slots(*graded.slots)
