"""The tool-use request set (generated, stored, answers known) and the floor file: built from earlier
bundles, read back, and held to the profile's workload before any server starts."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from pytest_qualify.graders.tool_use import FloorError
from pytest_qualify.graders.tools import RawCall, canonical_arguments, grade_calls, tool_schemas
from pytest_qualify.profiles import ProfileError, load_profile
from pytest_qualify.tasks import tool_use
from pytest_qualify.tasks.fixture_data import read_text, tool_fixtures

from ..helpers import write_profile

SCHEMAS = tool_schemas(tool_fixtures().tools)
SHIPPED_FLOOR = "fixtures/tool_use/floor-reference-server.json"


def test_the_stored_set_is_what_its_templates_generate():
    # Regenerate with: python -m pytest_qualify.tasks.tool_use generate
    assert tool_use.render(tool_use.generate(read_text(tool_use.TEMPLATES))) == read_text(tool_use.REQUESTS)


def test_the_set_is_large_distinct_and_mixes_calls_no_calls_and_parallel_calls():
    requests = tool_use.request_set()
    assert len(requests) == 1000 and len({r.prompt for r in requests}) == 1000 and len({r.id for r in requests}) == 1000
    calls = Counter(len(r.calls) for r in requests)
    assert calls[0] >= 100 and calls[2] >= 20 and calls[1] >= 700
    assert {c.name for r in requests for c in r.calls} == set(SCHEMAS)  # every tool of the fixtures


@pytest.mark.parametrize("request_", tool_use.request_set()[::7], ids=lambda r: r.id)
def test_every_answer_is_known_and_passes_its_own_grader(request_):
    # The expected calls, written plainly, are exactly right and valid under their tools' schemas;
    # every value the calls expect is in the prompt.
    calls = [RawCall(c.name, json.dumps(canonical_arguments(c.arguments))) for c in request_.calls]
    if request_.calls:
        assert grade_calls(calls, request_.calls, SCHEMAS).ok
    for call in calls:
        for value in json.loads(call.arguments).values():
            for leaf in (value.values() if isinstance(value, dict) else value if isinstance(value, list) else [value]):
                shown = str(int(leaf)) if isinstance(leaf, float) and leaf.is_integer() else str(leaf)
                if leaf not in ("celsius", "fahrenheit", None, 0):
                    assert shown.lower() in request_.prompt.lower(), (request_.id, shown)


def test_a_sample_is_the_sets_first_requests():
    assert tool_use.sample(200) == tool_use.request_set()[:200]
    for bad in (0, 1001):
        with pytest.raises(ValueError, match="between 1 and 1000"):
            tool_use.sample(bad)


# -- the floor file -------------------------------------------------------------------------------------


def _bundle(directory: Path, figures: dict[str, object], requests: int = 200, digest: str | None = None,
            temperature: float = 0.0) -> Path:
    directory.mkdir(parents=True)
    props = {"tool_use_requests": requests, "tool_use_set_sha256": digest or tool_use.set_sha256(),
             "tool_use_temperature": temperature,
             **{tool_use.PROPERTY[m]: v for m, v in figures.items()}}
    summary = {"schema": "pytest-qualify/summary", "run": {"id": directory.name}, "simulated": False,
               "items": [{"nodeid": "suites/test_tool_use.py::test_tool_use_at_scale[rep1of1]", "module": "tool_use",
                          "repetition": 1, "outcome": "passed", "properties": props}]}
    (directory / "summary.json").write_text(json.dumps(summary))
    return directory


FIGURES = {"trigger_f1": 0.97, "schema_accuracy": 0.99, "exact_accuracy": 0.9}


def test_a_floor_is_built_from_earlier_bundles_and_read_back(tmp_path: Path):
    bundles = [_bundle(tmp_path / f"b{i}", {**FIGURES, "exact_accuracy": 0.9 + i / 100}) for i in range(3)]
    floor = tool_use.floor_from_bundles(bundles)
    assert floor["workload"] == tool_use.workload(200) and len(floor["runs"]) == 3
    assert [r["bundle"] for r in floor["runs"]] == ["b0", "b1", "b2"]
    path = tmp_path / "floor.json"
    path.write_text(json.dumps(floor))
    assert [r["exact_accuracy"] for r in tool_use.read_floor(path, 200)] == [0.9, 0.91, 0.92]
    with pytest.raises(FloorError, match="measured on another workload: requests: 200 there, 300 here"):
        tool_use.read_floor(path, 300)
    with pytest.raises(FloorError, match="temperature: 0.0 there, 0.6 here"):
        tool_use.read_floor(path, 200, 0.6)
    sampled = tool_use.floor_from_bundles([_bundle(tmp_path / f"t{i}", FIGURES, temperature=0.6) for i in range(2)])
    assert sampled["workload"] == tool_use.workload(200, 0.6)
    assert tool_use.main(["floor", str(tmp_path / "cli.json"), *map(str, bundles)]) == 0
    assert json.loads((tmp_path / "cli.json").read_text())["runs"] == floor["runs"]


@pytest.mark.parametrize("second,why", [
    ({"figures": FIGURES, "requests": 300}, "measured on 2 workloads"),
    ({"figures": FIGURES, "digest": "0" * 64}, "measured on 2 workloads"),
    ({"figures": FIGURES, "temperature": 0.6}, "measured on 2 workloads"),
    ({"figures": {**FIGURES, "schema_accuracy": "none"}}, "has no figure for every measure"),
])
def test_bundles_that_make_no_floor_say_why(tmp_path: Path, second, why):
    first = _bundle(tmp_path / "a", FIGURES)
    other = _bundle(tmp_path / "b", second["figures"], second.get("requests", 200), second.get("digest"),
                    second.get("temperature", 0.0))
    with pytest.raises(FloorError, match=why):
        tool_use.floor_from_bundles([first, other])
    assert tool_use.main(["floor", str(tmp_path / "x.json"), str(first), str(other)]) == 4


def test_a_bundle_without_the_module_makes_no_floor(tmp_path: Path):
    bundle = _bundle(tmp_path / "a", FIGURES)
    summary = json.loads((bundle / "summary.json").read_text())
    summary["items"][0]["module"] = "tools"
    (bundle / "summary.json").write_text(json.dumps(summary))
    with pytest.raises(FloorError, match="no tool_use item recorded its figures"):
        tool_use.floor_from_bundles([bundle])


# -- the profile's [tool_use] table: a floor that cannot judge this run is a usage error -------------------


def _profile(tmp_path: Path, table: str) -> Path:
    path = write_profile(tmp_path, ("tool_use",))
    path.write_text(path.read_text() + "\n[tool_use]\n" + table)
    return path


def test_the_shipped_reference_floor_loads_for_its_workload(tmp_path: Path):
    rules = load_profile(str(_profile(tmp_path, f'requests = 200\nfloor = "{SHIPPED_FLOOR}"\n'))).tool_use
    assert rules is not None and rules.requests == 200 and len(rules.floor_runs) >= 2
    assert all(r == {"trigger_f1": 1.0, "schema_accuracy": 1.0, "exact_accuracy": 1.0} for r in rules.floor_runs)
    # No table: the whole set, no floor (the module records its figures and judges nothing).
    from pytest_qualify.profiles import ToolUseRules

    assert load_profile(str(write_profile(tmp_path, ("tool_use",), name="bare.toml"))).tool_use == ToolUseRules()
    assert load_profile(str(_profile(tmp_path, "requests = 50\n"))).tool_use == ToolUseRules(requests=50)
    assert load_profile(str(_profile(tmp_path, "temperature = 0.6\n"))).tool_use == ToolUseRules(requests=1000, temperature=0.6)


@pytest.mark.parametrize("table,why", [
    (f'requests = 300\nfloor = "{SHIPPED_FLOOR}"\n', "was measured on another workload (requests 200 there, 300 here)"),
    (f'requests = 200\ntemperature = 0.6\nfloor = "{SHIPPED_FLOOR}"\n',
     "was measured on another workload (temperature 0.0 there, 0.6 here)"),
    ('requests = 200\nfloor = "missing.json"\n', "missing.json cannot be read"),
    ('requests = 2000\n', "field 'tool_use.requests' is invalid: the set holds 1000 requests"),
    ('floor = "notes.json"\n', "is not a tool-use floor file"),
    ('requests = 200\nfloor = "one-run.json"\n', "needs at least 2 runs"),
    ('floor = 3\n', "tool_use.floor"),
])
def test_a_floor_that_cannot_judge_the_run_is_a_profile_error(tmp_path: Path, table, why):
    (tmp_path / "notes.json").write_text('{"schema": "pytest-qualify/noise-floor"}')
    shipped = json.loads(Path(__file__).parents[2].joinpath(SHIPPED_FLOOR).read_text())
    (tmp_path / "one-run.json").write_text(json.dumps({**shipped, "runs": shipped["runs"][:1]}))
    with pytest.raises(ProfileError, match=why.replace("(", r"\(").replace(")", r"\)")):
        load_profile(str(_profile(tmp_path, table)))
