"""graders/triage.py and graders/text.find_json_object: unit and property tests."""

from __future__ import annotations

import json

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from pytest_qualify.graders.text import JsonNotFound, find_json_object
from pytest_qualify.fixture_data import triage_incidents
from pytest_qualify.graders.triage import evidence_lines, grade_triage, normalize_component

# Examples are judged by their outcome only: a loaded CI machine must not fail a slow one.

INCIDENTS = triage_incidents()
POOL = next(i for i in INCIDENTS if i.id == "checkout_pool")
GC = next(i for i in INCIDENTS if i.id == "inventory_gc")


def truth(incident, **changes: str) -> dict[str, str]:
    return {"component": incident.component, "category": incident.category, "cause": incident.cause,
            "evidence_line": incident.evidence[0], **changes}


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
@pytest.mark.parametrize("evidence", range(3))
def test_ground_truth_is_accepted_with_any_evidence_line(incident, evidence):
    answer = truth(incident, evidence_line=incident.evidence[evidence])
    verdict = grade_triage(as_json(answer), incident)
    assert verdict.ok, verdict.reason


# -- accepted forms ------------------------------------------------------------------------------


@pytest.mark.parametrize("wrap", [
    lambda j: j,
    lambda j: f"```json\n{j}\n```",
    lambda j: f"Looking at the log, the pool ran dry.\n\n```json\n{j}\n```\nLet me know if you need more.",
    lambda j: f"Answer: {j} (based on the log)",
    lambda j: f"```\n{j}\n```",
])
def test_json_in_fences_or_prose(wrap):
    assert grade_triage(wrap(as_json(truth(POOL))), POOL).ok


@pytest.mark.parametrize("component", ["checkout-service", "Checkout-Service", "checkout_service", "[checkout-service]",
                                       " checkout service ", "checkout", "checkout-service (orders-pool)",
                                       "checkout-service pool", "checkout-service / orders-pool", "CheckoutService"])
def test_component_spellings(component):
    assert grade_triage(as_json(truth(POOL, component=component)), POOL).ok


@pytest.mark.parametrize("evidence", [
    POOL.evidence[0],
    f'"{POOL.evidence[0]}"',
    POOL.evidence[0].replace("  ", " "),
    "Connection is not available, request timed out after 30000ms (total=20, active=20, idle=0, waiting=37)",
    "orders-pool - Connection is not available",
    "14:02:03.530",
    "2026-03-14T14:02:03.530Z",
    "2026-03-14T14:02:03.530Z ERROR [checkout-service] orders-pool - Connection is not available ... waiting=37)",
    "Line 9: " + POOL.evidence[0],
])
def test_evidence_quoted_fully_partially_or_by_timestamp(evidence):
    verdict = grade_triage(as_json(truth(POOL, evidence_line=evidence)), POOL)
    assert verdict.ok, verdict.reason


@pytest.mark.parametrize("cause", [
    "Connection pool exhausted in checkout-service.",
    "The DB connection POOL was saturated: all 20 connections active with requests waiting.",
    "checkout-service could not get a connection: pool has no idle connections (leak in reserveStock).",
])
def test_cause_synonyms(cause):
    assert grade_triage(as_json(truth(POOL, cause=cause)), POOL).ok


# -- rejected forms ------------------------------------------------------------------------------


@pytest.mark.parametrize("component", ["payments-service", "Recommendation Service", "api-gateway", "orders-db"])
def test_red_herring_component(component):
    verdict = grade_triage(as_json(truth(POOL, component=component)), POOL)
    assert not verdict.ok and "red herring" in verdict.reason and "checkout-service" in verdict.reason


@pytest.mark.parametrize("component", ["checkout-svc", "orders-pool", "", "checkoutservices"])
def test_wrong_component(component):
    assert not grade_triage(as_json(truth(POOL, component=component)), POOL).ok


@pytest.mark.parametrize("cause", ["The payments provider returned 503.", "Long GC pauses in checkout-service.",
                                   "A deadlock between two checkout transactions."])
def test_cause_stating_a_contradiction(cause):
    verdict = grade_triage(as_json(truth(POOL, cause=cause)), POOL)
    assert not verdict.ok and "which is not the cause" in verdict.reason


@pytest.mark.parametrize("cause", ["Timeouts at the gateway.", "orders-pool has no free connections; no slow queries on orders-db."])
def test_cause_is_recorded_not_graded_on_wording(cause):
    verdict = grade_triage(as_json(truth(POOL, cause=cause)), POOL)
    assert verdict.ok and cause in verdict.reason


