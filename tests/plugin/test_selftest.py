"""The gate self-test (``selftest/``, ``hooks/selftest_mode.py``): its fault table covers every fault
switch of the reference server, its judge accepts only a conforming PASS and a fault failing in
its own module, a required self-test is refused when it is of another plugin version, too old,
failed, short of this run's modules or tampered with; and end to end on a smoke-only profile."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from ..helpers import run_pytest, write_profile
from pytest_qualify.selftest import engine
from pytest_qualify.settings import SelftestRequirement
from pytest_qualify.selftest.bundle import write_selftest_bundle
from pytest_qualify.bundle_format.manifest import verify_manifest
from pytest_qualify.evidence.provenance import SELFTEST_PREDICATE_TYPE, check_statement
from pytest_qualify.reference.faults import SERVER_FAULTS
from pytest_qualify.reference.oracle import known_faults

ALL_FAULTS = [*SERVER_FAULTS, *known_faults()]


def test_the_table_has_one_row_for_every_fault_switch_and_no_other():
    table = engine.fault_table()
    assert sorted(table) == sorted(ALL_FAULTS)
    from pytest_qualify.profiles import module_registry

    modules = set(module_registry())
    for row in table.values():
        assert row.skip or row.module in modules, row


def test_a_fault_switch_without_a_row_is_an_error_not_a_silent_skip():
    with pytest.raises(engine.SelftestError, match="no row for the reference server's fault.*brand_new"):
        engine.plan(["smoke"], [*ALL_FAULTS, "brand_new"])


def test_the_plan_runs_the_faults_the_profile_can_see():
    cases, left_out = engine.plan(["smoke", "window"], ALL_FAULTS)
    assert cases[0].fault is None and cases[0].module == engine.WHOLE_PROTOCOL
    assert {c.fault.module for c in cases[1:]} == {"smoke", "window"}
    assert "overwindow_500" in {c.label for c in cases}
    why = {row.name: reason for row, reason in left_out}
    assert "module 'tools' is not in its modules.required" in why["wrong_tool_args"]
    assert "request timeout" in why["hang_after"]
    assert len(cases) - 1 + len(left_out) == len(ALL_FAULTS)


def test_a_faulted_run_runs_its_module_only_with_one_repetition_and_the_fault():
    case = next(c for c in engine.plan(["context"], ALL_FAULTS)[0] if c.label == "fail_repetition=1")
    cmd = engine.command(case, "small", Path("ev"), Path("/s"))
    assert cmd[-3:] == ["--qualify-reference-fault", "fail_repetition=1", "/s/test_context.py"]
    assert "--repeat" in cmd and cmd[cmd.index("--repeat") + 1] == "1"
    assert cmd[cmd.index("--qualify-stage") + 1] == "full"
    conforming = engine.command(engine.Case(None), "small", Path("ev"), Path("/s"))
    assert "--qualify-reference-fault" not in conforming and not conforming[-1].endswith(".py")


def test_a_child_inherits_none_of_the_plugins_own_settings():
    env = {"PATH": "/bin", "QUALIFY_SELFTEST": "1", "QUALIFY_WAIVERS": "w.toml", "PYTEST_ADDOPTS": "-n 4"}
    assert engine.child_env(env, ["QUALIFY_SELFTEST", "QUALIFY_WAIVERS"]) == {"PATH": "/bin"}


def _summary(result: str, failures: list[tuple[str, str]] = (), reasons: list[str] = (),
             engaged: dict[str, bool] | None = None) -> dict:
    """A run's summary.json as the judge reads it; ``engaged``: the reference server's record of its faults."""
    out = {"verdict": {"result": result, "reasons": list(reasons),
                       "failures": [{"module": m, "item": "test_x", "reason": r, "outcome": "failed"} for m, r in failures]}}
    if engaged is not None:
        out["faults"] = {"recorded_in": "reference-faults.json", "note": None, "armed": [
            {"fault": name, "name": name, "what": "", "engaged": on, "chat_requests": 1 if on else None,
             "after_s": 0.1 if on else None} for name, on in engaged.items()]}
    return out


def _fault(name: str) -> engine.Case:
    return engine.Case(engine.fault_table()[name])


def test_the_judge_accepts_a_conforming_pass_and_a_fault_failing_in_its_module():
    assert engine.judge(engine.Case(None), 0, _summary("PASS"))[0]
    ok, verdict, reason = engine.judge(_fault("smoke_empty"), 1, _summary("FAIL", [("smoke", "empty answer")],
                                                                           engaged={"smoke_empty": True}))
    assert ok and verdict == "FAIL" and reason == "test_x: empty answer"
    # Another module failing beside it does not matter: the fault's own module caught it.
    assert engine.judge(_fault("drop_needle"), 1, _summary("FAIL", [("smoke", "x"), ("context", "y")],
                                                           engaged={"drop_needle": True}))[0]
    ok, _, reason = engine.judge(_fault("engine_swap_after"), 1,
                                   _summary("FAIL", reasons=["served identity changed during the run (engine_version …)"],
                                            engaged={"engine_swap_after": True}))
    assert ok and reason.startswith("served identity changed")


@pytest.mark.parametrize("engaged", [{"smoke_empty": False}, {"drop_needle": True}, None])
def test_a_failure_the_fault_did_not_cause_proves_nothing(engaged):
    # Caught in its module, but the server's record does not show the fault engaged (it says it never
    # did, holds only another fault, or is missing): the self-test cannot count it.
    ok, verdict, reason = engine.judge(_fault("smoke_empty"), 1, _summary("FAIL", [("smoke", "empty answer")],
                                                                           engaged=engaged))
    assert not ok and verdict == "FAIL"
    assert reason.startswith("not shown to engage: the run's summary.json does not record smoke_empty as engaged"), reason


@pytest.mark.parametrize("case, code, summary, expected", [
    (engine.Case(None), 1, _summary("FAIL", [("smoke", "empty")]), "the conforming server did not pass (exit 1): smoke: empty"),
    (engine.Case(None), 0, None, "the run wrote no summary.json (exit 0)"),
    (_fault("drop_needle"), 2, _summary("INCOMPLETE"), "not caught: the run ended INCOMPLETE (exit 2) with no failed item"),
    (_fault("drop_needle"), 1, _summary("FAIL", [("smoke", "x")]), "with failures in smoke, not a failure of module 'context'"),
    (_fault("drop_needle"), 0, _summary("PASS"), "not caught: the run ended PASS (exit 0)"),
    (_fault("engine_swap_after"), 1, _summary("FAIL", [("smoke", "x")]), "no reason says 'served identity changed"),
])
def test_the_judge_rejects_a_missed_fault_or_a_failing_conforming_run(case, code, summary, expected):
    ok, _, reason = engine.judge(case, code, summary)
    assert not ok and expected in reason


def _bundle(tmp_path: Path, *, version: str = "9.9", verdict: str = "PASS", age_days: float = 1.0,
            modules: tuple[str, ...] = ("smoke",), name: str = "st") -> Path:
    now = time.time() - age_days * 86400
    data = {**engine.record({"name": "p", "source": "p.toml", "modules": list(modules)}, [], [], now, now, name, 2),
            "verdict": verdict, "modules_proven": list(modules)}
    data["versions"]["pytest-qualify"] = version
    return write_selftest_bundle(tmp_path / name, data)


def test_a_selftest_bundle_is_in_its_manifest_and_statement(tmp_path):
    path = _bundle(tmp_path)
    assert verify_manifest(path.parent) == [] and check_statement(path.parent) == []
    statement = json.loads((path.parent / "provenance.intoto.json").read_text())
    assert statement["predicateType"] == SELFTEST_PREDICATE_TYPE
    assert [s["name"] for s in statement["subject"]] == ["selftest.json"]
    assert set(statement["predicate"]["versions"]) == {"pytest-qualify", "python", "pytest", "openai"}
    assert "selftest.json" in (path.parent / "SHA256SUMS").read_text()


def test_a_required_selftest_is_found_when_it_matches(tmp_path):
    _bundle(tmp_path, name="old", age_days=3)
    path = _bundle(tmp_path, name="new")
    found = engine.find(SelftestRequirement(7), tmp_path, "9.9", ["smoke"])
    assert found.run_id in ("old", "new") and found.plugin_version == "9.9"
    named = engine.find(SelftestRequirement(7, path.parent), tmp_path, "9.9", ["smoke"])
    assert named.path == str(path) and named.modules_proven == ("smoke",) and 0.9 < named.age_days < 1.1


@pytest.mark.parametrize("kwargs, want, expected", [
    ({"version": "0.0"}, {}, "made by pytest-qualify 0.0, this run is 9.9"),
    ({"age_days": 10}, {}, "days old, more than the 7 required"),
    ({"verdict": "FAIL"}, {}, "its verdict is 'FAIL': the gate did not prove itself"),
    ({}, {"modules": ["smoke", "tools"]}, "did not show this run's module(s) tools catching a fault"),
])
def test_a_required_selftest_is_refused_saying_why(tmp_path, kwargs, want, expected):
    path = _bundle(tmp_path, **kwargs)
    with pytest.raises(engine.SelftestError, match=expected.replace("(", r"\(").replace(")", r"\)")):
        engine.find(SelftestRequirement(7, path), tmp_path, "9.9", want.get("modules", ["smoke"]))
    with pytest.raises(engine.SelftestError, match="no self-test of pytest-qualify 9.9 in .* no older than 7 days"):
        engine.find(SelftestRequirement(7), tmp_path, "9.9", want.get("modules", ["smoke"]))


def test_a_tampered_selftest_bundle_is_refused(tmp_path):
    path = _bundle(tmp_path)
    data = json.loads(path.read_text())
    data["runs"] = [{"fault": "x", "ok": True}]
    path.write_text(json.dumps(data))
    with pytest.raises(engine.SelftestError, match="the bundle does not match its SHA256SUMS"):
        engine.find(SelftestRequirement(7, path), tmp_path, "9.9", ["smoke"])


@pytest.mark.parametrize("text, expected", [("7", (7.0, None)), ("0.5:a/b", (0.5, Path("a/b")))])
def test_the_requirement_is_days_or_days_and_a_path(text, expected):
    req = SelftestRequirement.parse(text)
    assert (req.max_age_days, req.path) == expected


@pytest.mark.parametrize("text", ["week", "0", "-1:x"])
def test_a_bad_requirement_says_the_shape(text):
    with pytest.raises(ValueError, match="expected"):
        SelftestRequirement.parse(text)


# -- end to end ----------------------------------------------------------------------------------


def _pytest(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return run_pytest(*args, cwd=cwd, timeout=900)


@pytest.mark.e2e
def test_the_selftest_catches_every_fault_its_profile_sees_and_a_qualification_can_require_it(tmp_path):
    profile = write_profile(tmp_path, ("smoke",), name="selftest-smoke.toml")
    evidence = tmp_path / "ev"
    started = time.monotonic()
    run = _pytest(tmp_path, f"--qualify={profile}", "--qualify-selftest", "--qualify-evidence", str(evidence))
    wall_s = time.monotonic() - started
    out = run.stdout + run.stderr
    assert run.returncode == 0, out
    assert "SELF-TEST: PASS (exit 0)" in out
    assert "fault" in out and "expected module" in out  # the table's header
    (bundle,) = evidence.iterdir()
    data = json.loads((bundle / "selftest.json").read_text())
    assert data["verdict"] == "PASS" and data["modules_proven"] == ["smoke"]
    runs = {r["spec"]: r for r in data["runs"]}
    assert runs[engine.CONFORMING]["verdict"] == "PASS"
    smoke_faults = [r.spec for r in engine.fault_table().values() if r.module == "smoke"]
    assert set(runs) == {engine.CONFORMING, *smoke_faults}
    assert all(r["ok"] and r["verdict"] == "FAIL" for spec, r in runs.items() if spec != engine.CONFORMING)
    assert verify_manifest(bundle) == [] and check_statement(bundle) == []
    print(f"self-test wall time: {wall_s:.1f} s for {len(runs)} runs")

    # A qualification that requires it finds it, says so in the header, summary.json and report.md.
    qual = _pytest(tmp_path, f"--qualify={profile}", "--qualify-endpoint", "reference", "--qualify-evidence",
                   str(evidence), "--qualify-require-selftest", "7")
    assert qual.returncode == 0, qual.stdout + qual.stderr
    assert f"qualify: gate self-test {data['run_id']}" in qual.stdout
    (qbundle,) = [p for p in evidence.iterdir() if p != bundle]
    summary = json.loads((qbundle / "summary.json").read_text())
    assert summary["extra"]["selftest"]["run_id"] == data["run_id"]
    assert f"self-test `{data['run_id']}`" in (qbundle / "report.md").read_text()

    # Without one (another evidence folder): a usage error before any server starts.
    refused = _pytest(tmp_path, f"--qualify={profile}", "--qualify-endpoint", "reference", "--qualify-evidence",
                      str(tmp_path / "empty"), "--qualify-require-selftest", "7")
    assert refused.returncode == 4, refused.stdout + refused.stderr
    assert "--qualify-require-selftest: no self-test of pytest-qualify" in refused.stderr
    assert "server ready" not in refused.stdout


def test_the_options_resolve_from_any_source_and_a_bad_requirement_names_it():
    from pytest_qualify.settings import SettingsError, resolve

    s = resolve({"qualify": "small", "qualify_selftest": "1"}, {}, lambda key: None)
    assert s.selftest is True and s.require_selftest is None
    s = resolve({"qualify": "small"}, {"QUALIFY_REQUIRE_SELFTEST": "7"}, lambda key: None)
    assert s.selftest is False and s.require_selftest == "7"
    with pytest.raises(SettingsError, match=r"environment variable QUALIFY_REQUIRE_SELFTEST .*expected DAYS or DAYS:PATH"):
        resolve({"qualify": "small"}, {"QUALIFY_REQUIRE_SELFTEST": "week"}, lambda key: None)
