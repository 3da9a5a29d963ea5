"""Protocol module 8 — timeout triage: a synthetic incident log with one real cause among red
herrings; the answer (JSON) names component, cause and evidence line, graded on ground truth.
Data: ``fixtures/triage/``."""

from __future__ import annotations

import pytest

from pytest_qualify.checks import require
from pytest_qualify.tasks.fixture_data import triage_incidents
from pytest_qualify.graders.triage import grade_triage

pytestmark = pytest.mark.qualify_module("triage")

INCIDENTS = triage_incidents()


@pytest.mark.parametrize("incident", INCIDENTS, ids=[i.id for i in INCIDENTS])
def test_timeout_triage(incident, qualify_ask, qualify_record, qualify_repetition):
    answer = qualify_ask(incident.prompt)
    qualify_record.props(case=incident.id)
    require(grade_triage(answer.content, incident), f"incident {incident.id}, repetition {qualify_repetition}")
