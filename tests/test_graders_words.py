"""The word rules graders/media.py and graders/triage.py still use (graders/text.py): words as
words, a mention the answer itself negates or ranks below is not a claim. And the value rules of
the tool, needle and triage graders."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_qualify.fixture_data import tool_fixtures, triage_incidents
from pytest_qualify.graders.needle import grade_needle
from pytest_qualify.graders.text import states
from pytest_qualify.graders.tools import RawCall, grade_call, normalize_string
from pytest_qualify.graders.triage import grade_triage


word = st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=3, max_size=10)
decoration = st.sampled_from(["{}", "**{}**", "`{}`", "{}.", "The answer is {}.", "> {}", "_{}_", "{} (final)",
                              "# {}", "\"{}\"", "{}!", "Answer: {}"])
@given(word, decoration)
def test_property_a_word_is_found_in_any_decoration(w, style):
    assert states(style.format(w), w)
    assert states(style.format(w.upper()), w)
@given(word, word)
def test_property_a_word_glued_to_letters_is_another_word(w, glue):
    assert not states(f"{glue}{w}", w)
    assert states(f"{w}{glue}", w) == (glue in ("s", "es"))
@given(word, st.sampled_from(["not {}", "not the {}", "rather than {}", "instead of {}", "({} is only the second)",
                              "{} is not it", "never {}"]))
def test_property_a_negated_mention_is_not_a_claim(w, style):
    assert not states(style.format(w), w)
@given(word, st.sampled_from(["No, {}.", "Not sure, but {}.", "{}, not the other one."]))
def test_property_a_negation_does_not_reach_across_a_clause(w, style):
    assert states(style.format(w), w)
# -- tools: BFCL's optional-parameter rule, read from the shipped tool set -------------------------

TOOLS = tool_fixtures()
OPTIONAL_WITH_DEFAULT = [
    (case, key, prop)
    for case in TOOLS.cases
    for key, prop in TOOLS.schemas[case.calls[0].name].get("properties", {}).items()
    if "default" in prop and key not in case.calls[0].arguments and len(case.calls) == 1
]


def _plain(case):
    from pytest_qualify.graders.tools import canonical_arguments

    return canonical_arguments(case.calls[0].arguments)


@pytest.mark.parametrize("case,key,prop", OPTIONAL_WITH_DEFAULT,
                         ids=[f"{c.id}-{k}" for c, k, _ in OPTIONAL_WITH_DEFAULT])
def test_unasked_optional_argument_may_be_omitted_null_or_default(case, key, prop):
    name, schemas = case.calls[0].name, TOOLS.schemas
    args = _plain(case)
    for value in (None, prop["default"]):
        verdict = grade_call(RawCall(name, json.dumps({**args, key: value})), case.calls[0], schemas)
        assert verdict.ok, (key, value, verdict.reason)
    others = [v for v in prop.get("enum", ()) if v != prop["default"]]
    for value in others:
        verdict = grade_call(RawCall(name, json.dumps({**args, key: value})), case.calls[0], schemas)
        assert not verdict.ok and f"unexpected_param: argument {key}=" in verdict.reason


def test_the_unasked_optional_arguments_of_the_issue_are_checked():
    assert {k for _, k, _ in OPTIONAL_WITH_DEFAULT} >= {"attendees", "seating", "reminder"}
@given(st.integers(min_value=1, max_value=999), st.integers(min_value=0, max_value=99))
def test_property_a_dot_between_digits_is_part_of_the_number(a, b):
    assert normalize_string(f"HTTP {a}.{b} error") != normalize_string(f"HTTP {a}{b} error")
    assert normalize_string(f"HTTP {a}{b} error.") == normalize_string(f"http-{a}{b}-error")


# -- needle: two candidates, padding and dash-joined identifiers ----------------------------------
@given(st.integers(min_value=1_000_000, max_value=9_999_999), st.integers(min_value=1_000_000, max_value=9_999_999),
       st.sampled_from(["{} or maybe {}", "{} (or {})", "Either {} or {}", "{}; possibly {}"]))
def test_property_a_second_value_of_the_needles_form_is_a_hedge(value, other, style):
    verdict = grade_needle(style.format(value, other), str(value))
    assert not verdict.ok  # the slot holds two candidates (even the same one twice is not the value alone)
@given(st.integers(min_value=1_000_000, max_value=9_999_999), st.sampled_from(["0{}", "00{}", "{}-8", "9-{}", "{}0"]))
def test_property_a_longer_identifier_is_not_the_value(value, style):
    assert not grade_needle(style.format(value), str(value)).ok


# -- triage: a component with a qualifier ---------------------------------------------------------

INCIDENTS = triage_incidents()


def _truth(incident, **changes):
    return json.dumps({"component": incident.component, "category": incident.category, "cause": incident.cause,
                       "evidence_line": incident.evidence[0], **changes})
@given(st.sampled_from(INCIDENTS), st.text(alphabet="abcdefghijklmnopqrstuvwxyz-", min_size=1, max_size=12),
       st.sampled_from(["{} ({})", "{} [{}]", "{}, {}", "{} / {}", "{}: {}"]))
def test_property_a_qualifier_after_the_component_is_fine(incident, qualifier, style):
    names = {incident.component, *incident.aliases, *incident.red_herrings}
    if any(n.replace(" ", "-") in qualifier for n in names) or not qualifier.strip("-"):
        return  # the qualifier itself names a component
    verdict = grade_triage(_truth(incident, component=style.format(incident.component, qualifier)), incident)
    assert verdict.ok, verdict.reason
@given(st.sampled_from(INCIDENTS), st.data())
def test_property_a_red_herring_beside_the_component_is_a_miss(incident, data):
    herring = data.draw(st.sampled_from(incident.red_herrings))
    style = data.draw(st.sampled_from(["{} ({})", "{} or {}", "{}/{}"]))
    verdict = grade_triage(_truth(incident, component=style.format(incident.component, herring)), incident)
    assert not verdict.ok and "is a red herring" in verdict.reason
