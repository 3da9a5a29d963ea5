"""One verdict, every reader: each verdict class run end to end against the reference server, and
the terminal's last line, the exit status, both JUnit files (the bundle's and pytest's own
--junitxml), summary.json, report.md, the in-toto statement and the CI job summary say the same —
JUnit red (failures + errors > 0) exactly when the verdict is not PASS, each run-level reason a
test case named after its gate row, and both files in the xunit2 / junit-10.xsd structure. Each
module row too: the gate decides its verdict once (``GateRow.verdict``) and the terminal's gate
table, report.md, summary.json, both JUnit files, the job summary and report.html show that one —
FAIL only where an item of it was judged failed, INCOMPLETE where it did not run or an item of it
was not judged (not graded, a refused key, a steered run's void answers)."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from html import escape
from pathlib import Path
from typing import Any

import pytest
from _pytest.junitxml import LogXML
from _pytest.reports import TestReport

from pytest_qualify.evidence import html, job_summary, junit, report
from pytest_qualify.evidence.junit import GATE_CLASSNAME, counts, structure_errors
from pytest_qualify.bundle_format.schema import validate
from pytest_qualify.gate.claims import NOT_VERIFIABLE
from pytest_qualify.gate.decide import ItemResult, RunRecord, decide, proof_of_grading, render_table
from pytest_qualify.gate.run_facts import RunFacts
from pytest_qualify.gate.slo import CheckRow
from pytest_qualify.profiles import Claim, Claims, LaneSlo, Slo
from pytest_qualify.hooks.collection import suites_dir
from pytest_qualify.hooks.evidence import _add_gate_cases, _xunit2_cases
from pytest_qualify.profiles import load_profile, module_registry
from pytest_qualify.properties import CREDENTIALS_REFUSED

from ..helpers import QualifyPytest, suite, write_profile
from ..judging import judge, summary_of

EXIT = {"PASS": 0, "FAIL": 1, "INCOMPLETE": 2}
CI_ENV = {"GITHUB_ACTIONS": "true", "GITHUB_SERVER_URL": "https://github.example", "GITHUB_REPOSITORY": "org/repo",
          "GITHUB_RUN_ID": "4242", "GITHUB_RUN_ATTEMPT": "2", "GITHUB_SHA": "0" * 40, "GITHUB_WORKFLOW": "qualify"}
CI_TOKEN = "ghs_e25aNeverInTheBundle0123456789"


@pytest.fixture
def step_summary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "step-summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(path))
    return path


def gate_testcases(xml_bytes: bytes) -> dict[str, ET.Element]:
    root = ET.fromstring(xml_bytes)
    return {tc.get("name"): tc for tc in root.iter("testcase") if tc.get("classname") == GATE_CLASSNAME}


def suite_props(xml_bytes: bytes) -> dict[str, str]:
    return {p.get("name"): p.get("value") for p in ET.fromstring(xml_bytes).find("testsuite").find("properties")}


def assert_rows_agree(summary: Mapping[str, Any], *, terminal: str, report_md: str, step: str,
                      junits: Mapping[str, bytes], page: str) -> None:
    """Every module row reads the verdict summary.json gives it, in every reader, and no row's
    verdict contradicts the run's: a row says FAIL only in a FAILed run, every row of a PASS passed."""
    run = summary["verdict"]["result"]
    for g in summary["gate"]:
        title, result, row = g["title"], g["result"], g["verdict"]
        assert row != "FAIL" or run == "FAIL", (g, run)
        assert run != "PASS" or row == "PASS", (g, run)
        assert (row == "PASS") == g["ok"], g
        if row == "INCOMPLETE":  # nothing in it was judged failed: it did not run, or an item was not judged
            assert g["items"] == 0 or g["not_judged"] > 0, g
        mark = "" if row == "PASS" else row
        # The terminal's gate table: "Title | 0/1 (1 not judged)  INCOMPLETE".
        assert re.search(rf"(?m)^{re.escape(title)} *\| {re.escape(result)}{'  ' + mark if mark else ''}$", terminal), \
            (g, terminal)
        assert f"| {title} | {result}{f' — **{mark}**' if mark else ''} |" in report_md, g
        assert f"| {title} | {result} | {f'**{mark}**' if mark else 'ok'} |" in step, g
        for name, data in junits.items():
            assert suite_props(data)[f"gate_{g['module']}"] == f"{row}: {result}", (name, g)
        found = re.search(rf'<details class="([^"]*)" id="module-[^"]*"[^>]*><summary><span>{re.escape(escape(title))} '
                          rf'<span class="muted">[^<]*</span></span><span>{re.escape(escape(result))}</span>'
                          rf'<span class="badge [^"]+">([^<]+)</span></summary>', page)
        assert found, g
        assert found.group(2) == (mark or "ok"), (g, found.group(0))
        assert ("failing" in found.group(1).split()) == (row == "FAIL"), (g, found.group(0))
    assert_run_rows_agree(summary, terminal=terminal, report_md=report_md, step=step, junits=junits, page=page)


