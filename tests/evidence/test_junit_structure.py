"""junit.xml as CI's readers take it: the xunit2 / Jenkins junit-10.xsd rules as a check (each rule
shown to reject the file that breaks it), and the gate's run-level reasons rendered as test cases
named after their rows — red exactly when the verdict is not PASS, for every kind of reason the
gate gives, whatever its words (a reason the gate gains later is rendered the same way)."""

from __future__ import annotations

import datetime as dt
import xml.etree.ElementTree as ET

import pytest

from pytest_qualify.evidence import junit
from pytest_qualify.bundle_format.schema import validate
from pytest_qualify.gate.decide import (
    FAIL, INCOMPLETE, PASS, BaselineInput, CheckRow, Decision, ItemResult, RunRecord, decide, row_name, with_unjudged,
)
from pytest_qualify.gate.run_facts import RunFacts
from pytest_qualify.gate.waivers import Waiver, WaiverSet
from pytest_qualify.profiles import Slo, load_profile, module_registry

from ..judging import summary_of

MODULES = module_registry()

GOOD = b"""<?xml version="1.0" encoding="utf-8"?>
<testsuites name="x"><testsuite name="s" tests="2" failures="1" errors="0" skipped="0" time="1.250">
<properties><property name="verdict" value="FAIL"/></properties>
<testcase classname="a" name="t1" time="0.100"><system-out>ok</system-out></testcase>
<testcase classname="qualify.gate" name="slo" time="0.000"><failure type="qualify.check" message="SLO: too slow">x</failure></testcase>
</testsuite></testsuites>"""


def broken(old: str, new: str) -> bytes:
    data = GOOD.decode()
    assert old in data
    return data.replace(old, new, 1).encode()


def test_a_well_formed_file_keeps_every_rule():
    assert junit.structure_errors(GOOD) == []
    assert junit.counts(GOOD) == {"tests": 2, "failures": 1, "errors": 0, "skipped": 0}


@pytest.mark.parametrize(("old", "new", "problem"), [
    ('<system-out>ok</system-out>', '<properties><property name="lane" value="1K"/></properties>',
     "<properties> not allowed in a testcase"),
    (' type="qualify.check"', '', "no type"),
    ('message="SLO: too slow"', 'message="SLO: too slow&#10;second line"', "message is not one line"),
    ('message="SLO: too slow"', 'message="' + "x" * 600 + '"', "message is not one line"),
    ('message="SLO: too slow"', '', "no message"),
    ('failures="1"', 'failures="0"', "failures=0 but 1 <failure> test cases"),
    ('tests="2"', 'tests="3"', "tests=3 but 2 test cases"),
    (' errors="0"', '', "no errors"),
    ('name="t1" time="0.100"', 'name="t1" file="a.py" time="0.100"', "attribute(s) ['file'] not allowed"),
    ('time="1.250"', 'time="1.2500"', "is not a junit-10 time"),
    ('name="t1"', 'name="slo" classname2="x"', "not allowed"),
    ('<system-out>ok</system-out>', '<skipped message="s"/><error type="e" message="m">x</error>', "2 outcomes"),
    ('<property name="verdict" value="FAIL"/>', '<property name="verdict"/>', "not a property with name and value"),
    ('<testcase classname="a" name="t1"', '<testcase classname="qualify.gate" name="slo"', "appears twice"),
])
def test_each_rule_rejects_the_file_that_breaks_it(old, new, problem):
    problems = junit.structure_errors(broken(old, new))
    assert any(problem in p for p in problems), problems


def test_a_file_of_another_shape_is_refused():
    assert junit.structure_errors(b"<testsuite name='s' tests='0'/>") == ["root element is <testsuite>, not <testsuites>"]
    assert junit.structure_errors(b"<testsuites><oops/>")[0].startswith("not XML")


# -- the gate's reasons as test cases, from the one decision -------------------------------------------


def item(module="smoke", rep=1, outcome="passed", reason="", name="test_health"):
    r = ItemResult(nodeid=f"suites/test_{module}.py::{name}[rep{rep}of1]", module=module, item=name, repetition=rep,
                   repetitions=1, lane=None)
    r.properties["qualify_module"] = module
    if outcome != "passed":
        r.record("call", outcome, reason)
    return r


