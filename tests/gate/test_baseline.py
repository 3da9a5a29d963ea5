"""Baseline comparison: % deltas per lane, throughput and gate counts; regressions flagged beyond
the threshold and, with --qualify-fail-on-regression, failing the gate."""

from __future__ import annotations

import copy
import json

import pytest

from ..helpers import pytester_run, write_profile
from pytest_qualify.gate.baseline import BaselineError, check_comparable, compare, delta_pct, load_baseline, render_rows
from pytest_qualify.bundle_format.schema import validate


def spread(median: float) -> dict:
    return {"median": median, "min": median, "max": median, "n": 1}


def summary(ttft: dict[str, float], decode: tuple[float, float], prefill: float, gate: dict[str, tuple[int, int]],
            simulated: bool = False) -> dict:
    """Just the parts of a summary.json that the comparison reads."""
    return {
        "run": {"id": "run", "workers": 0},
        "simulated": simulated,
        "profile": {"name": "262k", "deployment": {"model": "m", "revision": "r", "served_name": "s", "engine": "e",
                                                   "quantization": "fp8", "kv_cache_dtype": "fp8"}},
        "timing": {
            "lanes": [{"lane": name, "ttft_s": spread(v), "e2e_s": spread(v * 1.1)} for name, v in ttft.items()],
            "decode_tok_s": {"p50": decode[0], "p95": decode[1], "n": 10},
            "prefill_tok_s": {"p50": prefill, "n": 10},
        },
        "gate": [{"module": m, "title": m.title(), "items": n, "passed": p, "waived": 0} for m, (p, n) in gate.items()],
    }


SEED = summary({"32K": 1.571, "128K": 12.839, "240K": 35.209}, (169.19, 181.44), 10601.0,
               {"context": (9, 9), "tools": (72, 72)})


def rows(comparison: dict) -> dict:
    return {r["metric"]: r for r in comparison["rows"]}


def test_delta_pct():
    assert delta_pct(100.0, 110.0) == pytest.approx(10.0)
    assert delta_pct(100.0, 90.0) == pytest.approx(-10.0)
    assert delta_pct(0.0, 1.0) is None and delta_pct(None, 1.0) is None and delta_pct(1.0, None) is None


def test_identical_runs_have_no_regression():
    c = compare(SEED, SEED, threshold_pct=10)
    assert c["regressions"] == [] and c["notes"] == []
    assert all(r["delta_pct"] in (0.0, None) for r in c["rows"])


def test_slower_lane_and_decode_beyond_threshold_are_regressions():
    current = summary({"32K": 1.60, "128K": 15.0, "240K": 35.0}, (150.0, 180.0), 10601.0,
                      {"context": (9, 9), "tools": (71, 72)})
    c = compare(current, SEED, path="old/summary.json", threshold_pct=10)
    r = rows(c)
    assert r["32K lane TTFT (s)"]["delta_pct"] == pytest.approx((1.60 - 1.571) / 1.571 * 100)
    assert not r["32K lane TTFT (s)"]["regression"]          # +1.8%: within 10%
    assert r["128K lane TTFT (s)"]["regression"]             # +16.8%: slower
    assert not r["240K lane TTFT (s)"]["regression"]         # faster is never a regression
    assert r["decode tok/s p50"]["regression"]               # -11.3%: lower throughput
    assert not r["decode tok/s p95"]["regression"]
    assert r["gate: Tools"]["regression"] and r["gate: Tools"]["current"] == "71/72"
    assert c["regressions"] == [
        "128K lane TTFT (s): 12.839 -> 15.000 (+16.8%, threshold 10%)",
        "128K lane end to end (s): 14.123 -> 16.500 (+16.8%, threshold 10%)",
        "decode tok/s p50: 169.2 -> 150.0 (-11.3%, threshold 10%)",
        "gate Tools: 72/72 -> 71/72",
    ]
    text = render_rows(c)
    assert ("128K lane TTFT (s)", "12.839", "15.000", "+16.8% REGRESSION") in text
    assert ("prefill tok/s p50", "10,601.0", "10,601.0", "+0.0%") in text


def test_threshold_is_respected():
    current = summary({"32K": 1.571 * 1.2, "128K": 12.839, "240K": 35.209}, (169.19, 181.44), 10601.0,
                      {"context": (9, 9), "tools": (72, 72)})
    assert compare(current, SEED, threshold_pct=25)["regressions"] == []
    assert len(compare(current, SEED, threshold_pct=5)["regressions"]) == 2  # TTFT and end to end


def test_lanes_missing_on_one_side_are_shown_without_delta():
    current = summary({"32K": 1.5}, (169.19, 181.44), 10601.0, {"context": (3, 3)})
    r = rows(compare(current, SEED))
    assert r["240K lane TTFT (s)"]["current"] is None and r["240K lane TTFT (s)"]["delta_pct"] is None
    assert r["gate: Tools"]["current"] is None and not r["gate: Tools"]["regression"]


