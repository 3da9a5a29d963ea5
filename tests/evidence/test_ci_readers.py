"""What CI reads: the verdict (PASS, FAIL, INCOMPLETE) and its exit status in summary.json, the JUnit
suite properties and the last terminal line; JUnit that a viewer without <properties> (GitLab) can
read; the GITHUB_STEP_SUMMARY job summary and its cap; how much evidence stands behind a verdict
(Wilson intervals) and the per-item flips against a baseline."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from ..helpers import SMOKE, pytester_run, write_profile
from pytest_qualify.gate import decide as gate
from pytest_qualify.evidence import job_summary, junit
from pytest_qualify.profiles import module_registry, protocol_modules
from pytest_qualify.evidence.session import CaseRecord
from pytest_qualify.stats import flips, stats_section, wilson
from pytest_qualify.bundle_format.schema import validate
from pytest_qualify.server.lifecycle import free_port
from pytest_qualify.profiles import load_profile
from ..judging import judge, summary_of


# -- Wilson intervals and flips --------------------------------------------------------------------


@pytest.mark.parametrize(("passed", "attempts", "low", "high"), [
    # Newcombe (1998), Statistics in Medicine 17:857-872, table I, method 3 (Wilson score).
    (81, 263, 0.2553, 0.3662), (15, 148, 0.0624, 0.1605), (0, 20, 0.0, 0.1611), (1, 29, 0.0061, 0.1718),
    (29, 29, 0.8830, 1.0),
])
def test_wilson_matches_published_values(passed, attempts, low, high):
    ci = wilson(passed, attempts)
    assert ci is not None
    assert (round(ci.low, 4), round(ci.high, 4)) == (low, high)


def test_wilson_of_nothing_is_no_interval_and_bad_counts_are_refused():
    assert wilson(0, 0) is None
    with pytest.raises(ValueError):
        wilson(4, 3)


def test_stats_per_module_and_overall_count_attempts_not_items():
    items = [{"module": "smoke", "outcome": "passed"}] * 10 + [
        {"module": "multimodal", "outcome": "passed"}] * 88 + [
        {"module": "multimodal", "outcome": "failed"}, {"module": "multimodal", "outcome": "skipped"}]
    s = stats_section(items, {"smoke": "Smoke", "multimodal": "Multimodal corpus"})
    assert [m["module"] for m in s["modules"]] == ["smoke", "multimodal"]
    mm = s["modules"][1]
    assert (mm["passed"], mm["attempts"]) == (88, 90)
    assert mm["wilson_low"] == pytest.approx(wilson(88, 90).low) and mm["wilson_high"] < 1
    assert (s["overall"]["passed"], s["overall"]["attempts"]) == (98, 100)
    assert s["modules"][0]["wilson_high"] == 1.0 and s["modules"][0]["wilson_low"] == pytest.approx(10 / (10 + 1.959963984540054 ** 2))


def test_flips_list_items_that_changed_either_way():
    def item(name: str, rep: int, outcome: str) -> dict:
        return {"module": "tools", "item": name, "repetition": rep, "outcome": outcome}

    before = [item("a", 1, "passed"), item("a", 2, "passed"), item("b", 1, "failed"), item("b", 2, "passed"),
              item("c", 1, "passed"), item("gone", 1, "passed")]
    now = [item("a", 1, "passed"), item("a", 2, "failed"), item("b", 1, "passed"), item("b", 2, "passed"),
           item("c", 1, "passed"), item("new", 1, "failed")]
    assert flips(now, before) == [
        {"module": "tools", "item": "a", "baseline": "2/2", "current": "1/2", "change": "newly failing"},
        {"module": "tools", "item": "b", "baseline": "1/2", "current": "2/2", "change": "newly passing"},
    ]


# -- JUnit for viewers that read no properties -----------------------------------------------------


def synthetic_summary(n_failures: int = 2) -> tuple[dict, dict]:
    profile = load_profile("small")
    results = []
    for rep in (1, 2):
        r = gate.ItemResult(f"suites/test_context.py::test_lane[rep{rep}of2-1K]", "context", "test_lane[1K]", rep, 2, "1K")
        r.properties.update({"qualify_module": "context", "ttft_s": 0.25, "e2e_s": 0.5, "prompt_tokens": 1024})
        if rep <= n_failures:
            r.record("call", "failed", f"1K lane, repetition {rep}: answer '4471' lacks needle value '4417'")
        results.append(r)
    for i in range(max(0, n_failures - 2)):
        r = gate.ItemResult(f"suites/test_tools.py::test_case[rep1of1-c{i}]", "tools", f"test_case[c{i}]", 1, 1)
        r.record("call", "failed", f"case c{i}: wrong_value: city " + "x" * 300)
        results.append(r)
    verdict = judge(results, module_registry(), ("context",))
    cases = {r.nodeid: CaseRecord(r.nodeid, 0.5, "call", 1, "E   AssertionError: long traceback") for r in results
             if not r.passed}
    summary = summary_of(
        run={"id": "run-1", "started_at": "2026-01-01T00:00:00+00:00", "finished_at": "2026-01-01T00:01:00+00:00",
             "duration_s": 60.0, "repeat": 2, "workers": 0, "tool_version": "0.1.0"},
        target={"mode": "reference", "simulated": True, "base_url": None, "launch_command": None,
                "engine_version": "x", "models": [], "startup_error": None, "died": None},
        profile=profile, verdict=verdict, results=results, cases=cases, snapshots={}, metrics_errors={},
        metrics_files=[], artifacts={"plot": None, "notes": []},
    )
    validate(summary)
    return summary, cases


def test_junit_failure_carries_reason_and_key_facts_outside_properties():
    summary, cases = synthetic_summary()
    root = ET.fromstring(junit.build_xml(summary, cases, ()))  # failed items, no run-level reason
    tcs = list(root.iter("testcase"))
    assert len({(tc.get("classname"), tc.get("name")) for tc in tcs}) == len(tcs) == 2
    assert {tc.get("name") for tc in tcs} == {"test_lane[rep1of2-1K]", "test_lane[rep2of2-1K]"}
    rep2 = next(tc for tc in tcs if "rep2of2" in tc.get("name"))
    failure = rep2.find("failure")
    # The message names the item and the reason on one line; the type is the failure kind.
    assert failure.get("message") == ("context: test_lane[1K], repetition 2: "
                                      "1K lane, repetition 2: answer '4471' lacks needle value '4417'")
    assert failure.get("type") == "qualify.other"
    assert rep2.find("properties") is None  # xunit2: no testcase-level properties
    body = failure.text
    assert body.startswith("1K lane, repetition 2: answer '4471' lacks needle value '4417'\nmodule: context")
    assert "repetition: 2 of 2" in body and "ttft_s=0.25" in body and "AssertionError: long traceback" in body
    out = rep2.find("system-out").text
    assert "lane: 1K" in out and "repetition: 2 of 2" in out and "prompt_tokens=1024" in out
    assert "reason: 1K lane, repetition 2" in out


def test_job_summary_is_capped_well_under_githubs_limit():
    summary, _ = synthetic_summary(n_failures=3000)
    text = job_summary.render(summary, bundle_dir="qualify-evidence/run-1", exit_code=1)
    assert len(text.encode()) <= job_summary.MAX_BYTES < 1024 * 1024 // 8
    assert text.startswith("## Qualification: FAIL — `small-chat-4k` (profile `small`) — SIMULATED reference server")
    assert "exit status 1" in text and "| Context retrieval | 0/2, 0/2 repetitions | **FAIL** |" in text
    shown = text.count("\n| tools | ")
    assert 10 < shown < 3000
    assert f"… and {3000 - 2 - shown} more failures in summary.json and junit.xml of the bundle." in text


def test_job_summary_is_written_only_where_github_says(tmp_path):
    summary, _ = synthetic_summary()
    assert job_summary.append(summary, {}, bundle_dir="b", exit_code=1) is None
    target = tmp_path / "step-summary.md"
    target.write_text("earlier step\n")
    assert job_summary.append(summary, {"GITHUB_STEP_SUMMARY": str(target)}, bundle_dir="b", exit_code=1) == str(target)
    text = target.read_text()
    assert text.startswith("earlier step\n## Qualification: FAIL")  # appended, never overwritten
    assert "### Failures (2)" in text
    # A reason that quotes a secret (a server echoing the key) reaches the page masked.
    summary["verdict"]["failures"][0]["reason"] = "401: key sk-live-123 rejected"
    job_summary.append(summary, {"GITHUB_STEP_SUMMARY": str(target)}, bundle_dir="b", exit_code=1,
                       secrets=("sk-live-123",))
    assert "sk-live-123" not in target.read_text() and "401: key *** rejected" in target.read_text()


# -- end to end: the three verdicts as CI sees them -------------------------------------------------


def run(pytester: pytest.Pytester, tmp_path: Path, *args: str, profile: str | None = None) -> pytest.RunResult:
    return pytester_run(pytester, f"--qualify={profile or write_profile(tmp_path)}",
        "--qualify-evidence", str(tmp_path / "ev"), *args,
    )


def bundle_of(tmp_path: Path, name: str = "ev") -> Path:
    (found,) = list((tmp_path / name).iterdir())
    return found


def suite_props(d: Path) -> dict[str, str]:
    suite = ET.parse(d / "junit.xml").getroot().find("testsuite")
    return {p.get("name"): p.get("value") for p in suite.find("properties")}


def test_a_failed_deployment_fails_in_every_place_ci_reads(pytester, tmp_path, monkeypatch):
    step = tmp_path / "step-summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step))
    result = run(pytester, tmp_path, "--qualify-endpoint", "reference", "--repeat", "2",
                 "--qualify-reference-fault", "wrong_identity", SMOKE)
    out = result.stdout.str()
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    d = bundle_of(tmp_path)
    summary = json.loads((d / "summary.json").read_text())
    assert summary["verdict"]["result"] == "FAIL" and summary["verdict"]["incomplete"] == []
    assert suite_props(d)["verdict"] == "FAIL" and suite_props(d)["attempts_passed"] == "8/10"
    # The first step saw another model served: a judged FAIL, stopped after the smoke module.
    last = out.splitlines()[-1]
    assert last.startswith("QUALIFICATION: FAIL (exit 1): the served identity is not the profile's"), last
    assert last.endswith(f" · protocol v3 subset: smoke (1 of {len(protocol_modules())} modules)"
                         f" · SIMULATED (not vLLM; never backs a promotion) · evidence {d}"), last
    smoke = summary["stats"]["modules"][0]
    assert (smoke["passed"], smoke["attempts"]) == (8, 10) and 0.49 < smoke["wilson_low"] < smoke["wilson_high"] < 0.95
    text = step.read_text()
    assert text.startswith("## Qualification: FAIL — `small-chat-4k`") and "exit status 1" in text
    assert "| Smoke: health, identity, short answer | 8/10, 0/2 repetitions | **FAIL** |" in text
    assert text.count("| smoke | test_identity | - |") == 2 and "evidence: 8/10 attempts passed" in text
    # GitLab: reason and facts without <properties>, one test case per repetition.
    tcs = {tc.get("name"): tc for tc in ET.parse(d / "junit.xml").getroot().iter("testcase")}
    # Ten protocol items and the gate's own test case for the identity stop.
    gate = {name: tc for name, tc in tcs.items() if tc.get("classname") == "qualify.gate"}
    assert len(tcs) == 11 and len(gate) == 1, sorted(tcs)
    (stop,) = gate.values()
    assert "the served identity is not the profile's" in stop.find("failure").get("message")
    for rep in (1, 2):
        tc = tcs[f"test_identity[rep{rep}of2]"]
        assert "root is 'pytest-qualify/small-chat-other'" in tc.find("failure").get("message")
        assert f"repetition: {rep} of 2" in tc.find("system-out").text
    report = (d / "report.md").read_text()
    assert "## Evidence behind the verdict" in report and "| Smoke: health, identity, short answer | 8/10 | 80.0% |" in report


def test_an_interrupted_run_is_incomplete(pytester, tmp_path):
    pytester.makepyfile(test_interrupt='''
import pytest

pytestmark = pytest.mark.qualify_module("smoke")


def test_first(qualify_client):
    assert qualify_client.health() is None or True


def test_second(qualify_client):
    raise KeyboardInterrupt


def test_third(qualify_client):
    pass
''')
    result = run(pytester, tmp_path, "--qualify-endpoint", "reference", "test_interrupt.py")
    out = result.stdout.str()
    assert result.ret == pytest.ExitCode.INTERRUPTED
    d = bundle_of(tmp_path)
    summary = json.loads((d / "summary.json").read_text())
    validate(summary)
    assert summary["verdict"]["result"] == "INCOMPLETE"
    assert "run interrupted before the protocol finished" in summary["verdict"]["incomplete"]
    assert suite_props(d)["verdict"] == "INCOMPLETE"
    assert out.splitlines()[-1].startswith("QUALIFICATION: INCOMPLETE (exit 2): run interrupted before the protocol finished")


def test_an_unreachable_endpoint_is_incomplete_at_once(pytester, tmp_path):
    port = free_port()
    result = run(pytester, tmp_path, "--qualify-endpoint", f"http://127.0.0.1:{port}", SMOKE)
    out = result.stdout.str()
    assert result.ret == pytest.ExitCode.INTERRUPTED, out[-2000:]
    summary = json.loads((bundle_of(tmp_path) / "summary.json").read_text())
    assert summary["verdict"]["result"] == "INCOMPLETE"
    assert summary["verdict"]["incomplete"][0].startswith(
        f"not judged: --qualify-endpoint http://127.0.0.1:{port}: the endpoint could not be reached: ConnectError")
    assert suite_props(bundle_of(tmp_path))["verdict"] == "INCOMPLETE"
    assert "QUALIFICATION: INCOMPLETE (exit 2): not judged: --qualify-endpoint" in out.splitlines()[-1]
    assert "the endpoint could not be reached" in out.splitlines()[-1]
    assert "startup failed" not in out.splitlines()[-1]  # attach mode started nothing


def test_baseline_lists_per_item_flips(pytester, tmp_path):
    profile = str(write_profile(tmp_path))
    first = run(pytester, tmp_path, "--qualify-endpoint", "reference", "--qualify-reference-fault", "wrong_identity",
                SMOKE, profile=profile)
    assert first.ret == pytest.ExitCode.TESTS_FAILED
    baseline = bundle_of(tmp_path) / "summary.json"
    second = pytester_run(pytester, f"--qualify={profile}", "--qualify-evidence", str(tmp_path / "ev2"),
        "--qualify-endpoint", "reference", "--qualify-baseline", str(baseline), SMOKE,
    )
    assert second.ret == 0, second.stdout.str()[-2000:]
    summary = json.loads((bundle_of(tmp_path, "ev2") / "summary.json").read_text())
    assert summary["baseline"]["flips"] == [
        {"module": "smoke", "item": "test_identity", "baseline": "0/1", "current": "1/1", "change": "newly passing"}]
    assert "flip: smoke: test_identity: 0/1 -> 1/1 (newly passing)" in second.stdout.str()
    assert "| smoke | test_identity | 0/1 | 1/1 | newly passing |" in (bundle_of(tmp_path, "ev2") / "report.md").read_text()


def test_summary_schema_2_requires_the_new_sections_and_a_version_1_baseline_still_validates():
    from pytest_qualify.bundle_format.schema import SummaryError

    summary, _ = synthetic_summary()
    assert summary["schema_version"] == 2
    old = {k: v for k, v in summary.items() if k not in ("stats", "slo")}
    old["verdict"] = {k: v for k, v in summary["verdict"].items() if k != "incomplete"}
    with pytest.raises(SummaryError, match="stats"):
        validate(old)
    old["schema_version"] = 1
    validate(old)  # a baseline written before version 2 stays usable
    broken = json.loads(json.dumps(summary))
    broken["verdict"]["result"] = "UNKNOWN"
    with pytest.raises(SummaryError, match="verdict.result"):
        validate(broken)