@pytest.mark.parametrize("category", ["Connection-pool exhaustion", "connection pool exhaustion", "CONNECTION_POOL_EXHAUSTION"])
def test_category_case_and_separators_free(category):
    assert grade_triage(as_json(truth(POOL, category=category)), POOL).ok


@pytest.mark.parametrize("field,value,why", [
    # The category is graded exactly, against the closed list the prompt gives.
    ("category", "slow downstream dependency", "category 'slow downstream dependency' is wrong"),
    ("category", "lock contention", "is wrong: the cause is 'connection-pool exhaustion'"),
    ("category", "database problem", "not one of the listed categories"),
    # The evidence must single out lines that show the cause.
    ("evidence_line", "2026-03-14T14:02:03.541Z WARN  [api-gateway] upstream checkout-service timed out after 10000ms, "
     "returning 504 (attempt 1/2)", "does not show the cause"),
    ("evidence_line", "orders-pool", "does not show the cause"),  # also names the healthy pool line
    ("evidence_line", "14:02:03", "does not show the cause"),  # three lines share this second
    ("evidence_line", "provider call attempt 1/3 failed", "does not show the cause"),
    ("evidence_line", "the pool was exhausted", "not a line of the log"),
    ("evidence_line", "ERROR", "not a line of the log"),
])
def test_wrong_category_or_evidence(field, value, why):
    verdict = grade_triage(as_json(truth(POOL, **{field: value})), POOL)
    assert not verdict.ok and why in verdict.reason


@pytest.mark.parametrize("content,why", [
    ("", "empty answer"),
    ("The pool is exhausted.", "no JSON object"),
    ('{"component": "checkout-service", "cause": "pool exhausted", "evidence_line": "2026-03-14T14:02:03.530Z ERR',
     "truncated JSON"),
    ('```json\n{"component": "checkout-service", "cause": "pool exh', "truncated JSON"),
    ('{"component": "checkout-service", "category": "lock contention", "cause": "pool exhausted"}', "lacks evidence_line"),
    ('{"component": "checkout-service", "category": "lock contention", "cause": 3, "evidence_line": "x"}', "lacks cause"),
    ('{"component": "checkout-service", "cause": "pool exhausted", "evidence_line": "x"}', "lacks category"),
])
def test_broken_answers(content, why):
    verdict = grade_triage(content, POOL)
    assert not verdict.ok and why in verdict.reason


def test_find_json_object_prefers_the_fenced_object():
    text = 'Compare {"a": 0} with:\n```json\n{"a": 1}\n```'
    assert find_json_object(text) == {"a": 1}
    with pytest.raises(JsonNotFound, match="no JSON object"):
        find_json_object("[1, 2, 3]")


# -- properties ----------------------------------------------------------------------------------


prose = st.text(alphabet="abcdefghijklmnopqrstuvwxyz .,:!?\n", max_size=60)
@given(incident=st.sampled_from(INCIDENTS), before=prose, after=prose, fenced=st.booleans(), indent=st.sampled_from([None, 2]))
def test_property_truth_is_accepted_with_prose_around(incident, before, after, fenced, indent):
    body = json.dumps(truth(incident), indent=indent)
    body = f"```json\n{body}\n```" if fenced else body
    assert grade_triage(f"{before}\n{body}\n{after}", incident).ok
@given(incident=st.sampled_from(INCIDENTS), cut=st.integers(min_value=1))
def test_property_truncated_json_is_rejected(incident, cut):
    text = json.dumps(truth(incident))
    prefix = text[: cut % len(text)]  # every proper prefix, including the empty one
    verdict = grade_triage(prefix, incident)
    assert not verdict.ok
@given(incident=st.sampled_from(INCIDENTS), data=st.data())
def test_property_component_case_and_separator_variants(incident, data):
    sep = data.draw(st.sampled_from(["-", "_", " ", ""]))
    case = data.draw(st.sampled_from([str.lower, str.upper, str.title]))
    name = case(incident.component.replace("-", sep))
    assert normalize_component(name) == normalize_component(incident.component)
    assert grade_triage(as_json(truth(incident, component=name)), incident).ok
@given(incident=st.sampled_from(INCIDENTS), data=st.data())
def test_property_red_herring_is_always_named_as_such(incident, data):
    herring = data.draw(st.sampled_from(incident.red_herrings))
    verdict = grade_triage(as_json(truth(incident, component=herring.upper())), incident)
    assert not verdict.ok and "red herring" in verdict.reason
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
