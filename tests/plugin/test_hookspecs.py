"""The hooks a user plugin implements: told when the target is up, adds summary fields, told
when the summary is written and the verdict reached — loaded with ``-p``, as an operator would."""

from __future__ import annotations

import json
import textwrap

import pytest


USER_PLUGIN = """
    import json, pathlib

    EVENTS = pathlib.Path(__file__).parent / "events.jsonl"

    def note(**event):
        with EVENTS.open("a") as fh:
            fh.write(json.dumps(event) + "\\n")

    def pytest_qualify_target_started(config, base_url, server_info):
        note(hook="target_started", base_url=base_url, simulated=server_info["simulated"])

    def pytest_qualify_summary(config, summary):
        return {"change_ticket": "CHG-1234", "seen_verdict": summary["verdict"]["result"]}

    def pytest_qualify_summary_written(config, summary, bundle_dir):
        written = json.loads((pathlib.Path(bundle_dir) / "summary.json").read_text())
        note(hook="summary_written", extra=written.get("extra"))

    def pytest_qualify_verdict_reached(config, verdict):
        note(hook="verdict_reached", passed=verdict.passed, reasons=list(verdict.reasons),
             failed=[r.item for r in verdict.failures])
"""


def events(pytester: pytest.Pytester) -> list[dict]:
    return [json.loads(line) for line in (pytester.path / "events.jsonl").read_text().splitlines()]


@pytest.fixture
def run(qualify_pytest, monkeypatch):  # type: ignore[no-untyped-def]
    """pytest with the user plugin loaded by ``-p``, as an installed plugin would be."""

    def start(*args: str, plugin: str = USER_PLUGIN) -> pytest.RunResult:
        qualify_pytest.pytester.makepyfile(qualify_notify=textwrap.dedent(plugin))
        monkeypatch.setenv("PYTHONPATH", str(qualify_pytest.pytester.path))
        return qualify_pytest("-p", "qualify_notify", *args)

    return start


def test_user_plugin_adds_a_summary_field_and_is_told_in_order(run, pytester):
    result = run()
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    started, written, verdict = events(pytester)
    assert started["hook"] == "target_started" and started["base_url"].startswith("http://127.0.0.1:")
    assert started["simulated"] is True
    assert written == {"hook": "summary_written", "extra": {"change_ticket": "CHG-1234", "seen_verdict": "PASS"}}
    assert verdict == {"hook": "verdict_reached", "passed": True, "reasons": [], "failed": []}


def test_a_failing_run_reaches_the_hook_with_its_reasons(run, pytester):
    result = run("--qualify-reference-fault", "wrong_identity")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    last = events(pytester)[-1]
    assert last["hook"] == "verdict_reached" and last["passed"] is False
    assert last["failed"] == ["test_identity"]


def test_a_hook_that_breaks_costs_the_run_its_evidence_and_never_passes(run, pytester):
    result = run(plugin="def pytest_qualify_summary(config, summary):\n    raise RuntimeError('ticket system down')\n")
    # Not a judged failure of the deployment, but never a pass: INCOMPLETE, exit 2 (run it again).
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*QUALIFICATION: INCOMPLETE*", "*evidence bundle could not be written*ticket system down*"])
