"""The evidence bundle end to end through pytester, against the reference server: a full bundle
that verifies, JUnit properties on every protocol test case (also under -n 2), the /metrics
cross-check around context lanes, and a bundle whose verdict says why when the server dies or
never starts."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from pytest_qualify.bundle_format.manifest import verify_manifest
from pytest_qualify.evidence.junit import PROTOCOL_PROPERTIES, structure_errors
from pytest_qualify.bundle_format.schema import validate

SECRET = "qualify-e2e-secret-7f3a9c"

# A context-module stand-in: one streamed request per lane. The 2K lane sends no cache salt and
# the same prefix in every repetition, so its second repetition is served from the prefix cache:
# the cross-check must flag exactly that lane and repetition.
LANES = '''
import pytest
from pytest_qualify.hooks import state_of

pytestmark = pytest.mark.qualify_module("context")


def pytest_generate_tests(metafunc):
    if "lane" in metafunc.fixturenames:
        lanes = state_of(metafunc.config).profile.limits.lanes
        metafunc.parametrize("lane", lanes, ids=[lane.name for lane in lanes])


def test_lane(lane, qualify_client, qualify_record, qualify_salt, qualify_repetition):
    filler = " ".join(f"fact{i} is {i * 7 % 1000}." for i in range(lane.prompt_tokens // 6))
    salt = None if lane.name == "2K" else qualify_salt
    extra = {} if salt is None else {"cache_salt": salt}
    messages = [{"role": "user", "content": filler + f" Say hello (repetition {qualify_repetition})."}]
    answer = qualify_client.chat(messages, stream=True, max_tokens=32, temperature=0, **extra)
    qualify_record.answer(answer)
    assert answer.content
'''

# Several short chat requests, for the dying server.
CHATTY = '''
import pytest

pytestmark = pytest.mark.qualify_module("smoke")


@pytest.mark.parametrize("n", range(4))
def test_chat(n, qualify_client, qualify_record):
    answer = qualify_client.chat([{"role": "user", "content": f"What is the capital of France? Answer with one word."}],
                                 max_tokens=16, temperature=0)
    qualify_record.answer(answer)
'''


def check_bundle(d: Path) -> dict:
    """Every artifact present, SHA256SUMS verifies, summary.json validates, no secret anywhere."""
    names = {p.name for p in d.iterdir()}
    assert {"junit.xml", "report.md", "summary.json", "server.log", "SHA256SUMS"} <= names, names
    assert verify_manifest(d) == []
    if shutil.which("sha256sum"):
        check = subprocess.run(["sha256sum", "-c", "SHA256SUMS"], cwd=d, capture_output=True, text=True)
        assert check.returncode == 0, check.stdout + check.stderr
    listed = {line.split("  ", 1)[1] for line in (d / "SHA256SUMS").read_text().splitlines()}
    assert listed == names - {"SHA256SUMS"}
    for path in d.iterdir():
        assert SECRET.encode() not in path.read_bytes(), f"API key written into {path.name}"
    summary = json.loads((d / "summary.json").read_text())
    validate(summary)
    ET.parse(d / "junit.xml")
    return summary


def items_missing(summary: dict, names: tuple[str, ...]) -> list[str]:
    """Items of summary.json lacking any of the protocol's per-item names."""
    missing = []
    for item in summary["items"]:
        have = set(item["properties"]) | {k for k in ("module", "lane", "repetition") if k in item}
        if not set(names) <= have:
            missing.append(f"{item['nodeid']} lacks {sorted(set(names) - have)}")
    return missing


def test_full_bundle_with_lane_cross_check(pytester, qualify_pytest, monkeypatch):
    monkeypatch.setenv("QUALIFY_API_KEY", SECRET)
    pytester.makepyfile(test_lanes=LANES)
    junit_path = qualify_pytest.junit
    result = qualify_pytest(modules=["context"], repeat=2, suites=["test_lanes.py"])
    out = result.stdout.str()
    assert result.ret == 0, out
    assert "warning" not in out.lower()  # no PytestWarning about properties or anything else
    assert "QUALIFICATION: PASS" in out
    assert "context lane 1K: TTFT (first chunk) " in out and "client/server TTFT" in out
    assert "FLAG: 2K lane, repetition 2: the server counted" in out
    d = qualify_pytest.run_dir()
    assert f"evidence bundle: {d}" in out
    summary = check_bundle(d)
    assert summary["simulated"] is True and summary["verdict"]["result"] == "PASS"
    assert any(name.startswith("metrics-lane-2K") for name in summary["server_metrics"]["files"])
    assert {"metrics-start.prom", "metrics-end.prom"} <= set(summary["server_metrics"]["files"])
    lanes = {lane["lane"]: lane for lane in summary["timing"]["lanes"]}
    assert list(lanes) == ["1K", "2K", "3K"]
    for lane in lanes.values():
        assert lane["ttft_s"]["n"] == 2 and lane["e2e_s"]["median"] >= lane["ttft_s"]["median"] > 0
        assert lane["server_ttft_s"]["n"] == 2 and lane["metrics_attribution"] == "exclusive"
        assert lane["ttft_client_server_ratio"]["median"] > 0
        assert 0.5 * lane["prompt_tokens"]["median"] > 0
    assert lanes["1K"]["prefix_cache_hit_tokens"] == 0 and lanes["1K"]["flags"] == []
    assert lanes["2K"]["prefix_cache_hit_tokens"] > 0
    assert [f.split(":")[0] for f in lanes["2K"]["flags"]] == ["2K lane, repetition 2", "2K lane, repetition 2"]
    assert summary["timing"]["decode_tok_s"]["n"] == 6 and summary["timing"]["prefill_tok_s"]["p50"] > 0
    assert summary["server_metrics"]["run"]["requests"] == 6

    report = (d / "report.md").read_text()
    assert "> **SIMULATED**" in report and "| Gate | Result |" in report
    assert "| Context lane | Prompt tokens (server) | TTFT (first chunk) | End to end | Passed |" in report
    assert "| 1K |" in report and "| Decode tok/s p50 (derived from the answers' own lengths) |" in report and "Prefix-cache flags" in report

    # The protocol's figures on every item of summary.json; the bundle's JUnit and pytest's own
    # --junitxml in the xunit2 structure (no testcase properties), the item's figures in system-out.
    assert items_missing(summary, PROTOCOL_PROPERTIES + ("ttfvt_s", "server_ttft_s")) == []
    for xml_bytes in ((d / "junit.xml").read_bytes(), junit_path.read_bytes()):
        assert structure_errors(xml_bytes) == []
        root = ET.fromstring(xml_bytes)
        assert all("ttft_s" in tc.find("system-out").text for tc in root.iter("testcase"))
        suite_props = {p.get("name"): p.get("value") for p in root.find("testsuite").find("properties")}
        assert suite_props["verdict"] == "PASS" and suite_props["profile"] == "small"
        assert suite_props["served_name"] == "small-chat-4k" and "pytest_qualify.reference" in suite_props["launch_command"]
        assert len(list(root.iter("testcase"))) == 6
    assert SECRET not in junit_path.read_text()