def test_notes_say_what_is_not_like_for_like():
    other = copy.deepcopy(SEED)
    other["profile"]["deployment"]["revision"] = "r2"
    notes = compare(other, SEED)["notes"]
    assert "deployment revision differs: baseline 'r', this run 'r2'" in notes


def test_a_simulated_baseline_of_a_real_run_and_the_reverse_are_refused():
    """Known before the server starts (the reference server is SIMULATED): refused by check_comparable."""
    from pytest_qualify.profiles import load_profile

    workload = load_profile("262k").workload("full")
    real, simulated = _summary_of("262k"), {**_summary_of("262k"), "simulated": True}
    with pytest.raises(BaselineError, match=r"^baseline b\.json: run run cannot be compared: this run is SIMULATED, "
                                            r"the baseline is real; a SIMULATED run is never compared with a real one"):
        check_comparable(real, workload=workload, path="b.json", simulated=True)
    with pytest.raises(BaselineError, match="the baseline is SIMULATED, this run is real"):
        check_comparable(simulated, workload=workload, simulated=False)
    check_comparable(simulated, workload=workload, simulated=True)
    check_comparable(real, workload=workload, simulated=None)  # an endpoint: not known yet


@pytest.mark.parametrize("baseline_simulated", [True, False])
def test_the_gate_refuses_a_simulated_mismatch_found_once_the_endpoint_said_which_it_is(baseline_simulated):
    """An endpoint says it is SIMULATED only once contacted: the gate then makes no comparison and
    the run is a usage error (exit 4), as a waiver naming a hard module is."""
    from pytest_qualify.gate.decide import BaselineInput, ItemResult, RunRecord, decide
    from pytest_qualify.gate.run_facts import RunFacts
    from pytest_qualify.profiles import module_registry

    ok = ItemResult("smoke::t[rep1of1]", "smoke", "t", 1, 1)
    ok.record("call", "passed", "")
    facts = {**copy.deepcopy(SEED), "items": [], "simulated": not baseline_simulated}
    before = {**copy.deepcopy(SEED), "simulated": baseline_simulated}
    decision = decide(RunRecord(results=(ok,), modules=module_registry(), required=("smoke",), facts=RunFacts.of(facts),
                                baseline=BaselineInput(before, path="b.json")))
    assert decision.baseline is None and len(decision.baseline_errors) == 1
    assert "cannot be compared" in decision.baseline_errors[0] and "\n" not in decision.baseline_errors[0]
    assert list(decision.reasons) == [f"usage error in --qualify-baseline: {decision.baseline_errors[0]}"]
    same = decide(RunRecord(results=(ok,), modules=module_registry(), required=("smoke",),
                            facts=RunFacts.of({**facts, "simulated": baseline_simulated}), baseline=BaselineInput(before)))
    assert same.baseline_errors == () and same.baseline is not None


