"""graders/recall.py and the number/phrase helpers of graders/text.py: unit and property tests."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_qualify.fixture_data import recall_fixtures
from pytest_qualify.graders.recall import Fact, fact_present, grade_recall
from pytest_qualify.graders.text import claim_text, number_spans, numbers_in, parse_number, phrase_spans


def contains_number(text: str, value) -> bool:
    return bool(number_spans(claim_text(text), value))


def contains_phrase(text: str, phrase: str) -> bool:
    return bool(phrase_spans(claim_text(text), phrase))

# Examples are judged by their outcome only: a loaded CI machine must not fail a slow one.

FIXTURES = recall_fixtures()
CONVERSATIONS = FIXTURES.conversations
ONCALL = next(c for c in CONVERSATIONS if c.id == "oncall_handover")
TRIP = next(c for c in CONVERSATIONS if c.id == "trip_booking")


def truth_answer(conversation) -> str:
    return "; ".join(f"{f.name}: {f.value}" for f in conversation.facts)


# -- fixtures ------------------------------------------------------------------------------------


@pytest.mark.parametrize("conv", CONVERSATIONS, ids=[c.id for c in CONVERSATIONS])
def test_each_conversation_is_well_formed(conv):
    assert len(conv.turns) >= 3 and conv.near_misses
    history = " ".join(u + " " + a for u, a in conv.turns)
    # Every fact is stated early (first turn) and every near miss in a later distractor turn.
    for fact in conv.facts:
        assert fact_present(conv.turns[0][0], fact), fact
    for near in conv.near_misses:
        assert not fact_present(conv.turns[0][0], near) and fact_present(history, near), near
    messages = conv.messages(FIXTURES.system)
    assert [m["role"] for m in messages[:3]] == ["system", "user", "assistant"]
    assert messages[-1] == {"role": "user", "content": conv.question}


@pytest.mark.parametrize("conv", CONVERSATIONS, ids=[c.id for c in CONVERSATIONS])
def test_truth_answer_is_accepted(conv):
    assert grade_recall(truth_answer(conv), conv.facts, conv.near_misses).ok


# -- accepted forms ------------------------------------------------------------------------------


@pytest.mark.parametrize("content", [
    "Ingrid Vasquez, 48213, 7Q-5531",
    "Your name is **Ingrid Vasquez**, employee number `48213`, and the door code is 7Q-5531.",
    "ingrid vasquez / 48,213 / 7q 5531",
    "```\nName: INGRID VASQUEZ\nEmployee number: 48213.0\nDoor code: 7Q5531\n```",
    "Sure! Ingrid  Vasquez — #48213 — code 7Q–5531. Anything else?",
])
def test_accepted_forms(content):
    verdict = grade_recall(content, ONCALL.facts, ONCALL.near_misses)
    assert verdict.ok, verdict.reason


def test_number_facts_accept_equal_numbers():
    assert grade_recall("Reference KX7-42Q, Hotel Aurelia, budget €2,350.00", TRIP.facts, TRIP.near_misses).ok
    assert grade_recall("KX7-42Q at the Aurelia; 2350 EUR", TRIP.facts, TRIP.near_misses).ok


def test_a_near_miss_the_answer_negates_or_tells_as_context_is_not_stated():
    # Negated, it is not a claim; told after the answer as what someone else has, it is context.
    assert grade_recall("Ingrid Vasquez, 48213 (not 48231), 7Q-5531", ONCALL.facts, ONCALL.near_misses).ok
    assert grade_recall("Ingrid Vasquez, employee 48213, door code 7Q-5531. (Your colleague Ingrid Valdez is 48231.)",
                        ONCALL.facts, ONCALL.near_misses).ok


def test_accept_forms_of_a_number_fact():
    fact = Fact("temperature", "-80", "number", ("minus 80",))
    assert fact_present("stored at −80 °C", fact)
    assert fact_present("stored at minus 80 degrees", fact)
    assert not fact_present("stored at 80 degrees", fact)


# -- rejected forms ------------------------------------------------------------------------------


@pytest.mark.parametrize("content,why", [
    ("", "empty answer"),
    ("Ingrid Vasquez, 48231, 7Q-5531", "lacks employee number '48213'"),
    ("Ingrid Vasquez, 48213 or 48231, 7Q-5531", "states the near-miss employee number '48231'"),
    ("Ingrid Vasquez, 48231 (or 48213?), 7Q-5531", "states the near-miss employee number '48231'"),
    ("Ingrid Valdez, 48213, 7Q-5531", "lacks name 'Ingrid Vasquez'"),
    ("Ingrid Vasquez, 482135, 7Q-5531", "lacks employee number"),
    ("Ingrid Vasquez, 48213, 7Q-5513", "lacks door code '7Q-5531'"),
    ("Ingrid Vasquez, 48213, 17Q-5531", "lacks door code"),
    ("Ingrid Vasquez, 48213", "lacks door code"),
])
def test_rejected_forms(content, why):
    verdict = grade_recall(content, ONCALL.facts, ONCALL.near_misses)
    assert not verdict.ok and why in verdict.reason


def test_distractor_values_are_rejected():
    verdict = grade_recall("KX7-24Q, Hotel Aurora, 2,530 euros", TRIP.facts, TRIP.near_misses)
    assert not verdict.ok
    for part in ("lacks booking reference", "near-miss hotel 'Aurora'", "near-miss budget '2530'"):
        assert part in verdict.reason


# -- text helpers ----------------------------------------------------------------------------------


@pytest.mark.parametrize("text,value", [("1,299.50", "1299.5"), ("+3", "3"), ("3.0", "3"), ("-80", "-80"), ("42", "42")])
def test_parse_number(text, value):
    assert parse_number(text) == Decimal(value)


@pytest.mark.parametrize("text", ["", "1,29", "3.", "abc", "1 299"])
def test_parse_number_rejects(text):
    assert parse_number(text) is None


def test_contains_number_rejects_near_misses():
    assert contains_number("It costs 176.35 CAD", 176.35)
    assert not contains_number("It costs 176.53 CAD", 176.35)
    assert not contains_number("It costs 1763.5 CAD", 176.35)


def test_contains_phrase_needs_whole_words():
    assert contains_phrase("the Hotel Aurelia.", "hotel aurelia")
    assert not contains_phrase("the Hotel Aureliana", "Hotel Aurelia")
    assert not contains_phrase("anything", "---")


amounts = st.decimals(min_value=Decimal("0.01"), max_value=Decimal("99999999.99"), places=2)
number_forms = st.sampled_from([
    lambda d: f"{d}", lambda d: f"{d:,}", lambda d: f"${d:,}", lambda d: f"{d} USD", lambda d: f"{d}0",
    lambda d: f"**{d:,}**", lambda d: f"({d})",
])
@given(value=amounts, form=number_forms, before=st.sampled_from(["", "The total is ", "Result:\n"]),
       after=st.sampled_from(["", ".", " in total.", "\nAnything else?"]))
def test_property_numbers_written_differently_are_found(value, form, before, after):
    assert contains_number(before + form(value) + after, value)
@given(value=amounts, delta=st.decimals(min_value=Decimal("0.01"), max_value=Decimal("1000"), places=2),
       form=number_forms)
def test_property_other_numbers_are_not_found(value, delta, form):
    assert not contains_number(f"The total is {form(value + delta)}.", value)
@given(value=st.integers(min_value=-10**9, max_value=10**9))
def test_property_numbers_in_round_trips_integers(value):
    assert numbers_in(f"value {value:,} here") == [Decimal(value)]


code_chars = st.text(alphabet="ABCDEFGHJKLMNPQRSTUVWXYZ0123456789", min_size=2, max_size=5)
separators = st.sampled_from(["-", " ", "", "–", "_", "."])
@given(left=code_chars, right=code_chars, sep=separators, lower=st.booleans())
def test_property_codes_match_with_any_separator_and_case(left, right, sep, lower):
    written = f"{left}{sep}{right}"
    written = written.lower() if lower else written
    assert contains_phrase(f"The code is {written}.", f"{left}-{right}")
@given(left=code_chars, right=code_chars, extra=st.sampled_from("0123456789XYZ"))
def test_property_codes_with_an_extra_character_do_not_match(left, right, extra):
    assert not contains_phrase(f"The code is {left}-{right}{extra}.", f"{left}-{right}")
    assert not contains_phrase(f"The code is {extra}{left}-{right}.", f"{left}-{right}")
