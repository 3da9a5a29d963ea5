"""The gate: pass^k, every required module, waivers only where the module is waivable."""

from __future__ import annotations

import dataclasses
import datetime as dt
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_qualify.gate import decide as gate
from pytest_qualify.evidence.session import EvidenceState
from pytest_qualify.evidence.end_of_run import conclude, run_record
from pytest_qualify.gate.run_facts import RunFacts
from pytest_qualify.gate.slo import CheckRow
from pytest_qualify.gate.waivers import Waiver, WaiverSet
from pytest_qualify.gate.decide import (
    EXIT_CODES, FAIL, INCOMPLETE, PASS, BaselineInput, Decision, ItemResult, RunRecord, decide,
    render_table, with_unjudged,
)
from pytest_qualify.profiles import LaneSlo, Slo, load_profile, module_registry
from pytest_qualify.run import RunState
from pytest_qualify.settings import Settings

from ..judging import judge

MODULES = module_registry()


def item(module="tools", rep=1, reps=3, outcome="passed", reason="", name="test_case[c1]"):
    r = ItemResult(nodeid=f"{module}::{name}[rep{rep}of{reps}]", module=module, item=name, repetition=rep, repetitions=reps)
    r.record("call", outcome, reason)
    return r


def _waive_all(reason: str) -> WaiverSet:
    """A waiver naming every item; only a waivable module's failures take it."""
    return WaiverSet((Waiver("*", reason, dt.date(2099, 1, 1), 1),), ("multimodal",), "waivers.toml")


def test_all_pass_is_pass():
    v = judge([item(rep=r) for r in (1, 2, 3)], MODULES, ["tools"])
    assert v.verdict == PASS
    assert v.rows[0].result == "3/3, 3/3 repetitions"


def test_one_failure_in_one_repetition_fails_with_its_reason():
    results = [item(rep=1), item(rep=2, outcome="failed", reason="wrong_value: city"), item(rep=3)]
    v = judge(results, MODULES, ["tools"])
    assert v.verdict == FAIL
    assert v.rows[0].result == "2/3, 2/3 repetitions"
    assert any("repetition 2" in line and "wrong_value: city" in line for line in v.summary_lines())


def test_missing_required_module_is_incomplete_never_a_pass():
    v = judge([item()], MODULES, ["tools", "recall"])
    assert v.verdict == INCOMPLETE
    assert any("'recall'" in r for r in v.reasons) and any("'recall'" in r for r in v.incomplete)


def test_no_tests_is_incomplete():
    assert judge([], MODULES, ["tools"]).verdict == INCOMPLETE


def test_a_judged_failure_outranks_incompleteness():
    v = judge([item(outcome="failed", reason="wrong_value")], MODULES, ["tools"],
                 incomplete=["run interrupted before the protocol finished"])
    assert v.verdict == FAIL
    assert v.incomplete == ("run interrupted before the protocol finished",)


def test_interruption_or_partial_selection_alone_is_incomplete():
    for why in ("run interrupted before the protocol finished", "partial run: 1 protocol items deselected"):
        v = judge([item()], MODULES, ["tools"], incomplete=[why])
        assert v.verdict == INCOMPLETE and v.reasons == (why,) and not v.passed


def test_an_unavailable_target_judges_nothing_even_when_items_failed():
    failed = [item(outcome="failed", reason="the server never started: connection refused")]
    v = judge(failed, MODULES, ["tools"], incomplete=["server startup failed: exit code 3"], target_unavailable=True)
    assert v.verdict == INCOMPLETE
    assert judge(failed, MODULES, ["tools"]).verdict == FAIL


def test_a_dead_server_is_a_judged_failure():
    v = judge([item()], MODULES, ["tools"], run_problems=["server died during test_x"])
    assert v.verdict == FAIL