def assert_run_rows_agree(summary: Mapping[str, Any], *, terminal: str, report_md: str, step: str,
                          junits: Mapping[str, bytes], page: str) -> None:
    """Every SLO, check and claim row reads the verdict summary.json gives it, in every reader:
    FAIL only when a figure was measured and broke the row, INCOMPLETE when nothing was measured."""
    run = summary["verdict"]["result"]
    sections = [("slo", r) for r in summary.get("slo") or []] + [("checks", c) for c in summary.get("checks") or []] + \
               [("claims", c) for c in summary.get("claims") or [] if c["status"] != "not in this run"]
    for section, r in sections:
        title, row = r["title"], r["verdict"]
        assert row != "FAIL" or run == "FAIL", (r, run)
        assert run != "PASS" or row == "PASS", (r, run)
        assert (row == "PASS") == r["ok"], r
        assert (row == "INCOMPLETE") == (not r["ok"] and r["measured"] is None), r
        mark = "" if row == "PASS" else row
        # The terminal's gate table ("Title | not measured (limit <= 500.0 ms)  INCOMPLETE"), report.md's
        # ("| Title | … — **INCOMPLETE** |") and the job summary's ("| Title | … | **INCOMPLETE** |").
        (line,) = re.findall(rf"(?m)^{re.escape(title)} *\| (.*)$", terminal)
        (md,) = re.findall(rf"(?m)^\| {re.escape(title)} \| ([^|]*) \|$", report_md)
        (js,) = re.findall(rf"(?m)^\| {re.escape(title)} \| [^|]* \| ([^|]*) \|$", step)
        if mark:
            assert line.endswith(f"  {mark}") and md.endswith(f" — **{mark}**") and js == f"**{mark}**", (r, line, md, js)
        else:
            assert not re.search(r"FAIL|INCOMPLETE", line + md) and js == "ok", (r, line, md, js)
        if section == "checks":
            for name, data in junits.items():
                assert suite_props(data)[f"check_{title}"].startswith(f"{mark or 'ok'}: "), (name, r)
        found = re.search(rf'<div class="row (?:claim )?(\w+)"(?: id="[^"]*")?><span>{re.escape(escape(title))}</span>'
                          rf'<span>[^<]*</span><span class="badge [^"]+">([^<]+)</span></div>', page)
        assert found, r
        assert found.group(2) == (mark or "ok") and (found.group(1) == "failing") == (row == "FAIL"), (r, found.group(0))


