"""graders/triage.py under the answer contract: one JSON object; component, category and evidence
line graded exactly, the cause recorded and never graded. Unit and property tests."""

from __future__ import annotations

import json

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from pytest_qualify.tasks.fixture_data import triage_incidents
from pytest_qualify.graders.triage import evidence_lines, grade_triage

# Examples are judged by their outcome only: a loaded CI machine must not fail a slow one.

INCIDENTS = triage_incidents()
POOL = next(i for i in INCIDENTS if i.id == "checkout_pool")
GC = next(i for i in INCIDENTS if i.id == "inventory_gc")


def truth(incident, **changes: str) -> dict[str, str]:
    return {**incident.truth, **changes}


def as_json(answer: dict[str, str]) -> str:
    return json.dumps(answer)


# -- fixtures ------------------------------------------------------------------------------------


@pytest.mark.parametrize("incident", INCIDENTS, ids=[i.id for i in INCIDENTS])
def test_incident_is_well_formed(incident):
    assert len(incident.log_lines) >= 12
    components = {line.split("[", 1)[1].split("]", 1)[0] for line in incident.log_lines}
    assert incident.component in components
    assert len(set(incident.red_herrings) & components) >= 3
    assert incident.component not in incident.red_herrings
    assert incident.log in incident.prompt and incident.symptom in incident.prompt
    assert any("retr" in line for line in incident.log_lines)  # retries as a red herring
    assert any("healthy" in line for line in incident.log_lines)  # a slow but healthy dependency


@pytest.mark.parametrize("incident", INCIDENTS, ids=[i.id for i in INCIDENTS])
def test_prompt_states_the_contract(incident):
    assert "Reply with one JSON object only" in incident.prompt
    assert json.dumps(dict(incident.schema), separators=(",", ":")) in incident.prompt
    for category in incident.categories:
        assert category in incident.prompt
    for field in ("component", "category", "cause", "evidence_line"):
        assert f'"{field}"' in incident.prompt


@pytest.mark.parametrize("incident", INCIDENTS, ids=[i.id for i in INCIDENTS])
@pytest.mark.parametrize("evidence", range(3))
def test_ground_truth_is_accepted_with_any_evidence_line(incident, evidence):
    verdict = grade_triage(as_json(truth(incident, evidence_line=incident.evidence[evidence])), incident)
    assert verdict.ok, verdict.reason


# -- the cause is recorded, never graded -----------------------------------------------------------


@pytest.mark.parametrize("cause", [
    # The cases: a ruled-out cause was read as a claim.
    "Timeouts are caused by orders-pool exhaustion, not by slow queries.",
    "orders-pool is exhausted (20/20 active) while requests wait; there is no evidence of slow queries",
    # Anything at all: the category and the evidence decide.
    "GC pauses, a deadlock and a network partition.",
    "",
])
def test_any_cause_is_recorded_not_graded(cause):
    verdict = grade_triage(as_json(truth(POOL, cause=cause)), POOL)
    assert verdict.ok, verdict.reason
    assert f"cause (recorded) {cause!r}" in verdict.reason


def test_a_right_cause_does_not_save_a_wrong_category():
    verdict = grade_triage(as_json(truth(POOL, category="slow downstream dependency")), POOL)
    assert not verdict.ok and "category 'slow downstream dependency' is wrong" in verdict.reason


# -- accepted forms ------------------------------------------------------------------------------


@pytest.mark.parametrize("content", [
    as_json(truth(POOL)),
    f"```json\n{json.dumps(truth(POOL), indent=2)}\n```",
    f"The timeouts come from checkout-service:\n```json\n{as_json(truth(POOL))}\n```",
    json.dumps(dict(reversed(list(truth(POOL).items()))), indent=4),
    as_json(truth(POOL, component="Checkout_Service", category="Connection Pool Exhaustion")),
    as_json(truth(POOL, component="checkout")),
    as_json(truth(POOL, evidence_line="... POST /checkout failed: could not acquire database connection")),
    as_json(truth(POOL, evidence_line="14:02:03.530")),
])
def test_accepted(content):
    verdict = grade_triage(content, POOL)
    assert verdict.ok, verdict.reason


# -- rejected: misses and format failures ------------------------------------------------------


