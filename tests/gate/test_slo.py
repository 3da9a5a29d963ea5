"""Latency SLOs: the profile's [slo] table (schema, named errors), each limit evaluated on the
client-observed figures, and end to end: the example profile passes against the reference server
and its latency fault fails exactly the SLO rows."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from ..helpers import pytester_run

from pytest_qualify.gate.slo import check_rows, evaluate_slo
from pytest_qualify.bundle_format.schema import validate
from pytest_qualify.gate.decide import FAIL, INCOMPLETE, PASS
from pytest_qualify.profiles import LaneSlo, ProfileError, Slo, builtin_profiles, load_profile, module_registry
from ..judging import judge
from .profile_files import small_text, write




# -- the profile -----------------------------------------------------------------------------------


def test_the_262k_profile_stays_without_slo_and_the_example_has_them():
    assert load_profile("262k").slo is None
    slo = load_profile("small-slo").slo
    assert slo is not None
    assert [lane.lane for lane in slo.lanes] == ["1K", "2K", "3K"]
    assert all(lane.ttft_s_max and lane.e2e_s_max for lane in slo.lanes)
    assert slo.decode_tok_s_p50_min == 100.0 and slo.ttft_s_p95_max == 1.5


def test_slo_table_loads_in_lane_order(tmp_path):
    text = small_text() + "\n[slo]\nttft_s_p95_max = 2\n[slo.lanes.3K]\ne2e_s_max = 9.5\n[slo.lanes.1K]\nttft_s_max = 1\n"
    slo = load_profile(write(tmp_path, text)).slo
    assert slo == Slo(lanes=(LaneSlo("1K", 1, None), LaneSlo("3K", None, 9.5)), decode_tok_s_p50_min=None, ttft_s_p95_max=2)


@pytest.mark.parametrize(("table", "field"), [
    ("[slo]\nttft_s_p95_max = 0\n", "slo.ttft_s_p95_max"),
    ("[slo]\ndecode_tok_s_p50_min = \"fast\"\n", "slo.decode_tok_s_p50_min"),
    ("[slo]\nttft_p95 = 1\n", "slo"),
    ("[slo.lanes.1K]\nttft_s_max = -1\n", "slo.lanes.1K.ttft_s_max"),
    ("[slo.lanes.1K]\nttft_ms_max = 100\n", "slo.lanes.1K"),
    ("[slo.lanes.1K]\n", "slo.lanes.1K"),
    ("[slo]\n", "slo"),
    ("[slo.lanes.64K]\nttft_s_max = 1\n", "slo.lanes.64K"),
])
def test_a_bad_slo_table_is_an_error_naming_the_field(tmp_path, table, field):
    with pytest.raises(ProfileError) as err:
        load_profile(write(tmp_path, small_text() + "\n" + table))
    assert f"field '{field}'" in str(err.value)


# -- evaluation -----------------------------------------------------------------------------------


def lane_item(lane: str, rep: int, ttft: float | None, e2e: float | None) -> dict:
    props = {} if ttft is None else {"ttft_s": ttft, "e2e_s": e2e}
    return {"module": "context", "lane": lane, "repetition": rep, "outcome": "passed", "properties": props}


SLO = Slo(lanes=(LaneSlo("1K", 0.5, 1.0), LaneSlo("2K", 0.5, None)), decode_tok_s_p50_min=50.0, ttft_s_p95_max=0.6)


def test_every_limit_is_a_row_with_measured_and_limit():
    items = [lane_item("1K", r, 0.1 * r, 0.2 * r) for r in (1, 2, 3)] + [lane_item("2K", 1, 0.5, 0.6)]
    rows = evaluate_slo(SLO, items, {"decode_tok_s": {"p50": 120.0, "p95": 200.0, "n": 4}})
    assert [r.name for r in rows] == ["lane:1K:ttft_s", "lane:1K:e2e_s", "lane:2K:ttft_s",
                                      "run:decode_tok_s_p50", "run:ttft_s_p95"]
    assert all(r.ok for r in rows)
    first = rows[0]
    # A lane's limit is held by its worst repetition: pass^k, like the needle.
    assert first.measured == pytest.approx(0.3) and first.n == 3
    assert first.measured_text == "300.0 ms (worst of 3)" and first.limit_text == "<= 500.0 ms"
    # A limit equal to the figure holds (<=): 2K's TTFT is exactly 0.5 s.
    assert rows[2].measured == 0.5 and rows[2].ok
    # Run-wide TTFT p95 over every streamed item, interpolated as numpy (vllm bench) does:
    # [0.1, 0.2, 0.3, 0.5] at rank 2.85 -> 0.3 + 0.85 * 0.2.
    assert rows[-1].measured == pytest.approx(0.47) and rows[-1].n == 4


def test_one_slow_repetition_fails_its_lane_row_and_names_figure_and_limit():
    items = [lane_item("1K", 1, 0.1, 0.2), lane_item("1K", 2, 0.7, 0.8), lane_item("2K", 1, 0.3, 0.4)]
    rows = {r.name: r for r in evaluate_slo(SLO, items, {"decode_tok_s": {"p50": 40.0, "p95": 60.0, "n": 3}})}
    assert not rows["lane:1K:ttft_s"].ok
    assert rows["lane:1K:ttft_s"].reason == "SLO 1K lane TTFT: measured 700.0 ms (worst of 2) exceeds the limit 500.0 ms"
    assert rows["lane:1K:e2e_s"].ok and rows["lane:2K:ttft_s"].ok
    assert not rows["run:decode_tok_s_p50"].ok
    assert rows["run:decode_tok_s_p50"].reason == ("SLO decode tok/s p50: measured 40.00 tok/s (p50 of 3) "
                                                   "is below the floor 50.00 tok/s")
    assert not rows["run:ttft_s_p95"].ok  # 0.7 is in the top 5%


def test_a_limit_with_nothing_measured_leaves_the_run_incomplete_never_passed():
    items = [lane_item("1K", 1, 0.1, 0.2), lane_item("2K", 1, None, None)]
    rows = evaluate_slo(SLO, items, {"decode_tok_s": None})
    unmeasured = [r for r in rows if r.measured is None]
    assert [r.name for r in unmeasured] == ["lane:2K:ttft_s", "run:decode_tok_s_p50"]
    assert all(not r.ok and "not measured" in r.reason for r in unmeasured)
    from pytest_qualify.gate.decide import ItemResult

    ok = ItemResult("suites/test_context.py::test_lane[1K]", "context", "test_lane[1K]", 1, 1, "1K")
    assert judge([ok], module_registry(), ["context"], checks=check_rows(rows)).verdict == INCOMPLETE
    measured_only = [r for r in rows if r.measured is not None]
    assert judge([ok], module_registry(), ["context"], checks=check_rows(measured_only)).verdict == PASS


def test_no_slo_no_rows():
    assert evaluate_slo(None, [lane_item("1K", 1, 9.0, 9.0)], {"decode_tok_s": None}) == []


# -- end to end against the reference server --------------------------------------------------------


def slo_profile(directory: Path) -> Path:
    """The example profile (small-slo) with its [slo] table as shipped but for ``[slo.load]``, its gate cut to the context
    module: every SLO row is measured on the context lanes' streamed answers, and the other twelve
    modules would only add requests the rows do not read."""
    text = Path(builtin_profiles()["small-slo"]).read_text()
    head, rest = text.split("[modules]\n", 1)
    # Its [slo.load] rows read the load module, which this cut does not run (tests/test_suites_load.py
    # runs them): the table is last in the file.
    slo = rest[rest.index("[slo]"):].split("[slo.load]")[0]
    path = directory / "small-slo-context.toml"
    path.write_text(f'{head}[modules]\nrequired = ["context"]\n\n{slo}')
    return path


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester_run(pytester, f"--qualify={slo_profile(pytester.path)}",
                                         "--qualify-endpoint", "reference", "--qualify-evidence",
                                         str(pytester.path / "ev"), *args)


def bundle(pytester: pytest.Pytester) -> Path:
    (found,) = list((pytester.path / "ev").iterdir())
    return found


def test_example_profile_passes_with_its_slo_rows(pytester):
    result = run(pytester)
    out = result.stdout.str()
    assert result.ret == 0, out[-3000:]
    summary = json.loads((bundle(pytester) / "summary.json").read_text())
    validate(summary)
    assert summary["verdict"]["result"] == PASS
    assert len(summary["slo"]) == 8 and all(r["ok"] for r in summary["slo"])
    lines = [line for line in out.splitlines() if line.startswith("SLO ")]
    assert len(lines) == 8 and not any(line.endswith("FAIL") for line in lines)
    report = (bundle(pytester) / "report.md").read_text()
    assert "| SLO 3K lane TTFT | " in report and "(limit <= 1.500 s)" in report


def test_latency_fault_fails_exactly_the_slo_rows(pytester):
    # -n 2: the fault adds four seconds to every streamed answer; two workers halve the wait.
    result = run(pytester, "--qualify-reference-fault", "latency=2", "-n", "2")
    out = result.stdout.str()
    assert result.ret == pytest.ExitCode.TESTS_FAILED, out[-3000:]
    d = bundle(pytester)
    summary = json.loads((d / "summary.json").read_text())
    validate(summary)
    assert summary["verdict"]["result"] == FAIL
    # Every protocol item passed: the answers are right, only the latency is wrong.
    assert summary["verdict"]["failures"] == [] and all(i["outcome"] == "passed" for i in summary["items"])
    assert all(row["ok"] for row in summary["gate"])
    assert [r["ok"] for r in summary["slo"]] == [False] * 8
    assert summary["verdict"]["reasons"] == [r["reason"] for r in summary["slo"]]
    for row in summary["slo"]:
        if row["bound"] == "max":
            assert row["measured"] > row["limit"] and row["measured"] >= 2.0
        else:
            assert row["measured"] < row["limit"]
    assert out.splitlines()[-1].startswith("QUALIFICATION: FAIL (exit 1): SLO 1K lane TTFT: measured ")
    props = {p.get("name"): p.get("value") for p in ET.parse(d / "junit.xml").getroot().find("testsuite").find("properties")}
    assert props["verdict"] == FAIL and "SLO decode tok/s p50: measured" in props["verdict_reasons"]


def test_a_row_is_a_frozen_record_whose_dict_is_the_summarys_slo_row():
    from dataclasses import FrozenInstanceError, fields

    from pytest_qualify.bundle_format.schema import schema
    from pytest_qualify.gate.slo import SloRow

    (row,) = evaluate_slo(Slo(lanes=(LaneSlo("1K", 0.5, None),)), [lane_item("1K", 1, 0.7, 0.8)], {})
    assert isinstance(row, SloRow)
    assert row.as_dict() == {
        "name": "lane:1K:ttft_s", "title": "SLO 1K lane TTFT", "scope": "lane 1K", "metric": "ttft_s",
        "statistic": "max", "limit": 0.5, "bound": "max", "measured": 0.7, "n": 1, "ok": False,
        "measured_text": "700.0 ms (worst of 1)", "limit_text": "<= 500.0 ms",
        "reason": "SLO 1K lane TTFT: measured 700.0 ms (worst of 1) exceeds the limit 500.0 ms", "verdict": "FAIL"}
    # Not measured is no judged failure: the row is INCOMPLETE, never FAIL.
    (unmeasured,) = evaluate_slo(Slo(lanes=(LaneSlo("2K", 0.5, None),)), [lane_item("1K", 1, 0.7, 0.8)], {})
    assert unmeasured.measured is None and not unmeasured.ok and unmeasured.as_dict()["verdict"] == "INCOMPLETE"
    # The fields are summary.json's keys, in its order, then the verdict the gate decided of them:
    # a field the schema does not hold fails here.
    assert [f.name for f in fields(SloRow)] == schema()["properties"]["slo"]["items"]["required"]
    with pytest.raises(FrozenInstanceError):
        row.ok = True  # type: ignore[misc]
