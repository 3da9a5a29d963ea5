"""No PASS without proof: options that run no test body are refused before anything starts, and an
item that reports "passed" without its call phase, or without a verdict of its grader in the answer
journal, leaves the run INCOMPLETE (exit 2) with one line naming it, in every reader."""

from __future__ import annotations

import json

import pytest

from ..helpers import QualifyPytest, suite
from .test_preflight import assert_usage_error


@pytest.mark.parametrize("options, flag", [
    (("--setup-only",), "--setup-only"),
    (("--setup-plan",), "--setup-plan"),
    (("--collect-only",), "--collect-only"),
    (("--co",), "--collect-only"),
    (("--fixtures",), "--fixtures"),
    (("--fixtures-per-test",), "--fixtures-per-test"),
    (("--markers",), "--markers"),
])
def test_options_that_run_no_test_body_are_usage_errors(qualify_pytest: QualifyPytest, options, flag):
    # The issue's own run: with the json fault a run of the bodies FAILs; without them it read PASS.
    result = qualify_pytest(*options, faults=["json_invalid"], modules=("smoke", "json"), suites=suite("smoke", "json"))
    line = assert_usage_error(qualify_pytest, result, f"{flag} cannot be combined with --qualify", "no test body")
    assert "Deterministic JSON" not in result.stdout.str() and "QUALIFICATION" not in result.stdout.str(), line


def test_help_with_qualify_only_prints(qualify_pytest: QualifyPytest):
    result = qualify_pytest("--help")
    assert result.ret == 0 and "--qualify-endpoint" in result.stdout.str()
    assert not qualify_pytest.evidence.exists()


SKIP_BODIES = """
import pytest

@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    return True  # answers the call without running the test body: every item "passes"
"""


def test_a_pass_whose_grader_recorded_no_verdict_is_incomplete_in_every_reader(pytester, qualify_pytest):
    pytester.makepyfile(skip_bodies=SKIP_BODIES)
    pytester.syspathinsert()
    result = qualify_pytest("-p", "skip_bodies", faults=["json_invalid"], modules=("smoke", "json"),
                            suites=suite("smoke", "json"))
    out = result.stdout.str()
    assert result.ret == 2, out
    last = out.strip().splitlines()[-1]
    assert last.startswith("QUALIFICATION: INCOMPLETE (exit 2): "), last
    not_graded = ("not graded: smoke: test_health, repetition 1: reported passed, but its grader recorded no "
                  "verdict in the answer journal")
    summary = qualify_pytest.summary()
    assert summary["verdict"]["result"] == "INCOMPLETE"
    # Two findings, each true: no item was graded, and the JSON fault (asked for, to show what the
    # skipped bodies would have hidden) never met a request.
    findings = {f["row"]: f["reason"] for f in summary["verdict"]["findings"]}
    assert sorted(findings) == ["fault", "not_graded"], findings
    assert findings["not_graded"].startswith(not_graded) and findings["fault"].startswith(
        "fault json_invalid never engaged"), findings
    assert {i["outcome"] for i in summary["items"]} == {"ungraded"}
    assert all(row["passed"] == 0 for row in summary["gate"])
    # JUnit: the gate's "not graded" error makes the counts red; pytest's closing line says so too.
    cases = qualify_pytest.cases()
    assert "qualify.gate::not_graded" in cases and cases["qualify.gate::not_graded"].find("error") is not None
    assert "2 errors" in out.splitlines()[-2], out.splitlines()[-2]
    bundle_junit = (qualify_pytest.run_dir() / "junit.xml").read_text()
    assert 'errors="2"' in bundle_junit and 'failures="0"' in bundle_junit


def test_every_passed_item_has_its_verdict_in_the_journal_also_under_xdist(qualify_pytest):
    pytest.importorskip("xdist")
    result = qualify_pytest("-n", "2", modules=("smoke", "json"), suites=suite("smoke", "json"))
    assert result.ret == 0, result.stdout.str()
    lines = [json.loads(x) for x in (qualify_pytest.run_dir() / "answers.jsonl").read_text().splitlines()]
    graded = {d["test"] for d in lines if d.get("role") == "verdict" and d["ok"]}
    items = {i["nodeid"] for i in qualify_pytest.summary()["items"]}
    assert items and items <= graded, items - graded


def test_a_usage_error_leaves_an_evidence_folder_it_did_not_make(qualify_pytest: QualifyPytest):
    """The folder of earlier bundles stays whole: only what this run made goes again."""
    earlier = qualify_pytest.evidence / "20260101T000000Z-abcdef"
    earlier.mkdir(parents=True)
    (earlier / "summary.json").write_text("{}")
    result = qualify_pytest("--setup-only", modules=("smoke",), suites=suite("smoke"))
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    assert sorted(p.name for p in qualify_pytest.evidence.iterdir()) == [earlier.name]
    assert (earlier / "summary.json").read_text() == "{}"
