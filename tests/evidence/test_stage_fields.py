"""The stage, the served identity at both ends and the promoted run in summary.json (schema-valid),
report.md and the JUnit suite properties: a preflight PASS never reads as a qualification PASS."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

from pytest_qualify.gate import decide as gate
from pytest_qualify.evidence import junit, report
from ..helpers import seal_hand_bundle
from pytest_qualify.bundle_format.schema import validate
from pytest_qualify.evidence.summary import stage_fields
from pytest_qualify.promotion.identity import Identity
from pytest_qualify.profiles import load_profile, module_registry
from pytest_qualify.promotion.promoted import load_promoted
from pytest_qualify.promotion.stage_run import StageRun
from ..judging import judge, summary_of

PROFILE = load_profile("262k")
LIVE = Identity("agents-a1-fp8-mm-262k", "InternScience/Agents-A1-FP8", 262144, "0.23.1rc1.dev1327+gf25953cc5")


def _summary(stage_name: str, start: Identity = LIVE, end: Identity = LIVE, promoted=None) -> dict:
    stage = PROFILE.stage(stage_name)
    results = []
    for module in stage.modules:
        r = gate.ItemResult(f"suites/test_{module}.py::test_x[rep1of1]", module, "test_x", 1, 1)
        r.properties["qualify_module"] = module
        results.append(r)
    run = StageRun(stage, promoted=promoted, start=start, end=end)
    problems = run.problems_at_end()
    verdict = judge(results, module_registry(), stage.modules, run_problems=problems, stage=stage)
    return summary_of(
        run={"id": f"run-{stage_name}", "started_at": "2026-07-29T10:00:00+00:00",
             "finished_at": "2026-07-29T10:01:00+00:00", "duration_s": 60.0, "repeat": 1, "workers": 0,
             "tool_version": "0.1.0"},
        target={"mode": "attach", "simulated": False, "base_url": "http://router:80", "launch_command": None,
                "engine_version": LIVE.engine_version, "models": [{"id": LIVE.served_name, "root": LIVE.model_root,
                                                                   "max_model_len": 262144}],
                "startup_error": None, "died": None},
        profile=PROFILE, verdict=verdict, results=results, cases={}, snapshots={}, metrics_errors={},
        metrics_files=[], artifacts={"plot": None, "notes": []},
        **stage_fields(run, verdict),
    )


def test_a_preflight_pass_says_preflight_everywhere():
    s = _summary("preflight")
    validate(s)
    assert s["verdict"]["result"] == "PASS"
    assert s["stage"]["name"] == "preflight" and s["stage"]["qualifies"] is False
    assert s["stage"]["lanes"] == ["240K"] and s["stage"]["verdict_line"].startswith("PREFLIGHT: PASS")
    text = report.render(s)
    assert "QUALIFICATION: PASS" not in text and "Qualification report" not in text
    assert text.startswith("# Functional preflight") and "not a qualification" in text.splitlines()[0]
    assert "stage preflight, **not a qualification**" in text and "context lanes: 240K" in text
    assert "## Gate (stage preflight, not a qualification)" in text
    props = dict(junit.suite_properties(s))
    assert props["stage"] == "preflight" and props["stage_is_qualification"] == "false"
    assert props["stage_verdict"].startswith("PREFLIGHT: PASS")


def test_the_full_stage_reads_as_a_qualification():
    s = _summary("full")
    validate(s)
    text = report.render(s)
    assert text.startswith("# Qualification report: agents-a1-fp8-mm-262k — PASS")
    assert "## Verdict: **PASS**\n" in text and "| Stage | full — Full qualification" in text
    props = dict(junit.suite_properties(s))
    assert (props["stage"], props["stage_is_qualification"], props["stage_verdict"]) == ("full", "true", "QUALIFICATION: PASS")


def test_an_identity_change_fails_the_stage_with_both_readings():
    swapped = Identity(LIVE.served_name, "Qwen/Qwen3.5-122B-A10B-NVFP4", 262144, LIVE.engine_version)
    s = _summary("preflight", end=swapped)
    validate(s)
    assert s["verdict"]["result"] == "FAIL" and s["stage"]["verdict_line"].startswith("PREFLIGHT: FAIL")
    [reason] = s["verdict"]["reasons"]
    assert "changed during the run" in reason and "InternScience/Agents-A1-FP8" in reason and "Qwen/Qwen3.5" in reason
    assert s["identity"]["changed"] == reason
    text = report.render(s)
    assert "**Identity changed during the run:**" in text
    assert "| end of this run | agents-a1-fp8-mm-262k | Qwen/Qwen3.5-122B-A10B-NVFP4 |" in text
    assert dict(junit.suite_properties(s))["identity_changed"] == reason


def _promoted_bundle(tmp_path: Path) -> Path:
    full = _summary("full")
    run = tmp_path / full["run"]["id"]
    run.mkdir()
    (run / "summary.json").write_text(json.dumps(full))
    seal_hand_bundle(run, full)
    return run / "summary.json"


def test_post_promotion_links_the_qualified_run_by_id_and_digest(tmp_path):
    promoted = load_promoted(str(_promoted_bundle(tmp_path)))
    s = _summary("post-promotion", promoted=promoted)
    validate(s)
    assert s["verdict"]["result"] == "PASS" and s["promoted"]["mismatches"] == []
    text = report.render(s)
    assert "Promoted run: `run-full`" in text and promoted.manifest_sha256 in text and promoted.summary_sha256 in text
    assert "serves exactly the identity that run qualified" in text
    props = dict(junit.suite_properties(s))
    assert props["promoted_run_id"] == "run-full"
    assert props["promoted_bundle_sha256sums_sha256"] == promoted.manifest_sha256
    root = ET.fromstring(junit.build_xml(s, {}, ()))  # a PASS: no run-level test case
    names = {p.get("name") for p in root.find("testsuite").find("properties")}
    assert {"stage", "stage_verdict", "promoted_run_id", "identity_start", "identity_end"} <= names


def test_post_promotion_fails_when_the_route_serves_the_rollback(tmp_path):
    promoted = load_promoted(str(_promoted_bundle(tmp_path)))
    rollback = Identity(LIVE.served_name, "Qwen/Qwen3.5-122B-A10B-NVFP4", 262144, LIVE.engine_version)
    s = _summary("post-promotion", start=rollback, end=rollback, promoted=promoted)
    validate(s)
    assert s["verdict"]["result"] == "FAIL" and s["identity"]["changed"] is None
    [reason] = s["verdict"]["reasons"]
    assert "does not serve the identity that run run-full qualified" in reason
    assert s["promoted"]["mismatches"] == [reason]
    assert "**The live route does not serve the qualified identity:**" in report.render(s)
