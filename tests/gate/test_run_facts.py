"""The run's measurements as the gate reads them (gate/run_facts.py): taken from the summary's fact
sections, nothing more, and shaped back as a summary for the baseline comparison."""

from __future__ import annotations

from dataclasses import FrozenInstanceError

import pytest

from pytest_qualify.gate.decide import RunRecord
from pytest_qualify.gate.run_facts import RunFacts
from pytest_qualify.profiles import module_registry

SECTIONS = {
    "run": {"id": "r1", "workers": 2}, "simulated": True, "profile": {"name": "small", "deployment": {"model": "m"}},
    "timing": {"decode_tok_s": {"p50": 10.0, "p95": 12.0, "n": 3}, "lanes": []},
    "items": [{"nodeid": "a", "module": "smoke", "lane": None, "outcome": "passed", "properties": {}}],
    "serving_facts": {"facts": {"kv_cache_tokens": {"value": 100}}},
    # The sections only the writers read: the gate's facts leave them out.
    "target": {"mode": "reference"}, "server_metrics": {"available": False}, "provenance": {"host": {}},
    "protocol": {"label": "protocol v3"},
}


def test_the_gate_takes_its_sections_typed_and_leaves_the_writers_sections_out():
    facts = RunFacts.of(SECTIONS)
    assert facts.items == tuple(SECTIONS["items"]) and facts.timing == SECTIONS["timing"]
    assert facts.simulated is True and facts.serving_facts == SECTIONS["serving_facts"]
    assert facts.profile["name"] == "small" and facts.run["workers"] == 2
    shaped = facts.summary_sections([{"module": "smoke"}])
    assert set(shaped) == {"run", "simulated", "profile", "timing", "items", "gate", "serving_facts"}
    assert shaped["gate"] == [{"module": "smoke"}] and shaped["items"] == SECTIONS["items"]
    with pytest.raises(FrozenInstanceError):
        facts.simulated = False  # type: ignore[misc]


def test_a_run_without_facts_reads_as_nothing_measured():
    facts = RunFacts.of({})
    assert facts == RunFacts() and facts.simulated is False and facts.serving_facts is None
    assert "serving_facts" not in facts.summary_sections([])  # as a summary without serving facts has none
    assert RunRecord(results=(), modules=module_registry(), required=()).facts == RunFacts()
