"""fixture_data.py: the one loader of the protocol's cases; broken data fails with the file named."""

from __future__ import annotations

import pytest

from pytest_qualify.tasks import fixture_data
from pytest_qualify.tasks.fixture_data import FixtureError

LOADERS = [fixture_data.smoke_questions, fixture_data.finish_prompts, fixture_data.reasoning_prompts,
           fixture_data.json_tasks, fixture_data.triage_incidents, fixture_data.diff_cases]


@pytest.mark.parametrize("loader", LOADERS, ids=[f.__name__ for f in LOADERS])
def test_every_loader_reads_its_cases_once(loader):
    cases = loader()
    assert cases and loader() is cases  # cached: one read per process
    ids = [getattr(c, "id", None) or c["id"] for c in cases]
    assert len(ids) == len(set(ids))


def test_tools_and_recall_load_and_finish_holds_only_what_its_module_asks():
    assert len(fixture_data.tool_fixtures().cases) == 20
    assert fixture_data.recall_fixtures().conversations
    # Every table of fixtures/finish.toml is a prompt the finish module asks: no data no suite reads.
    assert set(fixture_data.read_toml("finish.toml")) == {"prompt"}


def _with(monkeypatch, path: str, data: dict) -> None:
    real = fixture_data.read_toml
    monkeypatch.setattr(fixture_data, "read_toml", lambda p: data if p == path else real(p))


def test_a_ground_truth_its_own_grader_rejects_is_a_fixture_error(monkeypatch):
    _with(monkeypatch, "smoke.toml", {"question": [{"prompt": "Capital of France?", "answer": "Lyon",
                                                    "contract": {"form": "reply", "accept": ["Paris"]}}]})
    with pytest.raises(FixtureError, match=r"fixtures/smoke.toml: question 'q1': its own ground truth fails its contract"):
        fixture_data.smoke_questions.__wrapped__()


def test_an_item_without_a_contract_is_a_fixture_error(monkeypatch):
    _with(monkeypatch, "finish.toml", {"prompt": [{"id": "x", "text": "Capital of France?", "answer": "Paris"}]})
    with pytest.raises(FixtureError, match=r"fixtures/finish.toml: prompt 'x': no answer contract"):
        fixture_data.finish_prompts.__wrapped__()


def _first_changed(path: str, section: str, **changes) -> dict:
    data = dict(fixture_data.read_toml(path))
    data[section] = [{**data[section][0], **changes}]
    return data


@pytest.mark.parametrize("path,section,changes,loader,message", [
    ("triage/incidents.toml", "incident", {"category": "gremlins"}, fixture_data.triage_incidents,
     r"incident checkout_pool: category 'gremlins' is not one of"),
    ("triage/incidents.toml", "incident", {"red_herrings": ["checkout-service", "orders-db"]}, fixture_data.triage_incidents,
     r"incident checkout_pool: component 'checkout-service' is also a red herring"),
    ("json_tasks.toml", "task", {"accepted": {"colour": ["red"]}}, fixture_data.json_tasks,
     r"task 'order': accepted forms for 'colour'"),
    ("recall/conversations.toml", "conversation", {"truth": {"name": "Ingrid Valdez", "employee_number": "48213",
                                                             "door_code": "7Q-5531"}},
     fixture_data.recall_fixtures, r"conversation 'oncall_handover': its own ground truth fails its contract"),
], ids=["category outside the list", "truth names a red herring", "accepted forms for an unexpected field",
        "recall truth outside its contract"])
def test_inconsistent_fixture_data_is_a_fixture_error(monkeypatch, path, section, changes, loader, message):
    _with(monkeypatch, path, _first_changed(path, section, **changes))
    with pytest.raises(FixtureError, match=message):
        loader.__wrapped__()


def test_integrity_samples_are_the_streaming_modules_own_requests(monkeypatch):
    samples = {s.id: s for s in fixture_data.integrity_samples()}
    planet = samples["finish-planet"]
    assert planet.messages == ({"role": "user", "content": fixture_data.finish_prompts()[0].prompt},) and not planet.params
    tools = samples["tools-parallel_weather_paris_nairobi"]
    assert tools.tool_turn and tools.params["tool_choice"] == "auto" and tools.messages[0]["role"] == "system"
    for sample, message in [({"module": "finish", "item": "nope"}, "finish has no prompt 'nope'"),
                            ({"module": "tools", "item": "nope"}, "tools has no case 'nope'"),
                            ({"module": "diff", "item": "x"}, "is not one that streams")]:
        _with(monkeypatch, "integrity.toml", {"sample": [sample]})
        with pytest.raises(FixtureError, match=message):
            fixture_data.integrity_samples.__wrapped__()