def xml_of(decision, results) -> tuple[bytes, dict]:
    summary = summary_of(
        run={"id": "run-1", "started_at": "2026-01-01T00:00:00+00:00", "finished_at": "2026-01-01T00:01:00+00:00",
             "duration_s": 60.0, "repeat": 1, "workers": 0, "tool_version": "0.1.0"},
        target={"mode": "reference", "simulated": True, "base_url": None, "launch_command": None,
                "engine_version": "x", "models": [], "startup_error": None, "died": None},
        profile=load_profile("small"), verdict=decision, results=results, cases={}, snapshots={}, metrics_errors={},
        metrics_files=[], artifacts={"plot": None, "notes": []},
    )
    validate(summary)
    data = junit.build_xml(summary, {}, decision.gate_cases)
    assert junit.structure_errors(data) == []
    return data, summary


def gate_of(data: bytes) -> dict[str, ET.Element]:
    return {tc.get("name"): tc[0] for tc in ET.fromstring(data).iter("testcase")
            if tc.get("classname") == junit.GATE_CLASSNAME}


def red(data: bytes) -> bool:
    n = junit.counts(data)
    return n["failures"] + n["errors"] > 0


def test_a_pass_has_no_gate_case_and_is_green():
    results = (item(),)
    data, summary = xml_of(decide(RunRecord(results=results, modules=MODULES, required=("smoke",))), results)
    assert summary["verdict"]["result"] == PASS and gate_of(data) == {} and not red(data)


def test_a_failed_item_alone_is_red_through_the_item():
    results = (item(outcome="failed", reason="GET /v1/models: wrong root"),)
    data, _ = xml_of(decide(RunRecord(results=results, modules=MODULES, required=("smoke",))), results)
    assert gate_of(data) == {} and junit.counts(data)["failures"] == 1
    (failure,) = [tc.find("failure") for tc in ET.fromstring(data).iter("testcase") if tc.find("failure") is not None]
    assert failure.get("message") == "smoke: test_health, repetition 1: GET /v1/models: wrong root"
    assert failure.get("type") == "qualify.other"


SLO_ITEMS = [{"module": "context", "lane": "1K", "properties": {"ttft_s": 3.0}}]


@pytest.mark.parametrize(("record", "verdict", "rows"), [
    # an SLO row (the limit measured and broken)
    (dict(slo=Slo(lanes=(), decode_tok_s_p50_min=100.0, ttft_s_p95_max=None),
          facts=RunFacts(timing={"decode_tok_s": {"p50": 5.0, "p95": 6.0, "n": 3}})),
     FAIL, {"slo_decode_tok_per_s_p50": ("failure", "qualify.check")}),
    # a limit with nothing to measure: not judged
    (dict(slo=Slo(lanes=(), decode_tok_s_p50_min=100.0, ttft_s_p95_max=None), facts=RunFacts()),
     INCOMPLETE, {"slo_decode_tok_per_s_p50": ("error", "qualify.not_judged")}),
    # a run-level check row (the integrity module's answers held to the end)
    (dict(checks=(CheckRow("Integrity: answers held", "answer 2 of 3 differs", "all equal", False, "answers changed"),)),
     FAIL, {"integrity_answers_held": ("failure", "qualify.check")}),
    # a dead server, an identity change: the deployment's own problems
    (dict(problems=("server died during the run: exit 9", "identity changed during the run: root a -> b")),
     FAIL, {"server_died_during_the_run": ("failure", "qualify.run"),
            "identity_changed_during_the_run": ("failure", "qualify.run")}),
    # a partial selection and a required module that did not run
    (dict(required=("smoke", "json"), incomplete=("partial run: 3 protocol items deselected (-k, -m, ...)",)),
     INCOMPLETE, {"partial_run": ("error", "qualify.not_judged"), "modules_not_run": ("error", "qualify.not_judged")}),
    # two reasons of one row are two test cases
    (dict(incomplete=("partial run: a", "partial run: b")),
     INCOMPLETE, {"partial_run": ("error", "qualify.not_judged"), "partial_run_2": ("error", "qualify.not_judged")}),
    # a server that never became available: nothing was judged, not even the failed items
    (dict(incomplete=("server startup failed: connection refused",), target_unavailable=True),
     INCOMPLETE, {"server_startup_failed": ("error", "qualify.not_judged")}),
    # a reason the gate does not know by name (another producer's): named by its words, still red
    (dict(problems=("engine version held to /version: declared 0.23.1, served 0.26.0",)),
     FAIL, {"engine_version_held_to": ("failure", "qualify.run")}),
])
def test_every_kind_of_reason_is_a_gate_case_named_after_its_row(record, verdict, rows):
    results = (item(),)
    decision = decide(RunRecord(**{"results": results, "modules": MODULES, "required": ("smoke",), **record}))
    assert decision.verdict == verdict
    data, summary = xml_of(decision, results)
    gate = gate_of(data)
    assert {name: (node.tag, node.get("type")) for name, node in gate.items()} == rows
    assert [f["row"] for f in summary["verdict"]["findings"]] == list(rows)
    for f in summary["verdict"]["findings"]:
        assert gate[f["row"]].get("message") == junit.message(f["reason"]) and f["reason"] in gate[f["row"]].text
    assert red(data)


