"""The parsers module end to end against the reference server: its forced cases come back exactly,
every marker generated as the model's own token, and the module PASSes; where the forced markers
were spelt in other tokens (``parser_markers_spelt``), the cases that deviate measured the forcing,
not the parser, so the items are not judged and the run is INCOMPLETE naming why, never a FAIL of
the deployment."""

from __future__ import annotations

import json

from pytest_qualify.tasks import parsers

from ..helpers import QualifyPytest, suite, write_profile

UNFORCED = "forced cases were not generated as the model's own marker tokens, so they measured the forcing, not the parser"


def _records(qualify_pytest: QualifyPytest) -> list[dict]:
    lines = (qualify_pytest.run_dir() / parsers.OUTCOMES_FILE).read_text().splitlines()
    return [json.loads(line) for line in lines]


def test_forced_cases_with_their_own_marker_tokens_pass(qualify_pytest: QualifyPytest):
    result = qualify_pytest(profile=write_profile(qualify_pytest.pytester.path, ("parsers",)), suites=suite("parsers"))
    assert result.ret == 0, result.stdout.str()[-3000:]
    items = [i for i in qualify_pytest.summary()["items"] if i["module"] == "parsers"]
    assert items and all(i["outcome"] == "passed" and i["properties"]["parser_unforced"] == 0 for i in items), items
    records = _records(qualify_pytest)
    # The reference's tokenizer holds each marker as one token, and the generated ids came back.
    marked = [r for r in records if r["markers_as_tokens"] == "held"]
    assert marked and len(marked) == len(records), {r["markers_as_tokens"] for r in records}


def test_markers_spelt_in_other_tokens_leave_the_items_not_judged_never_a_fail(qualify_pytest: QualifyPytest):
    result = qualify_pytest(profile=write_profile(qualify_pytest.pytester.path, ("parsers",)),
                            faults=("parser_markers_spelt",), suites=suite("parsers"))
    out = result.stdout.str()
    assert result.ret == 2, out[-3000:]
    result.stdout.fnmatch_lines(["*QUALIFICATION: INCOMPLETE*"])
    summary = qualify_pytest.summary()
    assert {f["name"]: f["engaged"] for f in summary["faults"]["armed"]} == {"parser_markers_spelt": True}
    items = {i["nodeid"].split("[")[-1].split("..")[0]: i for i in summary["items"] if i["module"] == "parsers"}
    # Every shard of tool calls is not judged; the held-content shard holds no marker and passes.
    assert {k: i["outcome"] for k, i in items.items()} == {
        "call-0001": "ungraded", "parallel-0001": "ungraded", "after_content-0001": "ungraded", "held-0001": "passed"}
    for item in (i for i in items.values() if i["outcome"] == "ungraded"):
        assert item["reason"].startswith("not judged: "), item["reason"]
        assert UNFORCED in item["reason"], item["reason"]
        assert "'<tool_call>' is 1 time(s) in the forced text but its token" in item["reason"] or \
               "'<tool_call>' is 2 time(s) in the forced text but its token" in item["reason"], item["reason"]
        assert int(item["properties"]["parser_unforced"]) == int(item["properties"]["parser_cases"]) > 0
    verdict = summary["verdict"]
    assert verdict["result"] == "INCOMPLETE" and not verdict["failures"], verdict
    assert any(UNFORCED in r for r in verdict["reasons"]), verdict["reasons"]
    # The cases were asked and recorded as they came: deviating, their markers spelt otherwise.
    records = _records(qualify_pytest)
    spelt = [r for r in records if r["markers_as_tokens"] not in ("held", "no marker is one token here")]
    assert spelt and all("generated 0 time(s)" in r["markers_as_tokens"] for r in spelt)
