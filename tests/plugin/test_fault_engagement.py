"""A fault that never engaged is never a PASS: a fault switch whose count the run never reaches
(``die_after=100000`` on a run of a few hundred requests) changed nothing, so the run cannot show the
fault is caught. The reference server records which armed faults engaged and when
(reference/fault_log.py); at the run's end every armed fault is listed in summary.json and report.md
with whether it engaged, and one that never did leaves the run INCOMPLETE (exit 2) with one line
naming it. An engaged fault is recorded as engaged, with the chat request that met it."""

from __future__ import annotations

import pytest

from pytest_qualify.reference.fault_log import FAULT_LOG

from ..helpers import QualifyPytest

INCOMPLETE = pytest.ExitCode.INTERRUPTED  # 2


def _reasons_naming(summary: dict, fault: str) -> list[str]:
    return [r for r in summary["verdict"]["incomplete"] if fault in r]


@pytest.mark.parametrize("fault, what", [
    ("die_after=100000", "the process exits after 100000 chat requests"),
    ("drop_connection=100000", "the 100000th chat request's connection is closed without an answer"),
    ("answer_swap_after=100000", "after 100000 chat requests another model answers behind the route"),
])
def test_a_count_the_run_never_reaches_is_incomplete_naming_the_fault(qualify_pytest: QualifyPytest, fault, what):
    result = qualify_pytest(faults=[fault])
    out = result.stdout.str()
    assert result.ret == INCOMPLETE, out[-3000:]
    summary = qualify_pytest.summary()
    assert summary["verdict"]["result"] == "INCOMPLETE"
    (reason,) = _reasons_naming(summary, fault)
    assert reason.startswith(f"fault {fault} never engaged: {what}"), reason
    assert summary["verdict"]["reasons"] == [reason]  # the one line, and nothing else kept the run from passing
    assert out.splitlines()[-1].startswith(f"QUALIFICATION: INCOMPLETE (exit 2): fault {fault} never engaged"), out[-600:]
    (armed,) = summary["faults"]["armed"]
    assert armed["fault"] == fault and armed["engaged"] is False and armed["chat_requests"] is None
    assert summary["faults"]["recorded_in"] == FAULT_LOG
    assert (qualify_pytest.run_dir() / FAULT_LOG).is_file()  # in the bundle, under SHA256SUMS
    assert FAULT_LOG in (qualify_pytest.run_dir() / "SHA256SUMS").read_text()
    report = (qualify_pytest.run_dir() / "report.md").read_text()
    assert f"| `{fault}` | **no: never engaged** | — |" in report


def test_the_issues_command_on_the_small_profile_is_incomplete(qualify_pytest: QualifyPytest):
    # `pytest --qualify=small --qualify-endpoint reference --qualify-reference-fault die_after=100000`:
    # every item passes and the fault never engaged: INCOMPLETE, never PASS.
    result = qualify_pytest(profile="small", faults=["die_after=100000"], suites=())
    out = result.stdout.str()
    assert result.ret == INCOMPLETE, out[-3000:]
    summary = qualify_pytest.summary()
    assert not summary["verdict"]["failures"]
    assert [r.split(":")[0] for r in summary["verdict"]["reasons"]] == ["fault die_after=100000 never engaged"]


def test_an_engaged_fault_is_recorded_with_the_request_that_met_it(qualify_pytest: QualifyPytest):
    # die_after=1: the second chat request ends the server; the run FAILs on the death, and the
    # record says the fault engaged there (written before the process exited).
    result = qualify_pytest(faults=["die_after=1"])
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()[-3000:]
    summary = qualify_pytest.summary()
    (armed,) = summary["faults"]["armed"]
    assert armed["engaged"] is True and armed["chat_requests"] == 2, armed
    assert armed["after_s"] is not None and armed["after_s"] >= 0
    assert not [r for r in summary["verdict"]["reasons"] if "never engaged" in r]
    report = (qualify_pytest.run_dir() / "report.md").read_text()
    assert "| `die_after=1` | yes | chat request 2, " in report
    # The server's own record is part of the evidence: in SHA256SUMS and linked from report.html.
    assert "  reference-faults.json" in (qualify_pytest.run_dir() / "SHA256SUMS").read_text()
    assert 'href="reference-faults.json"' in (qualify_pytest.run_dir() / "report.html").read_text()


def test_of_two_faults_only_the_one_that_never_engaged_is_named(qualify_pytest: QualifyPytest):
    # smoke_empty engages on the first smoke answer (and fails the smoke items); the count is never reached.
    result = qualify_pytest(faults=["smoke_empty", "answer_swap_after=100000"])
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()[-3000:]  # a judged FAIL outranks it
    summary = qualify_pytest.summary()
    engaged = {f["fault"]: f["engaged"] for f in summary["faults"]["armed"]}
    assert engaged == {"smoke_empty": True, "answer_swap_after=100000": False}
    assert [r for r in summary["verdict"]["incomplete"] if "never engaged" in r] == [
        r for r in summary["verdict"]["incomplete"] if r.startswith("fault answer_swap_after=100000 never engaged")]
    assert _reasons_naming(summary, "answer_swap_after=100000") and not _reasons_naming(summary, "smoke_empty")


def test_a_run_without_faults_has_no_fault_record(qualify_pytest: QualifyPytest):
    result = qualify_pytest()
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()[-3000:]
    assert "faults" not in qualify_pytest.summary()
    assert not (qualify_pytest.run_dir() / FAULT_LOG).exists()
