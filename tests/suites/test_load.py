"""End to end through pytester against the reference server: the load module passes on a
conforming server with its row in the gate table, report, summary.json and JUnit and its figures
per level; each load fault fails it for its own reason (a wrong answer only under concurrency, a
5xx or a dropped request at the highest level only); a batch-variance difference is a finding, and
a failure where the profile declares the deployment batch-invariant; ``[slo.load]`` gates on the
figures. The reference server's scheduler (reference/scheduler.py) queues at max_num_seqs = 1."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from ..helpers import QualifyPytest, suite, write_profile

TITLE = "Load: every answer graded at the production concurrency"
LOAD = suite("load")


def _profile(directory: Path, extra: str = "") -> Path:
    path = write_profile(directory, ["load"])
    if extra:
        path.write_text(path.read_text() + "\n" + extra)
    return path


def _load_props(qualify_pytest: QualifyPytest) -> list[dict]:
    return [i["properties"] for i in qualify_pytest.summary()["items"] if i["module"] == "load"]


def _failure(qualify_pytest: QualifyPytest) -> str:
    # The element's text: the message attribute may be shortened (pytest 9.2), the text never is.
    messages = [(c.find("failure").text or "") + c.find("failure").get("message", "")
                for c in qualify_pytest.cases().values()
                if c.find("failure") is not None and "test_load" in c.get("name", "")]
    assert messages, "no failed load test case in JUnit"
    return "\n".join(messages)


def test_conforming_server_passes_with_figures_per_level(qualify_pytest):
    result = qualify_pytest(profile=_profile(qualify_pytest.pytester.path), repeat=2, suites=LOAD)
    assert result.ret == 0, result.stdout.str()[-3000:]
    result.stdout.fnmatch_lines([f"{TITLE}*| 2/2*", "*QUALIFICATION: PASS*"])
    summary = qualify_pytest.summary()
    (row,) = [r for r in summary["gate"] if r["module"] == "load"]
    assert row["ok"] and row["title"] == TITLE
    assert TITLE in (qualify_pytest.run_dir() / "report.md").read_text()
    for props in _load_props(qualify_pytest):
        assert props["load_levels"] == "1,2,4"
        for level in (1, 2, 4):
            # Every request answered and graded; the level really had that many in flight.
            assert props[f"load_c{level}_requests"] == 16 and props[f"load_c{level}_failed"] == 0
            assert props[f"load_c{level}_in_flight_max"] == level
            assert props[f"load_c{level}_probes"] == 4 and props[f"load_c{level}_batch_variance"] == 0
            assert 0 < props[f"load_c{level}_ttft_s_p50"] <= props[f"load_c{level}_ttft_s_p99"]
            assert props[f"load_c{level}_tpot_s_p50"] > 0 and props[f"load_c{level}_output_tok_s"] > 0
            assert props[f"load_c{level}_goodput"] == 1.0
        # max_num_seqs = 1: above concurrency 1 requests wait, and the server's histogram says so.
        assert props["load_c4_queue_time_s_mean"] > props["load_c2_queue_time_s_mean"] > 0
        assert props["load_c4_ttft_s_p50"] > props["load_c1_ttft_s_p50"]
    names = {c.get("name") for c in ET.parse(qualify_pytest.junit).getroot().iter("testcase")}
    assert {"test_load[rep1of2]", "test_load[rep2of2]"} <= names


def test_wrong_answer_only_under_concurrency_fails_with_level_and_item(qualify_pytest):
    result = qualify_pytest(profile=_profile(qualify_pytest.pytester.path), repeat=1, suites=LOAD,
                            faults=["load_wrong_concurrent"])
    assert result.ret == 1, result.stdout.str()[-3000:]
    message = _failure(qualify_pytest)
    assert "c=2, request" in message and "(and differs from its answer at concurrency 1)" in message
    assert "c=1," not in message
    (props,) = _load_props(qualify_pytest)
    assert props["load_c1_failed"] == 0 and props["load_c2_failed"] > 0 and props["load_c4_failed"] > 0
    assert props["load_c2_batch_variance"] > 0


# Without =N the faults take the profile's highest level (4 here).
@pytest.mark.parametrize("fault, says", [("load_500_at", "HTTP 500"), ("load_drop_at=4", "dropped (no answer)")])
def test_5xx_or_dropped_request_at_the_highest_level_fails(qualify_pytest, fault, says):
    result = qualify_pytest(profile=_profile(qualify_pytest.pytester.path), repeat=1, suites=LOAD, faults=[fault])
    assert result.ret == 1, result.stdout.str()[-3000:]
    message = _failure(qualify_pytest)
    assert f"c=4, request" in message and says in message
    assert "c=1," not in message and "c=2," not in message
    (props,) = _load_props(qualify_pytest)
    assert props["load_c2_failed"] == 0 and props["load_c4_failed"] > 0


def test_batch_variance_is_a_finding_unless_the_profile_declares_batch_invariance(qualify_pytest):
    result = qualify_pytest(profile=_profile(qualify_pytest.pytester.path), repeat=1, suites=LOAD,
                            faults=["load_batch_variance"])
    assert result.ret == 0, result.stdout.str()[-3000:]
    (props,) = _load_props(qualify_pytest)
    assert props["load_batch_variance"] > 0 and props["load_c1_batch_variance"] == 0
    assert "differs from its answer at c=1" in props["load_batch_variance_findings"]

    invariant = write_profile(qualify_pytest.pytester.path, ["load"], name="invariant.toml")
    invariant.write_text(invariant.read_text().replace("[load.goodput]", "batch_invariant = true\n\n[load.goodput]"))
    result = qualify_pytest(profile=invariant, repeat=1, suites=LOAD, faults=["load_batch_variance"])
    assert result.ret == 1, result.stdout.str()[-3000:]
    assert "declares the deployment batch-invariant" in _failure(qualify_pytest)


def test_slo_load_rows_gate_on_the_figures(qualify_pytest):
    profile = _profile(qualify_pytest.pytester.path,
                       "[slo.load]\ntpot_s_p95_max = 0.05\ngoodput_min = 0.75\nttft_s_p99_max = 0.000001\n")
    result = qualify_pytest(profile=profile, repeat=1, suites=LOAD)
    assert result.ret == 1, result.stdout.str()[-3000:]
    rows = {r["name"]: r for r in qualify_pytest.summary()["slo"]}
    assert rows["load:tpot_s_p95_max"]["ok"] and rows["load:goodput_min"]["ok"]
    ttft = rows["load:ttft_s_p99_max"]
    assert not ttft["ok"] and ttft["n"] == 3 and "exceeds the limit" in ttft["reason"]
    result.stdout.fnmatch_lines(["*SLO load ttft p99*at concurrency*FAIL*"])