def test_check_rows_fail_or_leave_the_run_incomplete():
    ok = CheckRow("SLO 1K lane TTFT", "0.2 s (max of 3)", "<= 1 s", True)
    slow = CheckRow("SLO 1K lane TTFT", "1.5 s (max of 3)", "<= 1 s", False, "SLO 1K lane TTFT: measured 1.5 s exceeds 1 s")
    unmeasured = CheckRow("SLO 2K lane TTFT", None, "<= 1 s", False, "SLO 2K lane TTFT: not measured")
    assert judge([item()], MODULES, ["tools"], checks=[ok]).verdict == PASS
    v = judge([item()], MODULES, ["tools"], checks=[ok, slow])
    assert v.verdict == FAIL and v.reasons == (slow.reason,)
    v = judge([item()], MODULES, ["tools"], checks=[ok, unmeasured])
    assert v.verdict == INCOMPLETE and v.incomplete == (unmeasured.reason,)
    lines = render_table(judge([item()], MODULES, ["tools"], checks=[ok, slow]))
    assert lines[-1].startswith("SLO 1K lane TTFT") and lines[-1].endswith("1.5 s (max of 3) (limit <= 1 s)  FAIL")
    assert lines[-2].endswith("0.2 s (max of 3) (limit <= 1 s)")


def test_exit_codes_tell_the_three_verdicts_apart():
    assert EXIT_CODES == {PASS: 0, FAIL: 1, INCOMPLETE: 2}


def test_skip_is_not_a_pass():
    v = judge([item(outcome="skipped", reason="skipped: no video")], MODULES, ["tools"])
    assert v.verdict == FAIL


def test_rerun_is_a_failure_even_if_it_later_passes():
    r = item()
    r.record("call", "rerun", "flaky")
    r.record("call", "passed", "")
    assert judge([r], MODULES, ["tools"]).verdict == FAIL


def test_failure_in_setup_then_pass_in_call_stays_failed():
    r = item()
    r.record("setup", "failed", "server died")
    r.record("call", "passed", "")
    assert not r.passed and r.reason == "[setup] server died"


def test_waiver_applies_only_to_waivable_modules():
    corpus = item(module="multimodal", outcome="failed", reason="missing required word 'alert'", name="test_item[video-13]")
    hard = item(module="tools", outcome="failed", reason="wrong_value")
    v = judge([corpus, hard], MODULES, ["multimodal", "tools"], waivers=_waive_all("accepted caveat"))
    assert [r.module for r in v.waived] == ["multimodal"]
    assert [r.module for r in v.failures] == ["tools"]
    assert v.verdict == FAIL
    v2 = judge([item(module="multimodal", outcome="failed", reason="x")], MODULES, ["multimodal"], waivers=_waive_all("ok"))
    assert v2.verdict == PASS
    assert "(1 waived)" in v2.rows[0].result


def test_run_problem_fails_an_otherwise_clean_run():
    v = judge([item()], MODULES, ["tools"], run_problems=["server died during test_x"])
    assert v.verdict == FAIL and "server died during test_x" in v.summary_lines()[1]


def test_table_marks_failing_rows():
    lines = render_table(judge([item(outcome="failed", reason="x")], MODULES, ["tools"]))
    assert lines[0].startswith("Gate") and lines[2].endswith("FAIL")


@given(st.lists(st.tuples(st.integers(1, 3), st.booleans()), min_size=1, max_size=30))
def test_pass_iff_every_item_passed(outcomes):
    results = [item(rep=rep, outcome="passed" if ok else "failed", reason="r", name=f"t{i}") for i, (rep, ok) in enumerate(outcomes)]
    v = judge(results, MODULES, ["tools"])
    assert (v.verdict == PASS) == all(ok for _, ok in outcomes)
    assert v.rows[0].passed == sum(ok for _, ok in outcomes)


def test_a_stage_gates_its_own_modules_and_names_itself():
    from pytest_qualify.profiles import load_profile

    preflight = load_profile("262k").stage("preflight")
    ran = [item("smoke", reps=1), item("json", reps=1), item("context", reps=1)]
    v = judge(ran, MODULES, preflight.modules, stage=preflight)
    # tools is part of the preflight: a preflight without it is no preflight.
    assert v.verdict == INCOMPLETE and any("'tools'" in r and "every module of stage preflight" in r for r in v.reasons)
    v = judge([*ran, item("tools", reps=1)], MODULES, preflight.modules, stage=preflight)
    assert v.verdict == PASS
    assert v.summary_lines()[0] == "PREFLIGHT: PASS (stage preflight; not a qualification)"
    full = load_profile("262k").stage("full")
    assert judge([item(reps=1)], MODULES, ["tools"], stage=full).summary_lines()[0] == "QUALIFICATION: PASS"
    assert judge([item(reps=1)], MODULES, ["tools"]).summary_lines()[0] == "QUALIFICATION: PASS"