def test_junit_properties_survive_xdist(pytester, qualify_pytest):
    pytest.importorskip("xdist")
    pytester.makepyfile(test_lanes=LANES)
    junit_path = qualify_pytest.junit
    result = qualify_pytest("-n", "2", modules=["context"], repeat=2, suites=["test_lanes.py"])
    assert result.ret == 0, result.stdout.str()
    d = qualify_pytest.run_dir()
    summary = check_bundle(d)
    assert summary["run"]["workers"] == 2
    # pytest's own file, written on the controller from the workers' reports.
    own = junit_path.read_bytes()
    assert structure_errors(own) == []
    suite_props = {p.get("name"): p.get("value") for p in ET.fromstring(own).find("testsuite").find("properties")}
    assert suite_props["verdict"] == "PASS" and suite_props["run_id"] == summary["run"]["id"]
    xml_bytes = (d / "junit.xml").read_bytes()
    assert len(list(ET.fromstring(xml_bytes).iter("testcase"))) == 6
    assert structure_errors(xml_bytes) == []
    # The workers' figures reached the controller's summary.
    assert items_missing(summary, PROTOCOL_PROPERTIES + ("server_requests", "metrics_attribution")) == []
    for item in summary["items"]:
        props = item["properties"]
        assert float(props["ttft_s"]) > 0 and int(props["prompt_tokens"]) > 0 and item["lane"] in ("1K", "2K", "3K")
        assert props["metrics_attribution"] in ("exclusive", "shared")


def test_server_dying_mid_run_still_writes_the_bundle(pytester, qualify_pytest):
    pytester.makepyfile(test_chatty=CHATTY)
    result = qualify_pytest(faults=["die_after=2"], suites=["test_chatty.py"])
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    d = qualify_pytest.run_dir()
    summary = check_bundle(d)
    assert summary["verdict"]["result"] == "FAIL"
    reasons = " ".join(summary["verdict"]["reasons"])
    assert "exit" in reasons and "code 3" in reasons, reasons
    assert summary["target"]["died"]
    assert summary["server_metrics"]["errors"]["end"]
    passed = [i for i in summary["items"] if i["outcome"] == "passed"]
    assert len(passed) == 2
    report = (d / "report.md").read_text()
    assert "**Server died during the run:**" in report and "code 3" in report
    assert "fault die_after" in (d / "server.log").read_text()


def test_startup_failure_still_writes_the_bundle(pytester, qualify_pytest, tmp_path):
    script = tmp_path / "fake_vllm.py"
    script.write_text("import sys\nprint('CUDA error: no kernel image is available', flush=True)\nsys.exit(3)\n")
    pytester.makepyfile(test_chatty=CHATTY)
    result = qualify_pytest("--qualify-serve-command", f"{sys.executable} {script}", "--qualify-startup-timeout", "30",
                            endpoint=None, suites=["test_chatty.py"])
    # Nothing was judged: INCOMPLETE, exit 2 (not a FAILed deployment).
    assert result.ret == pytest.ExitCode.INTERRUPTED
    d = qualify_pytest.run_dir()
    summary = check_bundle(d)
    assert summary["verdict"]["result"] == "INCOMPLETE"
    assert any(r.startswith("server startup failed") for r in summary["verdict"]["incomplete"])
    assert "no kernel image" in summary["target"]["startup_error"]
    assert summary["server_metrics"]["available"] is False
    report = (d / "report.md").read_text()
    assert "**Server startup failed:**" in report and "no kernel image" in report
    assert "CUDA error" in (d / "server.log").read_text()
