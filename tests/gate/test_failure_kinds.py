"""Format failures counted apart from fact failures: the kind travels from the verdict
(checks.require) as the item's property to the gate's counts, summary.json, the report and JUnit."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest

from ..helpers import QualifyPytest, suite, write_profile
from pytest_qualify.gate.decide import ItemResult, failure_kinds


def _item(module: str, outcome: str, kind: str | None = None) -> ItemResult:
    r = ItemResult(nodeid=f"{module}-{outcome}-{kind}", module=module, item="x", repetition=1, repetitions=1,
                   outcome=outcome)
    if kind:
        r.properties["failure_kind"] = kind
    return r


def test_kinds_are_counted_per_module_and_an_unjudged_failure_is_other():
    items = [_item("recall", "failed", "format"), _item("recall", "failed", "fact"), _item("recall", "failed", "fact"),
             _item("recall", "passed"), _item("context", "failed"), _item("context", "skipped")]
    assert failure_kinds(items) == {"recall": {"format": 1, "fact": 2, "other": 0},
                                    "context": {"format": 0, "fact": 0, "other": 1}}
    assert _item("x", "passed", "fact").failure_kind is None


def test_a_run_counts_format_and_fact_failures_apart_in_every_writer(qualify_pytest: QualifyPytest, tmp_path):
    # json_invalid: the JSON tasks' replies are cut off (format); drop_needle: the 2K lane's reply is
    # a distractor's value (fact).
    prof = write_profile(tmp_path, ["context", "json"])
    result = qualify_pytest(profile=prof, faults=("json_invalid", "drop_needle=2K"), suites=suite("context", "json"))
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    summary = qualify_pytest.summary()
    rows = {g["module"]: g["failures_by_kind"] for g in summary["gate"]}
    assert rows["json"] == {"format": 5, "fact": 0, "other": 0}
    assert rows["context"] == {"format": 0, "fact": 1, "other": 0}
    kinds = {f["module"]: f["failure_kind"] for f in summary["verdict"]["failures"]}
    assert kinds == {"json": "format", "context": "fact"}
    assert all(f["reason"].split(": ", 2)[1] == "format" for f in summary["verdict"]["failures"] if f["module"] == "json")

    run_dir = qualify_pytest.run_dir()
    report = (run_dir / "report.md").read_text()
    assert "Failed items by kind" in report
    assert re.search(r"\| Deterministic JSON +\| 5 +\| 0 +\| 0 +\|", report), report
    assert re.search(r"\| Context retrieval +\| 0 +\| 1 +\| 0 +\|", report), report
    assert re.search(r"\| json +\| test_json_task\[order\] .*\| format +\| task order, repetition 1: format: ", report), report

    root = ET.parse(run_dir / "junit.xml").getroot()
    suite_props = {p.get("name"): p.get("value") for p in root.iter("property") if p.get("name", "").endswith("_failures")
                   or p.get("name", "").startswith("failures_by_kind_")}
    assert suite_props["format_failures"] == "5" and suite_props["fact_failures"] == "1"
    assert suite_props["failures_by_kind_json"] == "format=5 fact=0 other=0"
    # A failed item's kind is its failure's type; a passed one has no failure.
    types = {tc.get("name"): tc.find("failure").get("type") for tc in root.iter("testcase") if tc.find("failure") is not None}
    assert sorted(types.values()) == ["qualify.fact"] + ["qualify.format"] * 5, types
    assert all(t == "qualify.format" for name, t in types.items() if name.startswith("test_json_task"))
