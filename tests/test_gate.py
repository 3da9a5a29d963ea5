"""The gate: pass^k, every required module, waivers only where the module is waivable."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pytest_qualify.gate import EXIT_CODES, FAIL, INCOMPLETE, PASS, CheckRow, ItemResult, evaluate, render_table
from pytest_qualify.profiles import module_registry

MODULES = module_registry()


def item(module="tools", rep=1, reps=3, outcome="passed", reason="", name="test_case[c1]"):
    r = ItemResult(nodeid=f"{module}::{name}[rep{rep}of{reps}]", module=module, item=name, repetition=rep, repetitions=reps)
    if outcome != "passed":
        r.record("call", outcome, reason)
    return r


def test_all_pass_is_pass():
    v = evaluate([item(rep=r) for r in (1, 2, 3)], MODULES, ["tools"])
    assert v.verdict == PASS
    assert v.rows[0].result == "3/3, 3/3 repetitions"


def test_one_failure_in_one_repetition_fails_with_its_reason():
    results = [item(rep=1), item(rep=2, outcome="failed", reason="wrong_value: city"), item(rep=3)]
    v = evaluate(results, MODULES, ["tools"])
    assert v.verdict == FAIL
    assert v.rows[0].result == "2/3, 2/3 repetitions"
    assert any("repetition 2" in line and "wrong_value: city" in line for line in v.summary_lines())


def test_missing_required_module_is_incomplete_never_a_pass():
    v = evaluate([item()], MODULES, ["tools", "recall"])
    assert v.verdict == INCOMPLETE
    assert any("'recall'" in r for r in v.reasons) and any("'recall'" in r for r in v.incomplete)


def test_no_tests_is_incomplete():
    assert evaluate([], MODULES, ["tools"]).verdict == INCOMPLETE


def test_a_judged_failure_outranks_incompleteness():
    v = evaluate([item(outcome="failed", reason="wrong_value")], MODULES, ["tools"],
                 incomplete=["run interrupted before the protocol finished"])
    assert v.verdict == FAIL
    assert v.incomplete == ("run interrupted before the protocol finished",)


def test_interruption_or_partial_selection_alone_is_incomplete():
    for why in ("run interrupted before the protocol finished", "partial run: 1 protocol items deselected"):
        v = evaluate([item()], MODULES, ["tools"], incomplete=[why])
        assert v.verdict == INCOMPLETE and v.reasons == (why,) and not v.passed


def test_an_unavailable_target_judges_nothing_even_when_items_failed():
    failed = [item(outcome="failed", reason="the server never started: connection refused")]
    v = evaluate(failed, MODULES, ["tools"], incomplete=["server startup failed: exit code 3"], target_unavailable=True)
    assert v.verdict == INCOMPLETE
    assert evaluate(failed, MODULES, ["tools"]).verdict == FAIL


def test_a_dead_server_is_a_judged_failure():
    v = evaluate([item()], MODULES, ["tools"], run_problems=["server died during test_x"])
    assert v.verdict == FAIL


def test_check_rows_fail_or_leave_the_run_incomplete():
    ok = CheckRow("SLO 1K lane TTFT", "0.2 s (max of 3)", "<= 1 s", True)
    slow = CheckRow("SLO 1K lane TTFT", "1.5 s (max of 3)", "<= 1 s", False, "SLO 1K lane TTFT: measured 1.5 s exceeds 1 s")
    unmeasured = CheckRow("SLO 2K lane TTFT", None, "<= 1 s", False, "SLO 2K lane TTFT: not measured")
    assert evaluate([item()], MODULES, ["tools"], checks=[ok]).verdict == PASS
    v = evaluate([item()], MODULES, ["tools"], checks=[ok, slow])
    assert v.verdict == FAIL and v.reasons == (slow.reason,)
    v = evaluate([item()], MODULES, ["tools"], checks=[ok, unmeasured])
    assert v.verdict == INCOMPLETE and v.incomplete == (unmeasured.reason,)
    lines = render_table(evaluate([item()], MODULES, ["tools"], checks=[ok, slow]))
    assert lines[-1].startswith("SLO 1K lane TTFT") and lines[-1].endswith("1.5 s (max of 3) (limit <= 1 s)  FAIL")
    assert lines[-2].endswith("0.2 s (max of 3) (limit <= 1 s)")


def test_exit_codes_tell_the_three_verdicts_apart():
    assert EXIT_CODES == {PASS: 0, FAIL: 1, INCOMPLETE: 2}


def test_skip_is_not_a_pass():
    v = evaluate([item(outcome="skipped", reason="skipped: no video")], MODULES, ["tools"])
    assert v.verdict == FAIL


def test_rerun_is_a_failure_even_if_it_later_passes():
    r = item()
    r.record("call", "rerun", "flaky")
    r.record("call", "passed", "")
    assert evaluate([r], MODULES, ["tools"]).verdict == FAIL


def test_failure_in_setup_then_pass_in_call_stays_failed():
    r = item()
    r.record("setup", "failed", "server died")
    r.record("call", "passed", "")
    assert not r.passed and r.reason == "[setup] server died"


def test_waiver_applies_only_to_waivable_modules():
    corpus = item(module="multimodal", outcome="failed", reason="missing required word 'alert'", name="test_item[video-13]")
    hard = item(module="tools", outcome="failed", reason="wrong_value")
    v = evaluate([corpus, hard], MODULES, ["multimodal", "tools"], waiver_for=lambda r: "accepted caveat")
    assert [r.module for r in v.waived] == ["multimodal"]
    assert [r.module for r in v.failures] == ["tools"]
    assert v.verdict == FAIL
    v2 = evaluate([item(module="multimodal", outcome="failed", reason="x")], MODULES, ["multimodal"], waiver_for=lambda r: "ok")
    assert v2.verdict == PASS
    assert "(1 waived)" in v2.rows[0].result


def test_run_problem_fails_an_otherwise_clean_run():
    v = evaluate([item()], MODULES, ["tools"], run_problems=["server died during test_x"])
    assert v.verdict == FAIL and "server died during test_x" in v.summary_lines()[1]


def test_table_marks_failing_rows():
    lines = render_table(evaluate([item(outcome="failed", reason="x")], MODULES, ["tools"]))
    assert lines[0].startswith("Gate") and lines[2].endswith("FAIL")


@given(st.lists(st.tuples(st.integers(1, 3), st.booleans()), min_size=1, max_size=30))
def test_pass_iff_every_item_passed(outcomes):
    results = [item(rep=rep, outcome="passed" if ok else "failed", reason="r", name=f"t{i}") for i, (rep, ok) in enumerate(outcomes)]
    v = evaluate(results, MODULES, ["tools"])
    assert (v.verdict == PASS) == all(ok for _, ok in outcomes)
    assert v.rows[0].passed == sum(ok for _, ok in outcomes)


def test_a_stage_gates_its_own_modules_and_names_itself():
    from pytest_qualify.profiles import load_profile

    preflight = load_profile("262k").stage("preflight")
    ran = [item("smoke", reps=1), item("json", reps=1), item("context", reps=1)]
    v = evaluate(ran, MODULES, preflight.modules, stage=preflight)
    # tools is part of the preflight: a preflight without it is no preflight.
    assert v.verdict == INCOMPLETE and any("'tools'" in r and "every module of stage preflight" in r for r in v.reasons)
    v = evaluate([*ran, item("tools", reps=1)], MODULES, preflight.modules, stage=preflight)
    assert v.verdict == PASS
    assert v.summary_lines()[0] == "PREFLIGHT: PASS (stage preflight; not a qualification)"
    full = load_profile("262k").stage("full")
    assert evaluate([item(reps=1)], MODULES, ["tools"], stage=full).summary_lines()[0] == "QUALIFICATION: PASS"
    assert evaluate([item(reps=1)], MODULES, ["tools"]).summary_lines()[0] == "QUALIFICATION: PASS"