def assert_one_verdict(result: pytest.RunResult, qp: QualifyPytest, step: Path, verdict: str) -> dict[str, Any]:
    """Every reader of the run says ``verdict``; returns the summary."""
    out = result.stdout.str()
    code = EXIT[verdict]
    assert result.ret == code, out[-3000:]
    last = out.strip().splitlines()[-1]
    assert last.startswith(f"QUALIFICATION: {verdict} (exit {code})"), last
    summary = qp.summary()
    validate(summary)
    assert summary["verdict"]["result"] == verdict
    run_dir = qp.run_dir()
    report = (run_dir / "report.md").read_text()
    assert report.splitlines()[0].startswith("# Qualification report: ") and f"— {verdict}" in report.splitlines()[0]
    assert f"## Verdict: **{verdict}**" in report
    assert step.read_text().startswith(f"## Qualification: {verdict} — ")
    assert f"exit status {code}" in step.read_text()
    statement = json.loads((run_dir / "provenance.intoto.json").read_text())["predicate"]
    assert statement["verdict"]["result"] == verdict and statement["verdict"]["exit_code"] == code
    findings = summary["verdict"]["findings"]
    assert (verdict == "PASS") == (findings == [] and summary["verdict"]["failures"] == [])
    for name, data in (("bundle", (run_dir / "junit.xml").read_bytes()), ("--junitxml", qp.junit.read_bytes())):
        assert structure_errors(data) == [], name
        n = counts(data)
        assert (n["failures"] + n["errors"] > 0) == (verdict != "PASS"), (name, n)
        suite_props = {p.get("name"): p.get("value") for p in ET.fromstring(data).find("testsuite").find("properties")}
        assert suite_props["verdict"] == verdict, name
        gate = gate_testcases(data)
        # One gate test case per reason, named after its row, erroring exactly when it left the run unjudged.
        assert sorted(gate) == sorted(f["row"] for f in findings), name
        for f in findings:
            (node,) = list(gate[f["row"]])
            assert node.tag == ("failure" if f["judged"] else "error") and node.get("type"), name
            assert f["reason"] in node.text, name  # the element text, whatever a message attribute keeps
    # pytest's own closing line counts what junit.xml counts: the gate's test cases included.
    closing = next(line for line in reversed(out.splitlines()) if re.match(r"^=+ .* in [0-9.]+s", line))
    said = {word: int(n) for n, word in re.findall(r"(\d+) (failed|errors?|passed)", closing)}
    n = counts(run_dir.joinpath("junit.xml").read_bytes())
    assert said.get("failed", 0) == n["failures"], (closing, n)
    assert said.get("error", said.get("errors", 0)) == n["errors"], (closing, n)
    for f in findings:
        assert f"qualify.gate::{f['row']}" in out, f["row"]  # in pytest's short summary
    assert summary["artifacts"]["html"]
    assert_rows_agree(summary, terminal=out, report_md=report, step=step.read_text(),
                      junits={"bundle": (run_dir / "junit.xml").read_bytes(), "--junitxml": qp.junit.read_bytes()},
                      page=(run_dir / summary["artifacts"]["html"]).read_text())
    return summary


def test_a_pass_is_green_everywhere_with_its_provenance(qualify_pytest, step_summary, monkeypatch):
    for key, value in CI_ENV.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("GITHUB_TOKEN", CI_TOKEN)
    summary = assert_one_verdict(qualify_pytest(), qualify_pytest, step_summary, "PASS")
    assert counts((qualify_pytest.run_dir() / "junit.xml").read_bytes())["failures"] == 0
    prov = summary["provenance"]
    assert {"pytest-qualify", "python", "pytest", "openai", "httpx"} <= set(prov["versions"])
    assert prov["versions"]["pytest"] == pytest.__version__ and prov["host"]["hostname"]
    assert prov["ci"]["system"] == "github" and prov["ci"]["run_url"] == "https://github.example/org/repo/actions/runs/4242"
    statement = json.loads((qualify_pytest.run_dir() / "provenance.intoto.json").read_text())["predicate"]
    assert statement["environment"] == prov  # every run, not only the self-test
    assert statement["protocol"]["left_out"] == summary["protocol"]["left_out"]
    for path in qualify_pytest.run_dir().iterdir():
        assert CI_TOKEN not in path.read_text(errors="replace"), path.name


def test_a_failed_item_is_red_everywhere(qualify_pytest, step_summary):
    # An item's wrong answer (not the identity, which stops the run with a finding of its own).
    result = qualify_pytest(faults=["smoke_empty"])
    summary = assert_one_verdict(result, qualify_pytest, step_summary, "FAIL")
    assert summary["verdict"]["failures"] and summary["verdict"]["findings"] == []
    cases = qualify_pytest.cases()
    failed = [c for c in cases.values() if c.find("failure") is not None]
    assert failed and all(c.find("failure").get("type") for c in failed)