# -- the end of a run: gate.decide(record) ------------------------------------------------------------

FAR = dt.date(2099, 1, 1)


def lane_facts(ttft_s: float) -> RunFacts:
    """Facts of a run with one 1K context item: what the SLOs and the baseline read."""
    lane_item = {"nodeid": "ctx[rep1of1]", "module": "context", "item": "test_lane[1K]", "lane": "1K", "repetition": 1,
                 "outcome": "passed", "waiver": None, "properties": {"ttft_s": ttft_s, "e2e_s": ttft_s}}
    spread = {"median": ttft_s, "min": ttft_s, "max": ttft_s, "n": 1}
    return RunFacts(items=(lane_item,), simulated=True, run={"workers": 0},
                    profile={"name": "small", "deployment": {}},
                    timing={"decode_tok_s": None, "prefill_tok_s": None,
                            "lanes": [{"lane": "1K", "ttft_s": spread, "e2e_s": spread}]})


def waiver_set(*patterns: str) -> WaiverSet:
    return WaiverSet(tuple(Waiver(p, "known caption gap", FAR, i) for i, p in enumerate(patterns, 1)),
                     ("multimodal",), "waivers.toml")


def test_decide_is_pure_and_returns_a_frozen_decision():
    corpus = item(module="multimodal", outcome="failed", reason="lacks 'alert'", name="test_item[video-13]")
    ws = waiver_set("test_item[video-13]")
    record = RunRecord(results=(corpus, item()), modules=MODULES, required=("multimodal", "tools"), waivers=ws)
    decision = decide(record)
    assert isinstance(decision, Decision) and decision.verdict == PASS
    assert [r.waiver for r in decision.waived] == ["known caption gap (waiver #1, expires 2099-01-01)"]
    assert decision.waivers["waivers"][0]["status"] == "applied"
    # Nothing handed in changed: the result carries no waiver, the waiver set recorded nothing.
    assert corpus.waiver is None and ws.matched == {} and ws.applied == {}
    assert decide(record) == decision  # the same record, the same decision
    with pytest.raises(dataclasses.FrozenInstanceError):
        decision.verdict = FAIL  # type: ignore[misc]


def test_a_waiver_on_a_hard_module_is_a_usage_error_field_not_a_string_to_parse():
    hard = item(outcome="failed", reason="wrong_value", name="test_case[c1]")
    decision = decide(RunRecord(results=(hard,), modules=MODULES, required=("tools",), waivers=waiver_set("test_case[c1]")))
    assert decision.verdict == FAIL
    assert len(decision.waiver_errors) == 1 and "hard serving-contract module 'tools'" in decision.waiver_errors[0]
    assert [f.item for f in decision.failures] == ["test_case[c1]"]  # never waived
    clean = decide(RunRecord(results=(hard,), modules=MODULES, required=("tools",), waivers=waiver_set("test_item[*]")))
    assert clean.waiver_errors == ()


def test_slo_rows_are_decided_with_the_items():
    ok = ItemResult("ctx[rep1of1]", "context", "test_lane[1K]", 1, 1, "1K")
    slo = Slo(lanes=(LaneSlo("1K", 0.5, None),), decode_tok_s_p50_min=None, ttft_s_p95_max=None)
    held = decide(RunRecord(results=(ok,), modules=MODULES, required=("context",), slo=slo, facts=lane_facts(0.2)))
    assert held.verdict == PASS and [r.ok for r in held.slo] == [True] and len(held.checks) == 1
    broke = decide(RunRecord(results=(ok,), modules=MODULES, required=("context",), slo=slo, facts=lane_facts(0.9)))
    assert broke.verdict == FAIL and [r.ok for r in broke.slo] == [False]
    assert any("SLO 1K lane TTFT" in r for r in broke.reasons)


