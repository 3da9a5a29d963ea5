"""The plugin end to end through pytester: inert without --qualify, repetition, the gate's exit status."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ..helpers import pytester_run, write_profile
from pytest_qualify.hooks.collection import suites_dir

SMOKE = str(suites_dir() / "test_smoke.py")


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester_run(pytester, "--qualify-evidence", str(pytester.path / "ev"), *args)


def test_import_is_cheap():
    code = "import sys, pytest_qualify.plugin; print(sorted(m for m in ('openai', 'vllm', 'av', 'PIL', 'httpx', 'matplotlib') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]"


def test_inert_without_qualify(pytester):
    result = pytester_run(pytester, str(suites_dir()))
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    assert "qualification gate" not in result.stdout.str()
    assert not (pytester.path / "qualify-evidence").exists()


def test_markers_and_profiles_are_listed(pytester):
    markers = pytester_run(pytester, "--markers").stdout.str()
    assert "qualify_repeat(count)" in markers and "qualify_module(id)" in markers
    listing = pytester_run(pytester, "--qualify-profiles")
    assert listing.ret == 0
    listing.stdout.fnmatch_lines(["262k *Agents-A1 FP8*", "small *"])


def test_repetitions_are_separate_items(pytester, tmp_path):
    # Run, not collected: --collect-only runs no test body, so a qualification refuses it.
    result = run(pytester, f"--qualify={write_profile(tmp_path)}", "--qualify-endpoint", "reference", "--repeat", "3",
                 "-v", SMOKE)
    out = result.stdout.str()
    for rep in ("rep1of3", "rep2of3", "rep3of3"):
        assert f"test_health[{rep}]" in out
        assert f"test_short_answer[{rep}-q1]" in out or f"test_short_answer[q1-{rep}]" in out


def test_marker_pins_repetition_count(pytester, tmp_path):
    pytester.makepyfile(test_probe=textwrap.dedent("""
        import pytest
        pytestmark = pytest.mark.qualify_module("smoke")

        @pytest.mark.qualify_repeat(1)
        def test_once(qualify_repetition):
            assert qualify_repetition == 1

        def test_each(qualify_repetition):
            assert 1 <= qualify_repetition <= 3
    """))
    result = run(pytester, f"--qualify={write_profile(tmp_path)}", "--qualify-endpoint", "reference", "--repeat", "3",
                 "-v", "test_probe.py")
    out = result.stdout.str()
    assert "test_once[rep1of1]" in out and "test_once[rep2of" not in out
    assert "test_each[rep3of3]" in out


def test_pass_exits_zero_and_prints_the_gate(pytester, tmp_path):
    result = run(pytester, f"--qualify={write_profile(tmp_path, base='262k')}", "--qualify-endpoint", "reference", "--repeat", "3", SMOKE)
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines([
        "*qualification gate: profile 262k (SIMULATED reference server, not vLLM)*",
        "Gate*| Result",
        "Smoke: health, identity, short answer*| 15/15, 3/3 repetitions",
        "QUALIFICATION: PASS",
    ])


def test_fault_fails_the_gate_naming_module_and_repetition(pytester, tmp_path):
    result = run(
        pytester, f"--qualify={write_profile(tmp_path)}", "--qualify-endpoint", "reference",
        "--repeat", "2", "--qualify-reference-fault", "wrong_identity", SMOKE,
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    out = result.stdout.str()
    assert "QUALIFICATION: FAIL" in out
    assert "smoke: test_identity, repetition 2: GET /v1/models" in out
    assert "root is 'pytest-qualify/small-chat-other', expected 'pytest-qualify/small-chat'" in out


def test_a_required_module_that_did_not_run_is_never_a_pass(pytester, tmp_path):
    text = Path(write_profile(tmp_path)).read_text().replace('required = ["smoke"]', 'required = ["smoke", "recall"]')
    path = tmp_path / "two.toml"
    path.write_text(text)
    result = run(pytester, f"--qualify={path}", "--qualify-endpoint", "reference", SMOKE)
    assert result.ret == pytest.ExitCode.INTERRUPTED  # INCOMPLETE: the protocol did not run in full
    assert "QUALIFICATION: INCOMPLETE" in result.stdout.str()
    assert "module 'recall' (Session recall) did not run" in result.stdout.str()


def test_reruns_are_refused(pytester, tmp_path):
    pytest.importorskip("pytest_rerunfailures", reason="pytest-rerunfailures is part of the test extra")
    result = run(pytester, f"--qualify={write_profile(tmp_path)}", "--qualify-endpoint", "reference", "--reruns", "2", SMOKE)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--reruns cannot be combined with --qualify" in result.stderr.str()


@pytest.mark.parametrize(("nodeid", "label"), [
    ("test_x[rep1of3]", "test_x"),
    ("test_x[rep1of3-q1]", "test_x[q1]"),
    ("test_x[q1-rep2of3]", "test_x[q1]"),
    ("test_x[a-rep2of3-b]", "test_x[a-b]"),
    ("test_x[report-event-rep1of3]", "test_x[report-event]"),
    ("test_x[rep3of3-replay-1]", "test_x[replay-1]"),
    ("test_x[replay-1]", "test_x[replay-1]"),
    ("test_x", "test_x"),
])
def test_item_label_drops_only_the_repetition(nodeid, label):
    from pytest_qualify.repetition import without_repetition

    assert without_repetition(nodeid) == label


@pytest.mark.parametrize("how", [["-k", "not test_health"], ["-n", "2", "-k", "not test_engine_version"]])
def test_a_partial_selection_is_never_a_pass(pytester, tmp_path, how):
    result = run(pytester, f"--qualify={write_profile(tmp_path)}", "--qualify-endpoint", "reference", *how, SMOKE)
    assert result.ret == pytest.ExitCode.INTERRUPTED, result.stdout.str()  # verdict INCOMPLETE: exit 2
    out = result.stdout.str()
    assert "QUALIFICATION: INCOMPLETE" in out
    assert "partial run: 1 protocol items deselected" in out


def test_a_node_id_selection_is_never_a_pass(pytester, tmp_path):
    result = run(pytester, f"--qualify={write_profile(tmp_path)}", "--qualify-endpoint", "reference", f"{SMOKE}::test_health")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert "partial run: test ids selected on the command line" in result.stdout.str()


def test_a_qualification_run_leaves_hypothesis_unimported(pytester, tmp_path):
    # The suites draw nothing at run time; hypothesis's pytest plugin would import hypothesis in the
    # terminal summary of every run. Without --qualify the plugin stays (a project's own tests use it).
    seen = pytester.path / "hypothesis.txt"
    pytester.makepyfile(hypothesis_seen=textwrap.dedent(f"""
        import sys
        import pytest

        @pytest.hookimpl(trylast=True)
        def pytest_unconfigure(config):
            blocked = config.pluginmanager.is_blocked("hypothesispytest")
            with open({str(seen)!r}, "a") as fh:
                fh.write(f"imported={{'hypothesis' in sys.modules}} blocked={{blocked}}\\n")
    """))
    result = run(pytester, "-p", "hypothesis_seen", f"--qualify={write_profile(tmp_path)}", "--qualify-endpoint",
                 "reference", SMOKE)
    assert result.ret == 0, result.stdout.str()[-2000:]
    assert seen.read_text().splitlines() == ["imported=False blocked=True"]
    pytester_run(pytester, "-p", "hypothesis_seen", str(suites_dir()))
    assert seen.read_text().splitlines()[1].endswith("blocked=False")