def test_an_slo_row_alone_fails_every_reader(qualify_pytest, step_summary):
    # Every item passes; only the latency limits fail: the run-level reason is what makes JUnit red.
    result = qualify_pytest("-n", "2", profile="small-slo", faults=["latency=1"], suites=(str(suites_dir()),))
    summary = assert_one_verdict(result, qualify_pytest, step_summary, "FAIL")
    assert summary["verdict"]["failures"] == []
    failing_slo = [r for r in summary["slo"] if not r["ok"]]
    assert failing_slo
    rows = {f["row"]: f for f in summary["verdict"]["findings"]}
    assert all(f["kind"] == "check" and f["judged"] for f in rows.values())
    assert len(rows) == len(failing_slo)
    # The profile leaves integrity out of protocol v3, and every reader says so.
    assert summary["protocol"]["left_out"] == ["integrity"]
    assert summary["stage"]["title"] == "Full qualification (protocol v3 less integrity)"
    assert "protocol v3 less integrity" in result.stdout.str().strip().splitlines()[-1]
    assert "protocol v3 less integrity" in (qualify_pytest.run_dir() / "report.md").read_text().splitlines()[0]
    assert "protocol v3 less integrity" in step_summary.read_text().splitlines()[0]
    props = {p.get("name"): p.get("value")
             for p in ET.parse(qualify_pytest.run_dir() / "junit.xml").getroot().find("testsuite").find("properties")}
    assert props["protocol"] == "protocol v3 less integrity" and props["left_out_modules"] == "integrity"


CHATTY = '''
import pytest

pytestmark = pytest.mark.qualify_module("smoke")


@pytest.mark.parametrize("n", range(3))
def test_stream(n, qualify_client, qualify_record):
    answer = qualify_client.chat([{"role": "user", "content": "What is the capital of France? Answer with one word."}],
                                 stream=True, max_tokens=16, temperature=0)
    qualify_record.answer(answer)
'''


def test_a_regression_is_flagged_on_the_last_line_and_fails_only_when_asked(qualify_pytest, step_summary, tmp_path):
    chatty = qualify_pytest.pytester.makepyfile(test_chatty=CHATTY)
    first = qualify_pytest(suites=(str(chatty),))
    assert first.ret == 0, first.stdout.str()[-2000:]
    baseline = qualify_pytest.summary()
    baseline["timing"]["decode_tok_s"]["p50"] *= 1000  # the earlier run decoded a thousand times faster
    path = tmp_path / "baseline.json"
    path.write_text(json.dumps(baseline))

    flagged_dir = tmp_path / "flagged"
    flagged = qualify_pytest.pytester.runpytest_subprocess(
        f"--qualify={write_profile(qualify_pytest.pytester.path)}", "--qualify-endpoint", "reference",
        "--qualify-evidence", str(flagged_dir), "-p", "no:cacheprovider", "--qualify-baseline", str(path), str(chatty))
    last = flagged.stdout.str().strip().splitlines()[-1]
    assert flagged.ret == 0 and last.startswith("QUALIFICATION: PASS (exit 0)"), last
    assert re.search(r" · \d regression\(s\) flagged against the baseline: [^·]*decode tok/s p50", last), last

    for old in qualify_pytest.evidence.iterdir():  # the run folder of the next run is the only one
        old.rename(tmp_path / old.name)
    step_summary.unlink()
    result = qualify_pytest("--qualify-baseline", str(path), "--qualify-fail-on-regression", "25", suites=(str(chatty),))
    summary = assert_one_verdict(result, qualify_pytest, step_summary, "FAIL")
    assert [f["row"] for f in summary["verdict"]["findings"]] == ["regression"]
    assert summary["verdict"]["findings"][0]["kind"] == "regression"


def test_a_partial_selection_is_incomplete_and_errors_in_junit(qualify_pytest, step_summary):
    result = qualify_pytest("-k", "smoke", modules=("smoke", "json"), suites=suite("smoke", "json"))
    summary = assert_one_verdict(result, qualify_pytest, step_summary, "INCOMPLETE")
    findings = summary["verdict"]["findings"]
    assert {f["row"] for f in findings} == {"partial_run", "modules_not_run"}
    assert not any(f["judged"] for f in findings)
    gate = gate_testcases(qualify_pytest.junit.read_bytes())
    assert gate["partial_run"].find("error").get("type") == "qualify.not_judged"



# -- issue 34's cases, in every reader -----------------------------------------------------------------