@pytest.mark.parametrize(("fail_on_regression", "verdict"), [(False, PASS), (True, FAIL)])
def test_regressions_are_a_field_and_fail_only_when_asked(fail_on_regression, verdict):
    ok = ItemResult("ctx[rep1of1]", "context", "test_lane[1K]", 1, 1, "1K")
    before = {**lane_facts(0.1).summary_sections([]), "run": {"id": "earlier", "workers": 0},
              "gate": [{"module": "context", "title": "Context", "items": 1, "passed": 1, "waived": 0}]}
    decision = decide(RunRecord(results=(ok,), modules=MODULES, required=("context",), facts=lane_facts(0.2),
                                baseline=BaselineInput(before, threshold_pct=10, fail_on_regression=fail_on_regression)))
    assert decision.verdict == verdict
    assert [r.split(":")[0] for r in decision.regressions] == ["1K lane TTFT (s)", "1K lane end to end (s)"]
    assert decision.baseline["run_id"] == "earlier" and decision.baseline["flips"] == []


def test_evidence_that_could_not_be_written_leaves_a_pass_unjudged_and_a_fail_failed():
    passed = decide(RunRecord(results=(item(),), modules=MODULES, required=("tools",)))
    amended = with_unjudged(passed, "evidence bundle could not be written to /x: OSError")
    assert amended.verdict == INCOMPLETE and amended.incomplete[-1].startswith("evidence bundle")
    failed = decide(RunRecord(results=(item(outcome="failed", reason="x"),), modules=MODULES, required=("tools",)))
    assert with_unjudged(failed, "no bundle").verdict == FAIL


def test_the_end_of_a_run_decides_once_and_the_summary_renders_that_decision(tmp_path, monkeypatch):
    profile = load_profile("small")
    settings = Settings(profile="small", repeat=1, endpoint="reference", api_key_env="QUALIFY_API_KEY",
                        evidence_dir=tmp_path, serve_command=None, startup_timeout_s=None)
    state = RunState(settings, profile, "20260101T000000Z-abcdef", tmp_path / "run", is_worker=False)
    (tmp_path / "run").mkdir()
    corpus = item(module="multimodal", outcome="failed", reason="lacks 'alert'", name="test_item[video-13]")
    state.results = {r.nodeid: r for r in (corpus, item("smoke", name="test_health"))}
    ev = EvidenceState(waivers=waiver_set("test_item[video-13]"))
    calls = []
    real = gate.decide
    monkeypatch.setattr(gate, "decide", lambda record: calls.append(record) or real(record))
    end = run_record(state, ev, modules=MODULES, required=("smoke", "multimodal"), problems=[])
    decision = conclude(end, state, ev, secrets=())
    assert len(calls) == 1 and decision.verdict == PASS, decision.reasons
    assert corpus.waiver is None and ev.waivers.applied == {}  # nothing handed in changed
    s = ev.summary
    assert s["verdict"]["result"] == PASS and [w["item"] for w in s["verdict"]["waived"]] == ["test_item[video-13]"]
    assert [i["waiver"] is not None for i in s["items"]] == [True, False]
    assert s["waivers"]["waivers"][0]["status"] == "applied"
    assert Path(ev.bundle_dir, "summary.json").is_file()


# -- proof of grading: a pass counts only when its call ran and its grader said so -----------------


def test_a_pass_without_its_call_phase_is_not_graded_and_the_run_incomplete():
    """``--setup-only`` reports setup and teardown passed and no call at all."""
    no_call = ItemResult(nodeid="tools::test_case[c1][rep1of3]", module="tools", item="test_case[c1]", repetition=1,
                         repetitions=3)
    for when in ("setup", "teardown"):
        no_call.record(when, "passed", "")
    results = gate.proof_of_grading([item("smoke", name="test_health"), no_call], graded={"smoke::test_health[rep1of3]"})
    verdict = judge(results, MODULES, ["smoke", "tools"])
    assert verdict.verdict == INCOMPLETE and EXIT_CODES[verdict.verdict] == 2
    assert verdict.reasons == ("not graded: tools: test_case[c1], repetition 1: reported passed, but its call phase "
                               "did not run (no test body ran)",)
    assert [f.row for f in verdict.findings] == ["not_graded"] and not verdict.findings[0].judged
    assert not verdict.failures and [r.passed for r in results] == [True, False]
    assert {row.module: row.passed for row in verdict.rows} == {"smoke": 1, "tools": 0}