@pytest.mark.parametrize("answer, why", [
    (truth(POOL, component="payments-service"), "'payments-service' is a red herring"),
    (truth(POOL, component="checkout-service or orders-db"), "is not 'checkout-service'"),
    (truth(POOL, component="checkout-service (orders-pool)"), "is not 'checkout-service'"),
    (truth(POOL, component="checkout-db"), "is not 'checkout-service'"),
    (truth(POOL, category="connection-pool exhaustion or lock contention"), "is not one of the listed categories"),
    (truth(POOL, category="database problems"), "is not one of the listed categories"),
    (truth(POOL, evidence_line=next(line for line in POOL.log_lines if "[api-gateway] upstream" in line)),
     "does not show the cause"),
    (truth(POOL, evidence_line="the pool was full"), "is not a line of the log"),
])
def test_misses(answer, why):
    verdict = grade_triage(as_json(answer), POOL)
    assert not verdict.ok and why in verdict.reason and not verdict.is_format, verdict.reason


@pytest.mark.parametrize("content, why", [
    (as_json({k: v for k, v in truth(POOL).items() if k != "category"}), "'category' is a required property"),
    (as_json(truth(POOL, confidence="high")), "Additional properties are not allowed"),
    (as_json(truth(POOL, component=["checkout-service"])), "is not of type 'string'"),
    (f"{as_json(truth(POOL))}\n{as_json(truth(POOL))}", "text after the JSON object"),
    (f"The pool ran dry.\n\n```json\n{as_json(truth(POOL))}\n```\nLet me know if you need more.", "format: "),
    ("The checkout-service pool is exhausted.", "not one JSON object"),
    ("", "empty reply"),
    (None, "empty reply"),
])
def test_format_failures(content, why):
    verdict = grade_triage(content, POOL)
    assert not verdict.ok and verdict.is_format and why in verdict.reason, verdict.reason


def test_every_miss_is_named():
    verdict = grade_triage(as_json(truth(POOL, component="orders-db", category="lock contention")), POOL)
    assert "'orders-db' is a red herring" in verdict.reason and "category 'lock contention' is wrong" in verdict.reason


# -- properties ----------------------------------------------------------------------------------


@given(incident=st.sampled_from(INCIDENTS), fenced=st.booleans(), indent=st.sampled_from([None, 1, 2, 4]), data=st.data())
def test_property_truth_is_accepted_in_any_key_order_and_layout(incident, fenced, indent, data):
    keys = data.draw(st.permutations(list(incident.truth)))
    body = json.dumps({k: incident.truth[k] for k in keys}, indent=indent)
    assert grade_triage(f"```json\n{body}\n```" if fenced else body, incident).ok


@given(incident=st.sampled_from(INCIDENTS), cut=st.integers(min_value=1))
def test_property_truncated_json_is_a_format_failure(incident, cut):
    text = json.dumps(truth(incident))
    prefix = text[: cut % len(text)]  # every proper prefix, including the empty one
    verdict = grade_triage(prefix, incident)
    assert not verdict.ok and verdict.is_format


@given(incident=st.sampled_from(INCIDENTS), data=st.data())
def test_property_component_case_and_separator_variants(incident, data):
    sep = data.draw(st.sampled_from(["-", "_", " "]))
    case = data.draw(st.sampled_from([str.lower, str.upper, str.title]))
    name = case(incident.component.replace("-", sep))
    assert grade_triage(as_json(truth(incident, component=name)), incident).ok


@given(incident=st.sampled_from(INCIDENTS), data=st.data())
def test_property_red_herring_is_always_named_as_such(incident, data):
    herring = data.draw(st.sampled_from(incident.red_herrings))
    verdict = grade_triage(as_json(truth(incident, component=herring.upper())), incident)
    assert not verdict.ok and "red herring" in verdict.reason


@given(st.sampled_from(INCIDENTS), st.text(alphabet="abcdefghijklmnopqrstuvwxyz-", min_size=1, max_size=12),
       st.sampled_from(["{} ({})", "{} [{}]", "{}, {}", "{} / {}", "{} or {}"]))
def test_property_anything_beside_the_component_is_not_the_component(incident, other, style):
    verdict = grade_triage(as_json(truth(incident, component=style.format(incident.component, other))), incident)
    assert not verdict.ok and "component" in verdict.reason


@given(incident=st.sampled_from(INCIDENTS), data=st.data())
def test_property_evidence_substrings_point_only_at_lines_containing_them(incident, data):
    line = data.draw(st.sampled_from(incident.log_lines))
    start = data.draw(st.integers(min_value=0, max_value=len(line) - 12))
    piece = line[start:start + data.draw(st.integers(min_value=12, max_value=len(line) - start))]
    assume(piece.strip())
    hits = evidence_lines(piece, incident.log_lines)
    assert line in hits or piece.strip() != piece  # the quoted line is always among the hits
    verdict = grade_triage(as_json(truth(incident, evidence_line=piece)), incident)
    assert verdict.ok == all(h in incident.evidence for h in hits)