def test_a_regression_and_a_misused_waiver_are_gate_rows():
    results = (item(),)
    def facts(ttft_s: float) -> dict:  # one 1K context lane: what the baseline compares
        spread = {"median": ttft_s, "min": ttft_s, "max": ttft_s, "n": 1}
        return {"items": [], "simulated": True, "run": {"workers": 0}, "profile": {"name": "small", "deployment": {}},
                "timing": {"decode_tok_s": None, "prefill_tok_s": None,
                           "lanes": [{"lane": "1K", "ttft_s": spread, "e2e_s": spread}]}}

    before = {**facts(0.1), "run": {"id": "earlier", "workers": 0}, "gate": []}
    ws = WaiverSet((Waiver(pattern="test_health", reason="flaky", expires=dt.date(2099, 1, 1), index=1),), ("multimodal",),
                   "w.toml")
    decision = decide(RunRecord(results=results, modules=MODULES, required=("smoke",), facts=RunFacts.of(facts(0.2)), waivers=ws,
                                baseline=BaselineInput(before, threshold_pct=10, fail_on_regression=True)))
    assert decision.verdict == FAIL
    rows = {f.row: f.kind for f in decision.findings}
    assert rows == {"waivers": "waiver", "regression": "regression"}
    data, _ = xml_of(decision, results)
    assert set(gate_of(data)) == {"waivers", "regression"} and red(data)


def test_a_bundle_that_could_not_be_written_is_a_gate_error():
    results = (item(),)
    decision = with_unjudged(decide(RunRecord(results=results, modules=MODULES, required=("smoke",))), "disk full")
    assert decision.verdict == INCOMPLETE and [f.row for f in decision.findings] == ["evidence_bundle"]
    # The amended decision carries its own test cases: the reason it gained is one of them.
    assert [(c.name, c.tag, c.type, c.message) for c in decision.gate_cases] == [
        ("evidence_bundle", "error", "qualify.not_judged", "disk full")]


def test_a_verdict_without_a_reason_or_a_failure_still_reads_red():
    # A guard, not a judgement: a non-PASS decision with nothing to show gets one case.
    def bare(verdict):
        return Decision(verdict=verdict, rows=(), failures=(), waived=(), reasons=())

    (case,) = bare(INCOMPLETE).gate_cases
    assert (case.name, case.tag, case.type, case.message) == ("verdict", "error", "qualify.not_judged", "verdict INCOMPLETE")
    (case,) = bare(FAIL).gate_cases
    assert (case.name, case.tag, case.type) == ("verdict", "failure", "qualify.verdict")
    assert bare(PASS).gate_cases == ()


def test_row_names_are_stable_words():
    assert row_name("SLO 32K lane TTFT", whole=True) == "slo_32k_lane_ttft"
    assert row_name("server startup failed: 401 Unauthorized") == "server_startup_failed"
    assert row_name("server died during suites/test_smoke.py::test_x[rep2of3]: exit 3") == "server_died_during"
    assert row_name("SLO decode tok/s p50", whole=True) == "slo_decode_tok_per_s_p50"
    assert row_name("!!!") == "run"


def test_a_long_reason_keeps_its_first_line_within_pytest_92s_budget():
    text = "smoke: test_identity, repetition 1: " + "y" * 900 + "\nsecond line"
    msg = junit.message(text)
    assert len(msg) <= junit.MESSAGE_MAX < 500 and "\n" not in msg and msg.startswith("smoke: test_identity, repetition 1: ")