def test_a_journaled_pass_with_no_verdict_is_not_graded_in_one_line_naming_the_first():
    results = [(item("tools", rep=rep, name=f"test_case[c{n}]")) for rep in (1, 2) for n in (1, 2)]
    graded = {results[0].nodeid}
    verdict = judge(gate.proof_of_grading(results, graded), MODULES, ["tools"])
    assert verdict.verdict == INCOMPLETE
    (reason,) = verdict.reasons
    assert reason == ("not graded: tools: test_case[c2], repetition 1: reported passed, but its grader recorded no "
                      "verdict in the answer journal (and 2 more item(s))")
    # Where the grader does not journal (a test file of the operator's own), the call phase suffices.
    assert judge(gate.proof_of_grading(results, graded, journaled=lambda r: False), MODULES, ["tools"]).passed


def test_proof_of_grading_changes_no_result_and_leaves_failures_judged():
    failed = item("tools", outcome="failed", reason="wrong tool")
    passed = (item("tools", name="test_case[c2]"))
    out = gate.proof_of_grading([failed, passed], graded=())
    assert passed.outcome == "passed" and out[1].outcome == gate.UNGRADED and out[0] is failed
    # A judged failure outranks the unjudged pass: the deployment failed an item.
    assert judge(out, MODULES, ["tools"]).verdict == FAIL


def test_a_findings_kind_is_told_by_the_record_never_by_the_reasons_words():
    from pytest_qualify.gate.decide import FindingKind

    partial = "partial run: 3 protocol items deselected (-k, -m, --deselect, --lf, ...); a promotion needs the whole protocol"
    selected = decide(RunRecord(results=(item(),), modules=MODULES, required=("tools",), incomplete=(partial,),
                                selection=(partial,)))
    assert selected.verdict == INCOMPLETE
    assert [(f.row, f.kind, f.judged) for f in selected.findings] == [("partial_run", FindingKind.SELECTION, False)]
    # The same words as a plain incomplete reason are a run finding: nothing re-reads the reason.
    plain = decide(RunRecord(results=(item(),), modules=MODULES, required=("tools",), incomplete=(partial,)))
    assert [f.kind for f in plain.findings] == [FindingKind.RUN]
    assert selected.findings[0].as_dict()["kind"] == "selection"  # the summary's word


def test_the_gate_cases_are_the_decisions_own_never_handed_in():
    decision = judge([item()], MODULES, ["tools"], run_problems=["server died during the run: exit 9"],
                     incomplete=["partial run: 1 protocol items deselected"])
    assert [(c.name, c.tag, c.type, c.message) for c in decision.gate_cases] == [
        ("server_died_during_the_run", "failure", "qualify.run", "server died during the run: exit 9"),
        ("partial_run", "error", "qualify.not_judged", "partial run: 1 protocol items deselected")]
    assert decision.gate_cases[1].text == ("partial run: 1 protocol items deselected\n\n"
                                           "gate row: partial_run (run); verdict FAIL")
    assert decision.gate_cases[0].nodeid == "qualify.gate::server_died_during_the_run"
    with pytest.raises(TypeError):
        Decision(verdict=PASS, rows=(), failures=(), waived=(), reasons=(), gate_cases=())  # type: ignore[call-arg]
    # A decision made from another carries its own cases: the verdict they name is its own.
    amended = dataclasses.replace(decision, verdict=INCOMPLETE)
    assert all(c.text.endswith("verdict INCOMPLETE") for c in amended.gate_cases)
    assert judge([item()], MODULES, ["tools"]).gate_cases == ()


def test_a_long_or_many_line_reason_is_one_short_message_and_whole_in_the_text():
    reason = "server died during the run: " + "x" * 900 + "\nlog tail"
    (case,) = judge([item()], MODULES, ["tools"], run_problems=[reason]).gate_cases
    assert "\n" not in case.message and len(case.message) == gate.MESSAGE_MAX and case.message.endswith("…")
    assert case.text.startswith(reason)