def test_load_baseline_rejects_what_is_not_a_summary(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text("{}")
    with pytest.raises(BaselineError, match="not a pytest-qualify summary"):
        load_baseline(bad)
    bad.write_text("not json")
    with pytest.raises(BaselineError, match="not JSON"):
        load_baseline(bad)
    bad.write_text(json.dumps({"schema": "pytest-qualify/summary", "schema_version": 1}))
    with pytest.raises(BaselineError, match="invalid"):
        load_baseline(bad)
    with pytest.raises(BaselineError, match="cannot be read"):
        load_baseline(tmp_path / "missing.json")


def _summary_of(name: str, stage: str = "full") -> dict:
    """A summary's workload fields as a run of this built-in profile writes them."""
    from pytest_qualify.profiles import load_profile

    p = load_profile(name)
    st = p.stage(stage)
    return {**SEED, "profile": {"name": p.name, "deployment": {"model": p.deployment.model},
                                "limits": {"window_tokens": p.limits.window_tokens, "answer_tokens": p.limits.answer_tokens,
                                           "reasoning_headroom_tokens": p.limits.reasoning_headroom_tokens,
                                           "lanes": [{"name": x.name, "prompt_tokens": x.prompt_tokens} for x in p.limits.lanes]},
                                "thinking": {"enabled": p.thinking.enabled}, "required_modules": list(p.required_modules)},
            "stage": {"name": stage, "modules": list(st.modules), "lanes": list(st.lanes)},
            "timing": {"load": {"probe_tokens": p.load.probe_tokens,
                                "levels": [{"concurrency": c} for c in p.load.levels]} if p.load else None},
            "items": []}


def test_a_baseline_of_the_same_workload_is_comparable_whatever_its_profile_is_called():
    from pytest_qualify.profiles import load_profile

    base = _summary_of("262k")
    check_comparable(base, workload=load_profile("262k").workload("full"))
    renamed = {**base, "profile": {**base["profile"], "name": "262k-candidate", "deployment": {"model": "another/model"}}}
    check_comparable(renamed, workload=load_profile("262k").workload("full"))


def test_a_baseline_of_another_workload_is_refused_naming_what_differs():
    from pytest_qualify.profiles import load_profile

    with pytest.raises(BaselineError, match=r"baseline b\.json: run run measured another workload: .*lanes: "
                                            r"baseline \{32K 32768.*this run \{1K 1024"):
        check_comparable(_summary_of("262k"), workload=load_profile("small").workload("full"), path="b.json")
    with pytest.raises(BaselineError, match=r"modules: baseline \[.*\], this run \[context, json, smoke, tools\]"):
        check_comparable(_summary_of("262k"), workload=load_profile("262k").workload("preflight"))


# -- end to end ----------------------------------------------------------------------------------

CHATTY = '''
import pytest

pytestmark = pytest.mark.qualify_module("smoke")


@pytest.mark.parametrize("n", range(3))
def test_stream(n, qualify_client, qualify_record):
    answer = qualify_client.chat([{"role": "user", "content": "What is the capital of France? Answer with one word."}],
                                 stream=True, max_tokens=16, temperature=0)
    qualify_record.answer(answer)
'''


def test_regression_against_a_baseline_fails_the_gate(pytester, tmp_path):
    profile = write_profile(tmp_path)
    pytester.makepyfile(test_chatty=CHATTY)

    def run(evidence: str, *args: str) -> pytest.RunResult:
        return pytester_run(pytester, f"--qualify={profile}", "--qualify-endpoint",
                                             "reference", "--qualify-evidence", str(tmp_path / evidence),
                                             *args, "test_chatty.py")

    first = run("ev1")
    assert first.ret == 0, first.stdout.str()
    (first_dir,) = (tmp_path / "ev1").iterdir()
    baseline = json.loads((first_dir / "summary.json").read_text())
    # The earlier run decoded a thousand times faster (a regression of ~99.9%, whatever the noise
    # of this machine) and prefilled at a crawl (never a regression).
    baseline["timing"]["decode_tok_s"]["p50"] *= 1000
    baseline["timing"]["decode_tok_s"]["p95"] *= 1000
    baseline["timing"]["prefill_tok_s"]["p50"] = 0.001
    validate(baseline)
    path = tmp_path / "baseline.json"
    path.write_text(json.dumps(baseline))

    second = run("ev2", "--qualify-baseline", str(path), "--qualify-fail-on-regression", "25")
    out = second.stdout.str()
    assert second.ret == pytest.ExitCode.TESTS_FAILED, out
    assert "QUALIFICATION: FAIL" in out
    assert f"performance regression against baseline run {baseline['run']['id']} beyond 25%: decode tok/s p50" in out
    assert "REGRESSION" in out  # the terminal's head-to-head table
    (second_dir,) = (tmp_path / "ev2").iterdir()
    summary = json.loads((second_dir / "summary.json").read_text())
    validate(summary)
    assert summary["baseline"]["fail_on_regression"] is True
    assert [r.split(":")[0] for r in summary["baseline"]["regressions"]] == ["decode tok/s p50", "decode tok/s p95"]
    report = (second_dir / "report.md").read_text()
    assert "## Against the baseline" in report and "| decode tok/s p50 |" in report and "REGRESSION" in report
    # Everything passed: the regression alone failed the gate.
    assert summary["verdict"]["failures"] == [] and summary["gate"][0]["ok"] is True

    # Another profile's name measuring the same workload is comparable (a candidate against the
    # incumbent); another workload (its lanes at other sizes) is a usage error before any server starts.
    baseline["profile"]["name"] = "other-profile"
    baseline["profile"]["limits"]["lanes"] = [{**lane, "prompt_tokens": lane["prompt_tokens"] * 2}
                                              for lane in baseline["profile"]["limits"]["lanes"]]
    baseline["stage"]["modules"] = ["smoke", "context"]
    path.write_text(json.dumps(baseline))
    third = run("ev3", "--qualify-baseline", str(path))
    assert third.ret == pytest.ExitCode.USAGE_ERROR, third.stdout.str()
    err = third.stderr.str()
    assert (f"--qualify-baseline: baseline {path}: run {baseline['run']['id']} measured another workload: "
            "modules: baseline [context, smoke], this run [smoke]") in err

    # A real baseline against the SIMULATED reference server: refused before it starts, in one line.
    real = json.loads((first_dir / "summary.json").read_text())
    real["simulated"] = False
    path.write_text(json.dumps(real))
    fourth = run("ev4", "--qualify-baseline", str(path))
    assert fourth.ret == pytest.ExitCode.USAGE_ERROR, fourth.stdout.str()
    (line,) = [x for x in fourth.stderr.str().splitlines() if "--qualify-baseline" in x]
    assert line.endswith(f"--qualify-baseline: baseline {path}: run {real['run']['id']} cannot be compared: this run "
                         "is SIMULATED, the baseline is real; a SIMULATED run is never compared with a real one "
                         "(the reference server measures no deployment)")
    assert not list((tmp_path / "ev4").rglob("summary.json"))  # no run was made


def test_fail_on_regression_needs_a_baseline(pytester):
    result = pytester_run(pytester, "--qualify=small", "--qualify-endpoint",
                                           "reference", "--qualify-fail-on-regression", "10")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--qualify-fail-on-regression needs --qualify-baseline" in result.stderr.str()
