"""The gate's run-level test cases are built once, with the decision, and the three places that
show them render that one list: the bundle's junit.xml, pytest's own ``--junitxml`` writer and the
terminal's counts (pytest's short summary and closing line)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from types import SimpleNamespace

from _pytest.junitxml import LogXML

from pytest_qualify.evidence.session import EvidenceState
from pytest_qualify.evidence.end_of_run import conclude, run_record
from pytest_qualify.gate import decide as gate
from pytest_qualify.gate.decide import FAIL, GATE_CLASSNAME, ItemResult
from pytest_qualify.hooks.evidence import _add_gate_cases
from pytest_qualify.hooks.steps import add_gate_reports
from pytest_qualify.profiles import load_profile, module_registry
from pytest_qualify.run import RunState
from pytest_qualify.settings import Settings

DIED = "server died during the run: exit 9"
PARTIAL = "partial run: 1 protocol items deselected (-k, -m, ...)"


def ended_run(tmp_path):
    """A run whose one item passed, whose server died (judged) and whose selection left an item
    out (not judged): a failing and an erroring run-level case."""
    settings = Settings(profile="small", repeat=1, endpoint="reference", api_key_env="QUALIFY_API_KEY",
                        evidence_dir=tmp_path, serve_command=None, startup_timeout_s=None)
    state = RunState(settings, load_profile("small"), "20260101T000000Z-abcdef", tmp_path / "run", is_worker=False)
    state.run_dir.mkdir()
    ok = ItemResult("suites/test_smoke.py::test_health[rep1of1]", "smoke", "test_health", 1, 1)
    ok.record("call", "passed", "")
    state.results = {ok.nodeid: ok}
    ev = EvidenceState()
    end = run_record(state, ev, modules=module_registry(), required=("smoke",), problems=[DIED],
                     incomplete=[PARTIAL], selection=[PARTIAL])
    return state, ev, end


def as_tuples(elements):
    """(name, tag, type, message, text) of each gate test case element."""
    return [(tc.get("name"), node.tag, node.get("type"), node.get("message"), node.text)
            for tc in elements if tc.get("classname") == GATE_CLASSNAME for node in tc]


def test_the_bundle_junitxml_and_the_terminal_render_the_one_list_built_with_the_decision(tmp_path, monkeypatch):
    built = []
    real = gate.gate_cases
    monkeypatch.setattr(gate, "gate_cases", lambda verdict: built.append(verdict) or real(verdict))
    state, ev, end = ended_run(tmp_path)
    decision = conclude(end, state, ev, secrets=())
    assert decision.verdict == FAIL
    assert len(built) == 1  # once, with the decision; no sink builds its own

    want = [(c.name, c.tag, c.type, c.message, c.text) for c in decision.gate_cases]
    assert [w[:3] for w in want] == [("server_died_during_the_run", "failure", "qualify.run"),
                                     ("partial_run", "error", "qualify.not_judged")]
    assert want[0][3] == DIED and want[0][4] == f"{DIED}\n\ngate row: server_died_during_the_run (run); verdict FAIL"

    bundle = ET.parse(state.run_dir / "junit.xml").getroot().iter("testcase")
    assert as_tuples(bundle) == want

    xml = LogXML(str(tmp_path / "pytest-junit.xml"), None, family="xunit2")
    _add_gate_cases(xml, decision.gate_cases, ())
    assert as_tuples(r.to_xml() for r in xml.node_reporters_ordered) == want
    assert xml.stats["failure"] == 1 and xml.stats["error"] == 1

    tr = SimpleNamespace(stats={})
    add_gate_reports(tr, decision.gate_cases)
    shown = [(r.nodeid, r.when, r.longrepr) for key in ("failed", "error") for r in tr.stats[key]]
    assert shown == [(f"{GATE_CLASSNAME}::{name}", "call" if tag == "failure" else "setup", message)
                     for name, tag, _, message, _ in want]
    assert len(built) == 1


def test_a_secret_in_a_reason_is_redacted_in_pytests_junitxml(tmp_path):
    state, ev, end = ended_run(tmp_path)
    decision = gate.decide(end.record)
    amended = gate.with_unjudged(decision, "evidence bundle could not be written: token s3cr3t refused")
    xml = LogXML(str(tmp_path / "pytest-junit.xml"), None, family="xunit2")
    _add_gate_cases(xml, amended.gate_cases, ("s3cr3t",))
    text = b"".join(ET.tostring(r.to_xml()) for r in xml.node_reporters_ordered)
    assert b"evidence_bundle" in text and b"s3cr3t" not in text
