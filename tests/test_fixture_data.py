"""fixture_data.py: the one loader of the protocol's cases; broken data fails with the file named."""

from __future__ import annotations

import pytest

from pytest_qualify import fixture_data
from pytest_qualify.fixture_data import FixtureError

LOADERS = [fixture_data.smoke_questions, fixture_data.finish_prompts, fixture_data.reasoning_prompts,
           fixture_data.json_tasks, fixture_data.triage_incidents, fixture_data.diff_cases]


@pytest.mark.parametrize("loader", LOADERS, ids=[f.__name__ for f in LOADERS])
def test_every_loader_reads_its_cases_once(loader):
    cases = loader()
    assert cases and loader() is cases  # cached: one read per process
    ids = [getattr(c, "id", None) or c["id"] for c in cases]
    assert len(ids) == len(set(ids))


def test_tools_recall_and_the_follow_up_load():
    assert len(fixture_data.tool_fixtures().cases) == 20
    assert fixture_data.recall_fixtures().conversations
    assert fixture_data.window_follow_up().accept


def _with(monkeypatch, path: str, data: dict) -> None:
    real = fixture_data.read_toml
    monkeypatch.setattr(fixture_data, "read_toml", lambda p: data if p == path else real(p))


def test_a_ground_truth_its_own_grader_rejects_is_a_fixture_error(monkeypatch):
    _with(monkeypatch, "smoke.toml", {"question": [{"prompt": "Capital of France?", "answer": "Lyon", "accept": ["paris"]}]})
    with pytest.raises(FixtureError, match=r"fixtures/smoke.toml: question 'q1': its own ground truth fails"):
        fixture_data.smoke_questions.__wrapped__()


def test_a_triage_category_outside_the_list_is_a_fixture_error(monkeypatch):
    data = dict(fixture_data.read_toml("triage/incidents.toml"))
    data["incident"] = [{**data["incident"][0], "category": "gremlins"}]
    _with(monkeypatch, "triage/incidents.toml", data)
    with pytest.raises(FixtureError, match=r"incident checkout_pool: category 'gremlins' is not one of"):
        fixture_data.triage_incidents.__wrapped__()


def test_a_triage_cause_that_contradicts_itself_is_a_fixture_error(monkeypatch):
    data = dict(fixture_data.read_toml("triage/incidents.toml"))
    data["incident"] = [{**data["incident"][0], "cause": "Long GC pauses."}]
    _with(monkeypatch, "triage/incidents.toml", data)
    with pytest.raises(FixtureError, match=r"its own cause states the contradiction 'gc pause'"):
        fixture_data.triage_incidents.__wrapped__()


def test_accepted_forms_for_a_field_nobody_expects_are_a_fixture_error(monkeypatch):
    data = dict(fixture_data.read_toml("json_tasks.toml"))
    data["task"] = [{**data["task"][0], "accepted": {"colour": ["red"]}}]
    _with(monkeypatch, "json_tasks.toml", data)
    with pytest.raises(FixtureError, match=r"task 'order': accepted forms for 'colour'"):
        fixture_data.json_tasks.__wrapped__()
