"""The tool-use module against the reference server, end to end: clean, its figures reach the shipped
reference floor and the run PASSes; each fault switch lowers its own measure under its threshold and
the run FAILs naming it; with no floor the figures are recorded and the run is INCOMPLETE, never PASS.
The module's 200-request workload (the shipped floor's) keeps each run to seconds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ..helpers import QualifyPytest, suite, write_profile

FLOOR = 'requests = 200\nfloor = "fixtures/tool_use/floor-reference-server.json"\n'


def _profile(directory: Path, table: str) -> Path:
    path = write_profile(directory, ("tool_use",))
    path.write_text(path.read_text() + "\n[tool_use]\n" + table)
    return path


def _item(qualify_pytest: QualifyPytest) -> dict:
    (item,) = [i for i in qualify_pytest.summary()["items"] if i["module"] == "tool_use"]
    return item


def test_the_reference_server_reaches_its_floor(qualify_pytest: QualifyPytest):
    result = qualify_pytest(profile=_profile(qualify_pytest.pytester.path, FLOOR), repeat=1, suites=suite("tool_use"))
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()[-3000:]
    props = _item(qualify_pytest)["properties"]
    assert props["tool_use_requests"] == 200
    for m in ("trigger_f1", "schema_accuracy", "exact_accuracy"):
        assert props[f"tool_use_{m}"] == 1.0 and props[f"tool_use_{m}_threshold"] == 1.0
    assert props["tool_use_floor_runs"] == 3 and "prediction bound" in props["tool_use_method"]


@pytest.mark.parametrize("fault,lowered,kept", [
    ("tool_use_missed_call=10", ["trigger F1"], ["schema accuracy", "exact-argument accuracy"]),
    ("tool_use_spurious_call=3", ["trigger F1"], ["schema accuracy", "exact-argument accuracy"]),
    ("tool_use_schema_break=10", ["schema accuracy", "exact-argument accuracy"], ["trigger F1"]),
    ("tool_use_wrong_value=10", ["exact-argument accuracy"], ["trigger F1", "schema accuracy"]),
])
def test_each_fault_lowers_its_measure_under_the_threshold(qualify_pytest: QualifyPytest, fault, lowered, kept):
    result = qualify_pytest(profile=_profile(qualify_pytest.pytester.path, FLOOR), repeat=1, faults=(fault,),
                            suites=suite("tool_use"))
    out = result.stdout.str()
    assert result.ret == pytest.ExitCode.TESTS_FAILED, out[-3000:]
    assert {f["name"]: f["engaged"] for f in qualify_pytest.summary()["faults"]["armed"]} == {fault.split("=")[0]: True}
    item = _item(qualify_pytest)
    assert item["outcome"] == "failed" and item["reason"].startswith("200 tool-use requests, repetition 1: ")
    judged = item["reason"].split(" [")[0]
    for title in lowered:
        assert f"{title} 0." in judged and "below its threshold 1.0000 (the reference's 3 runs" in judged, judged
    for title in kept:
        assert f"{title} " not in judged, judged


def test_no_floor_records_the_figures_and_judges_nothing(qualify_pytest: QualifyPytest):
    result = qualify_pytest(profile=_profile(qualify_pytest.pytester.path, "requests = 200\n"), repeat=1,
                            suites=suite("tool_use"))
    out = result.stdout.str()
    assert result.ret == pytest.ExitCode.INTERRUPTED, out[-3000:]
    assert "QUALIFICATION: INCOMPLETE" in out and "the profile names no tool-use floor" in out
    item = _item(qualify_pytest)
    assert item["outcome"] == "ungraded"
    assert item["properties"]["tool_use_exact_accuracy"] == 1.0  # recorded for a first floor
    # ... which a floor file is built from, and the next run is judged against
    from pytest_qualify.tasks.tool_use import floor_from_bundles

    run = qualify_pytest.run_dir()
    floor = floor_from_bundles([run, run])
    assert floor["workload"]["requests"] == 200 and len(floor["runs"]) == 2
    assert json.dumps(floor["runs"][0]["figures"]) == '{"trigger_f1": 1.0, "schema_accuracy": 1.0, "exact_accuracy": 1.0}'