def test_a_pass_whose_grader_recorded_no_verdict_is_incomplete_in_every_reader(pytester, qualify_pytest, step_summary):
    pytester.makepyfile(skip_bodies="import pytest\n\n@pytest.hookimpl(tryfirst=True)\n"
                                    "def pytest_pyfunc_call(pyfuncitem):\n    return True\n")
    pytester.syspathinsert()
    result = qualify_pytest("-p", "skip_bodies")
    # Nothing was judged failed, so no reader's gate table says FAIL of the module whose items ran ungraded.
    title = qualify_pytest.summary()["gate"][0]["title"]
    page = (qualify_pytest.run_dir() / "report.html").read_text()
    for name, text in (("terminal", result.stdout.str()), ("report.md", (qualify_pytest.run_dir() / "report.md").read_text()),
                       ("job summary", step_summary.read_text())):
        # The gate table's row: the first of the title (a job summary's attempts table follows it).
        line = next(line for line in text.splitlines() if line.startswith((f"{title} ", f"| {title} |")))
        assert "FAIL" not in line and "INCOMPLETE" in line, (name, line)
    assert 'badge b-fail">FAIL</span></summary>' not in page
    summary = assert_one_verdict(result, qualify_pytest, step_summary, "INCOMPLETE")
    assert [f["row"] for f in summary["verdict"]["findings"]] == ["not_graded"]
    # The module whose items ran ungraded is not judged, never "0/N FAIL", in every reader (above).
    (row,) = summary["gate"]
    assert row["verdict"] == "INCOMPLETE" and row["passed"] == 0 and row["not_judged"] == row["items"] > 0, row
    assert row["result"].startswith(f"0/{row['items']} ({row['items']} not judged)"), row


def test_an_unreachable_attached_endpoint_is_incomplete_in_every_reader_in_few_lines(qualify_pytest, step_summary):
    from pytest_qualify.server.lifecycle import free_port

    result = qualify_pytest(endpoint=f"http://127.0.0.1:{free_port()}",
                            profile=write_profile(qualify_pytest.pytester.path, ("smoke", "json", "tools")),
                            suites=suite("smoke", "json", "tools"))
    summary = assert_one_verdict(result, qualify_pytest, step_summary, "INCOMPLETE")
    rows = [f["row"] for f in summary["verdict"]["findings"]]
    assert "modules_not_run" in rows and len(rows) <= 3, rows
    assert len([line for line in result.stdout.lines if line.startswith(("FAILED ", "ERROR "))]) <= 3


def test_exitfirst_is_a_fail_in_every_reader_led_by_the_item(qualify_pytest, step_summary):
    result = qualify_pytest("-x", faults=["json_invalid"], modules=("smoke", "json"), suites=suite("smoke", "json"))
    assert_one_verdict(result, qualify_pytest, step_summary, "FAIL")
    assert result.stdout.str().strip().splitlines()[-1].startswith("QUALIFICATION: FAIL (exit 1): json: ")


# -- a module row's verdict, decided once: every writer, no inner run --------------------------------

REFUSED = ("not judged: credentials refused on chat: HTTP 401 on 1 of 3 protocol items asked "
           "(the key is read from $QUALIFY_API_KEY); the items after the first refusal were not asked")
VOID = "steering: no forced answer came back from vLLM in 3 chat requests"
UNREACHABLE = "not judged: the endpoint http://127.0.0.1:9/v1 could not be reached"


def _item(module: str, n: int, outcome: str = "passed", **properties: Any) -> ItemResult:
    r = ItemResult(f"suites/test_{module}.py::test_{n}", module, f"test_{n}", 1, 1, called=True)
    r.properties.update(properties)
    if outcome != "passed":
        r.record("call", outcome, f"item {n} {outcome}")
    return r


def _graded(*results: ItemResult, ungraded: tuple[str, ...] = ()) -> tuple[ItemResult, ...]:
    """The results as the end of a run hands them to the gate: every pass proved by a journal
    verdict but those of ``ungraded`` (node ids)."""
    return proof_of_grading(results, [r.nodeid for r in results if r.nodeid not in ungraded])


