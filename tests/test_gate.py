"""The gate: pass^k, every required module, waivers only where the module is waivable."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pytest_qualify.gate import FAIL, PASS, ItemResult, evaluate, render_table
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


def test_missing_required_module_fails():
    v = evaluate([item()], MODULES, ["tools", "recall"])
    assert v.verdict == FAIL
    assert any("'recall'" in r for r in v.reasons)


def test_no_tests_is_fail():
    assert evaluate([], MODULES, ["tools"]).verdict == FAIL


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
    assert v.verdict == FAIL and any("'tools'" in r and "every module of stage preflight" in r for r in v.reasons)
    v = evaluate([*ran, item("tools", reps=1)], MODULES, preflight.modules, stage=preflight)
    assert v.verdict == PASS
    assert v.summary_lines()[0] == "PREFLIGHT: PASS (stage preflight; not a qualification)"
    full = load_profile("262k").stage("full")
    assert evaluate([item(reps=1)], MODULES, ["tools"], stage=full).summary_lines()[0] == "QUALIFICATION: PASS"
    assert evaluate([item(reps=1)], MODULES, ["tools"]).summary_lines()[0] == "QUALIFICATION: PASS"