# (results, judge's keyword arguments, the run's verdict, each module row's verdict)
ROW_CASES = {
    # A pass whose grader recorded no verdict: the run is INCOMPLETE, and so is its row — never "0/1 FAIL".
    "not graded": (_graded(_item("smoke", 1), _item("json", 1), ungraded=("suites/test_smoke.py::test_1",)), {},
                   "INCOMPLETE", {"smoke": "INCOMPLETE", "json": "PASS"}),
    # A refused key: the item reported skipped "not judged"; with the run's reason, and without it.
    "refused key": (_graded(_item("smoke", 1, "skipped", **{CREDENTIALS_REFUSED: 401}), _item("json", 1)),
                    {"incomplete": [REFUSED]}, "INCOMPLETE", {"smoke": "INCOMPLETE", "json": "PASS"}),
    "refused key, no reason": (_graded(_item("smoke", 1, "skipped", **{CREDENTIALS_REFUSED: 401}), _item("json", 1)),
                               {}, "INCOMPLETE", {"smoke": "INCOMPLETE", "json": "PASS"}),
    # A steered run whose forced answers did not hold: its failed item is no judged failure.
    "void answers": (_graded(_item("smoke", 1, "failed"), _item("json", 1)), {"answers_void": [VOID]},
                     "INCOMPLETE", {"smoke": "INCOMPLETE", "json": "PASS"}),
    "target unavailable": (_graded(_item("smoke", 1, "failed")), {"target_unavailable": True, "incomplete": [UNREACHABLE]},
                           "INCOMPLETE", {"smoke": "INCOMPLETE", "json": "INCOMPLETE"}),
    "not run": (_graded(_item("smoke", 1)), {}, "INCOMPLETE", {"smoke": "PASS", "json": "INCOMPLETE"}),
    # A judged failure beside an ungraded item of the same module: that row failed.
    "failed beside not graded": (_graded(_item("smoke", 1, "failed"), _item("smoke", 2), _item("json", 1),
                                         ungraded=("suites/test_smoke.py::test_2",)), {},
                                 "FAIL", {"smoke": "FAIL", "json": "PASS"}),
    "pass": (_graded(_item("smoke", 1), _item("json", 1)), {}, "PASS", {"smoke": "PASS", "json": "PASS"}),
}


@pytest.mark.parametrize("case", ROW_CASES)
def test_a_module_row_reads_the_gates_verdict_in_every_writer(case):
    results, how, verdict, rows = ROW_CASES[case]
    decision = judge(results, module_registry(), ("smoke", "json"), **how)
    assert decision.verdict == verdict, decision.reasons
    assert {row.module: str(row.verdict) for row in decision.rows} == rows
    summary = summary_of(
        run={"id": "run-1", "started_at": "2026-01-01T00:00:00+00:00", "finished_at": "2026-01-01T00:01:00+00:00",
             "duration_s": 60.0, "repeat": 1, "workers": 0, "tool_version": "0.1.0"},
        target={"mode": "reference", "simulated": True, "base_url": None, "launch_command": None,
                "engine_version": "x", "models": [], "startup_error": None, "died": None},
        profile=load_profile("small"), verdict=decision, results=results, cases={}, snapshots={}, metrics_errors={},
        metrics_files=[], artifacts={"plot": None, "notes": []})
    validate(summary)
    assert {g["module"]: g["verdict"] for g in summary["gate"]} == rows
    assert_rows_agree(summary, terminal="\n".join(render_table(decision)), report_md=report.render(summary),
                      step=job_summary.render(summary, bundle_dir="b", exit_code=EXIT[verdict]),
                      junits={"bundle": junit.build_xml(summary, {}, decision.gate_cases)},
                      page=html.render(summary, [], None, []))


# -- an SLO, check or claim row's verdict, decided once: every writer, no inner run -------------------

RUN = {"id": "run-1", "started_at": "2026-01-01T00:00:00+00:00", "finished_at": "2026-01-01T00:01:00+00:00",
       "duration_s": 60.0, "repeat": 1, "workers": 0, "tool_version": "0.1.0"}
TARGET = {"mode": "reference", "simulated": True, "base_url": None, "launch_command": None,
          "engine_version": "x", "models": [], "startup_error": None, "died": None}


def _lane_facts(ttft_s: float) -> RunFacts:
    """One 1K context lane timed at ``ttft_s``; no 2K lane, no serving facts, no decode figure."""
    lane = {"nodeid": "suites/test_context.py::test_1", "module": "context", "item": "test_1", "lane": "1K",
            "repetition": 1, "outcome": "passed", "waiver": None, "properties": {"ttft_s": ttft_s, "e2e_s": ttft_s}}
    spread = {"median": ttft_s, "min": ttft_s, "max": ttft_s, "n": 1}
    return RunFacts(items=(lane,), simulated=True, run={"workers": 0}, profile={"name": "small", "deployment": {}},
                    timing={"decode_tok_s": None, "prefill_tok_s": None,
                            "lanes": [{"lane": "1K", "ttft_s": spread, "e2e_s": spread}]})


# The 1K limit is measured (held at 0.2 s, broken at 0.9 s); the 2K lane, the decode rate, the
# required weight-load claim and the answers-held check have nothing measured: INCOMPLETE, never FAIL.
LIMITS = Slo(lanes=(LaneSlo("1K", 0.5, None), LaneSlo("2K", 0.5, None)), decode_tok_s_p50_min=50.0)
CLAIMS = Claims((Claim(name="weight_load_s", figure="weight_load_s", claimed=282.0, direction="at_most",
                       tolerance=0.1, required=True),))
UNMEASURED_CHECK = CheckRow("Answers held to the end", None, "all equal", False, "Answers held to the end: not measured")
RUN_ROW_CASES = {
    "measured and held, the rest not measured": (0.2, "INCOMPLETE", "PASS"),
    "measured and broken, the rest not measured": (0.9, "FAIL", "FAIL"),
}


@pytest.mark.parametrize("case", RUN_ROW_CASES)
def test_an_slo_check_or_claim_row_reads_the_gates_verdict_in_every_writer(case):
    ttft_s, verdict, measured_row = RUN_ROW_CASES[case]
    results = _graded(_item("context", 1))
    decision = decide(RunRecord(results, module_registry(), ("context",), slo=LIMITS, claims=CLAIMS,
                                checks=(UNMEASURED_CHECK,), facts=_lane_facts(ttft_s)))
    assert decision.verdict == verdict, decision.reasons
    rows = {c.title: str(c.verdict) for c in decision.checks}
    assert rows == {"Answers held to the end": "INCOMPLETE", "SLO 1K lane TTFT": measured_row,
                    "SLO 2K lane TTFT": "INCOMPLETE", "SLO decode tok/s p50": "INCOMPLETE",
                    "Recipe claims: weight load": "INCOMPLETE"}, rows
    summary = summary_of(run=RUN, target=TARGET, profile=load_profile("small"), verdict=decision, results=results,
                         cases={}, snapshots={}, metrics_errors={}, metrics_files=[], artifacts={"plot": None, "notes": []})
    validate(summary)
    assert [c["status"] for c in summary["claims"]] == [NOT_VERIFIABLE] and summary["claims"][0]["verdict"] == "INCOMPLETE"
    assert {r["title"]: r["verdict"] for r in summary["slo"]} == {
        t: v for t, v in rows.items() if t.startswith("SLO ")}
    assert [c["verdict"] for c in summary["checks"]] == ["INCOMPLETE"]
    terminal = "\n".join(render_table(decision))
    md, step = report.render(summary), job_summary.render(summary, bundle_dir="b", exit_code=EXIT[verdict])
    page = html.render(summary, [], None, [])
    assert_rows_agree(summary, terminal=terminal, report_md=md, step=step,
                      junits={"bundle": junit.build_xml(summary, {}, decision.gate_cases)}, page=page)
    # Nothing measured is never called FAIL: only the broken 1K limit may be.
    fails = [line for line in terminal.splitlines() if line.endswith("FAIL")]
    assert fails == ([] if measured_row == "PASS" else [next(l for l in terminal.splitlines() if l.startswith("SLO 1K"))])


# -- an item the gate did not judge: skipped "not judged: …" in both JUnit files and report.html -----

REFUSED_ITEM = "not judged: the endpoint refused the API key (HTTP 401)"  # proof_of_grading's reason


def _reports(nodeid: str, outcome: str, longrepr: Any) -> list[TestReport]:
    """An item's setup, call and teardown reports, as pytest's --junitxml writer receives them."""
    where = (nodeid.split("::")[0], 0, nodeid.split("::")[-1])
    return [TestReport(nodeid, where, {}, "passed", None, "setup"), TestReport(nodeid, where, {}, outcome, longrepr, "call"),
            TestReport(nodeid, where, {}, "passed", None, "teardown")]


def _pytest_junitxml(path: Path, reports: list[TestReport], decision: Any) -> bytes:
    """pytest's own --junitxml file of ``reports``, finished as the plugin finishes it at the end of a run."""
    xml = LogXML(str(path), None, family="xunit2")
    xml.pytest_sessionstart()
    for r in reports:
        xml.pytest_runtest_logreport(r)
    _xunit2_cases(xml, decision.waived, decision.not_judged)
    _add_gate_cases(xml, decision.gate_cases, ())
    xml.pytest_sessionfinish()
    return path.read_bytes()


def _outcomes(xml_bytes: bytes) -> dict[str, list[tuple[str, str | None]]]:
    """Each item test case's outcome elements as (tag, message), by classname::name."""
    return {f'{tc.get("classname")}::{tc.get("name")}': [(c.tag, c.get("message")) for c in tc if c.tag in ("failure", "error", "skipped")]
            for tc in ET.fromstring(xml_bytes).iter("testcase") if tc.get("classname") != GATE_CLASSNAME}


# (results, judge's keyword arguments, pytest's reports of the items, the item not judged, why)
UNJUDGED_CASES = {
    # watch.py reports a refused item skipped with the client's words; the gate's reason is the one both files show.
    "refused key": (_graded(_item("smoke", 1, "skipped", **{CREDENTIALS_REFUSED: 401}), _item("json", 1)),
                    {"incomplete": [REFUSED]},
                    [*_reports("suites/test_smoke.py::test_1", "skipped",
                               ("suites/test_smoke.py", 1, "not judged: the endpoint rejected the API key: HTTP 401")),
                     *_reports("suites/test_json.py::test_1", "passed", None)],
                    "suites/test_smoke.py::test_1", REFUSED_ITEM),
    # A steered run whose forced answers did not come back: the failed item's answer judged nothing.
    "void answers": (_graded(_item("smoke", 1, "failed"), _item("json", 1)), {"answers_void": [VOID]},
                     [*_reports("suites/test_smoke.py::test_1", "failed", "AssertionError: item 1 failed"),
                      *_reports("suites/test_json.py::test_1", "passed", None)],
                     "suites/test_smoke.py::test_1", f"not judged: {VOID}"),
}


@pytest.mark.parametrize("case", UNJUDGED_CASES)
def test_an_item_the_gate_did_not_judge_is_skipped_not_judged_in_both_junit_files_and_the_page(case, tmp_path):
    results, how, reports, nodeid, why = UNJUDGED_CASES[case]
    decision = judge(results, module_registry(), ("smoke", "json"), **how)
    assert decision.verdict == "INCOMPLETE", decision.reasons
    assert decision.not_judged == ((nodeid, why),)
    summary = summary_of(run=RUN, target=TARGET, profile=load_profile("small"), verdict=decision, results=results,
                         cases={}, snapshots={}, metrics_errors={}, metrics_files=[], artifacts={"plot": None, "notes": []})
    validate(summary)
    assert {i["module"]: i.get("not_judged") for i in summary["items"]} == {"smoke": why, "json": None}
    for name_, data in (("bundle", junit.build_xml(summary, {}, decision.gate_cases)),
                        ("--junitxml", _pytest_junitxml(tmp_path / "pytest-junit.xml", reports, decision))):
        assert structure_errors(data) == [], name_
        # Skipped with the gate's own "not judged: …", never passed nor failed; the run's gate case errors.
        assert _outcomes(data) == {"suites.test_smoke::test_1": [("skipped", why)], "suites.test_json::test_1": []}, name_
        n = counts(data)
        assert n["skipped"] == 1 and n["failures"] == 0 and n["errors"] > 0, (name_, n)
        assert n["tests"] == 2 + len(decision.gate_cases), (name_, n)
    page = html.render(summary, [], None, [])
    assert 'NOT JUDGED</span> <strong>test_1</strong>' in page and '>FAIL</span> <strong>test_1' not in page
    assert "<h2>Failed items" not in page  # not judged is not failed
    # report.md and the job summary list it as not judged, with the gate's reason, never under Failures.
    md = report.render(summary)
    failures_section = md.split("## Failures", 1)[1].split("\n## ", 1)[0]
    assert "test_1" not in failures_section and "None." in failures_section, failures_section
    not_judged = md.split("## Not judged", 1)[1].split("\n## ", 1)[0]
    assert "| smoke | test_1 |" in not_judged and why in not_judged, not_judged
    assert "protocol item(s) failed" not in md
    step = job_summary.render(summary, bundle_dir="b", exit_code=EXIT["INCOMPLETE"])
    assert "### Failures" not in step and "1 item(s) not judged" in step and why[:60] in step, step
    props = dict(junit.suite_properties(summary))
    assert "test_1, repetition 1" not in " ".join(v for k, v in junit.suite_properties(summary)), props
