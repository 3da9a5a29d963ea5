"""Waivers: the file's rules (reason, expiry, waivable modules), matching, stale detection, and one
end-to-end run where a waived corpus failure leaves the gate passing and is listed."""

from __future__ import annotations

import datetime as dt
import json
import textwrap
from pathlib import Path

import pytest

from ..helpers import QualifyPytest
from pytest_qualify.gate import decide as gate
from pytest_qualify.bundle_format.schema import validate
from pytest_qualify.gate.waivers import (
    Candidate, Waiver, WaiverError, WaiverSet, count_conflicts, hard_module_conflicts, item_ids, load_waivers,
    total_conflicts, without_repetition,
)
from pytest_qualify.profiles import module_registry
from ..judging import judge

TODAY = dt.date(2026, 7, 29)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "waivers.toml"
    path.write_text(textwrap.dedent(text))
    return path


def test_a_valid_file(tmp_path):
    path = write(tmp_path, """
        [[waiver]]
        item = "test_multimodal.py::test_corpus_item[video-07]"
        reason = "clip 7's caption is ambiguous; ticket MM-12"
        expires = 2026-07-29

        [[waiver]]
        item = "test_corpus_item[image-*]"
        reason = "images under review"
        expires = "2026-12-31"
        expect = 12
    """)
    waivers = load_waivers(path, today=TODAY)
    assert [w.pattern for w in waivers] == ["test_multimodal.py::test_corpus_item[video-07]", "test_corpus_item[image-*]"]
    assert waivers[0].expires == TODAY  # valid through its last day
    assert waivers[1].expires == dt.date(2026, 12, 31)
    assert (waivers[0].expect, waivers[1].expect) == (None, 12)


@pytest.mark.parametrize("body, message", [
    ('item = "x"\nreason = "r"\nexpires = 2026-07-28', "expired on 2026-07-28"),
    ('item = "x"\nexpires = 2026-09-01', "needs a 'reason'"),
    ('item = "x"\nreason = "  "\nexpires = 2026-09-01', "needs a 'reason'"),
    ('item = "x"\nreason = "r"', "needs an 'expires' date"),
    ('item = "x"\nreason = "r"\nexpires = "soon"', "must be a date"),
    ('item = ""\nreason = "r"\nexpires = 2026-09-01', "'item' must name"),
    ('item = "x"\nreason = "r"\nexpires = 2026-09-01\nowner = "me"', "unknown key"),
    # A pattern says how many items it is meant to match, so it cannot quietly grow.
    ('item = "test_corpus_item[*]"\nreason = "r"\nexpires = 2026-09-01', "must state how many items it expects"),
    ('item = "test_x[v?]"\nreason = "r"\nexpires = 2026-09-01', "must state how many items it expects"),
    ('item = "test_x[*]"\nreason = "r"\nexpires = 2026-09-01\nexpect = 0', "'expect' must be the number"),
    ('item = "test_x[*]"\nreason = "r"\nexpires = 2026-09-01\nexpect = "3"', "'expect' must be the number"),
    ('item = "test_x[*]"\nreason = "r"\nexpires = 2026-09-01\nexpect = true', "'expect' must be the number"),
])
def test_broken_waivers_are_errors(tmp_path, body, message):
    path = write(tmp_path, "[[waiver]]\n" + body + "\n")
    with pytest.raises(WaiverError, match=message):
        load_waivers(path, today=TODAY)


def test_not_toml_and_missing_file(tmp_path):
    with pytest.raises(WaiverError, match="not valid TOML"):
        load_waivers(write(tmp_path, "[[waiver]\n"), today=TODAY)
    with pytest.raises(WaiverError, match="cannot be read"):
        load_waivers(tmp_path / "nope.toml", today=TODAY)


def test_repetition_is_not_part_of_an_id():
    assert without_repetition("s/test_mm.py::test_x[rep2of3-video-07]") == "s/test_mm.py::test_x[video-07]"
    assert without_repetition("s/test_mm.py::test_x[rep2of3]") == "s/test_mm.py::test_x"
    # A parameter that merely starts with "rep" is kept.
    assert without_repetition("a.py::t[report-rep1of1]") == "a.py::t[report]"
    assert item_ids("suites/test_mm.py::test_x[rep1of3-v7]", "test_x[v7]") == (
        "suites/test_mm.py::test_x[v7]", "test_mm.py::test_x[v7]", "test_x[v7]")


def w(pattern: str, index: int = 1) -> Waiver:
    return Waiver(pattern, "reason", dt.date(2099, 1, 1), index)


@pytest.mark.parametrize("pattern, matches", [
    ("test_x[v7]", True),
    ("test_mm.py::test_x[v7]", True),
    ("suites/test_mm.py::test_x[v7]", True),
    ("test_x[v*]", True),
    ("*::test_x[v?]", True),
    ("test_x[v]", False),          # brackets are literal, not a character class
    ("test_x[v7", False),
    ("test_x", False),             # an id names the whole test, not a prefix
    ("test_x[v70]", False),
    ("TEST_X[V7]", False),
])
def test_matching(pattern, matches):
    assert w(pattern).matches(item_ids("suites/test_mm.py::test_x[rep1of3-v7]", "test_x[v7]")) is matches


def test_hard_modules_cannot_be_waived():
    cands = [Candidate("s/test_smoke.py::test_health[rep1of1]", "smoke", item_ids("s/test_smoke.py::test_health[rep1of1]")),
             Candidate("s/test_mm.py::test_x[rep1of1-v7]", "multimodal", item_ids("s/test_mm.py::test_x[rep1of1-v7]"))]
    problems = hard_module_conflicts([w("test_x[v7]", 1), w("test_*", 2)], cands, ("multimodal",))
    assert problems == ["waiver #2 ('test_*') names s/test_smoke.py::test_health of the hard serving-contract "
                        "module 'smoke'; only multimodal accept waivers"]


def result(nodeid: str, module: str, item: str, outcome: str = "failed") -> gate.ItemResult:
    r = gate.ItemResult(nodeid, module, item, 1, 1)
    if outcome != "passed":
        r.record("call", outcome, "lacks 'violet'")
    return r


def _corpus(*labels: str, module: str = "multimodal", reps: int = 2) -> list[Candidate]:
    return [Candidate(f"suites/test_multimodal.py::{label.replace('[', f'[rep{r}of{reps}-', 1)}", module,
                      item_ids(f"suites/test_multimodal.py::{label.replace('[', f'[rep{r}of{reps}-', 1)}", label))
            for label in labels for r in range(1, reps + 1)]


def test_a_waiver_is_held_to_the_count_it_expects_and_never_takes_a_whole_module():
    items = _corpus("test_corpus_item[image-01]", "test_corpus_item[image-02]", "test_corpus_item[video-01]")
    pattern = Waiver("test_corpus_item[image-*]", "r", TODAY, 1, expect=2)
    assert count_conflicts([pattern], items) == []  # repetitions count once
    (grown,) = count_conflicts([Waiver("test_corpus_item[image-*]", "r", TODAY, 1, expect=1)], items)
    assert "expects to match 1 item(s) and matches 2" in grown and "test_corpus_item[image-01]" in grown
    (whole,) = count_conflicts([Waiver("test_corpus_item[*]", "r", TODAY, 1, expect=3)], items)
    assert "matches every item of module 'multimodal' (3 items)" in whole
    # Two waivers that each name part of a module are fine; one exact id needs no count.
    assert count_conflicts([Waiver("test_corpus_item[video-01]", "r", TODAY, 2)], items) == []
    # A pattern that matches nothing is stale (reported with the verdict), not a count error.
    assert count_conflicts([Waiver("test_gone[*]", "r", TODAY, 3, expect=4)], items) == []


def test_waiver_set_applies_only_to_failed_items_of_waivable_modules():
    ws = WaiverSet((w("test_x[*]", 1), w("test_gone", 2), w("test_y", 3)), ("multimodal",), "f.toml")
    failed = result("a.py::test_x[rep1of1-v7]", "multimodal", "test_x[v7]")
    skipped = result("a.py::test_x[rep1of1-v8]", "multimodal", "test_x[v8]", "skipped")
    hard = result("b.py::test_x[rep1of1-v7]", "tools", "test_x[v7]")
    passed = result("a.py::test_y[rep1of1]", "multimodal", "test_y", "passed")
    ws.observe(Candidate(r.nodeid, r.module, item_ids(r.nodeid, r.item)) for r in (failed, skipped, hard, passed))
    assert ws.waiver_for(failed).startswith("reason (waiver #1, expires 2099-01-01)")
    assert ws.waiver_for(skipped) is None
    assert ws.waiver_for(hard) is None
    assert [x.index for x in ws.stale()] == [2]
    assert [x.index for x in ws.unused()] == [3]
    statuses = {x["item"]: x["status"] for x in ws.as_dict()["waivers"]}
    assert statuses == {"test_x[*]": "applied", "test_gone": "stale", "test_y": "unused"}


def test_gate_counts_a_waived_failure_and_lists_it():
    ws = WaiverSet((w("test_x[v7]"),), ("multimodal",))
    results = [result("a.py::test_x[rep1of1-v7]", "multimodal", "test_x[v7]"),
               result("a.py::test_x[rep1of1-v1]", "multimodal", "test_x[v1]", "passed")]
    verdict = judge(results, module_registry(), ("multimodal",), waivers=ws)
    assert verdict.passed
    assert [r.item for r in verdict.waived] == ["test_x[v7]"]
    assert verdict.rows[0].result == "1/2 (1 waived)"


# -- end to end ----------------------------------------------------------------------------------

CORPUS = """
import pytest
pytestmark = pytest.mark.qualify_module("multimodal")

@pytest.mark.parametrize("case", ["img01", "img07"])
def test_image(case):
    if case == "img07":
        pytest.fail("img07: answer lacks required word 'violet'", pytrace=False)
"""

HARD = """
import pytest
pytestmark = pytest.mark.qualify_module("smoke")

def test_health():
    pass
"""


@pytest.fixture
def project(pytester, qualify_pytest: QualifyPytest) -> QualifyPytest:
    pytester.makepyfile(test_corpus=CORPUS, test_hard=HARD)
    return qualify_pytest


def run(project: QualifyPytest, tmp_path: Path, waivers: str, *extra: str) -> pytest.RunResult:
    return project("--qualify-waivers", str(write(tmp_path, waivers)), *extra,
                   modules=("smoke", "multimodal"), suites=("test_corpus.py", "test_hard.py"))


def test_waived_failure_passes_the_gate_and_is_reported(project, tmp_path):
    result = run(project, tmp_path, """
        [[waiver]]
        item = "test_image[img07]"
        reason = "caption under review, ticket MM-12"
        expires = 2099-12-31

        [[waiver]]
        item = "test_renamed_long_ago[*]"
        reason = "old"
        expires = 2099-12-31
        expect = 1
    """)
    out = result.stdout.str()
    assert result.ret == 0, out
    assert "QUALIFICATION: PASS" in out
    assert "1 failed, 2 passed" in out  # the waived failure is still a failure, never hidden
    assert "Multimodal corpus" in out and "1/2 (1 waived)" in out
    assert "waiver 'test_renamed_long_ago[*]' (stale" in out
    run_dir = project.run_dir()
    summary = json.loads((run_dir / "summary.json").read_text())
    validate(summary)
    assert [x["item"] for x in summary["verdict"]["waived"]] == ["test_image[img07]"]
    assert summary["verdict"]["waived"][0]["reason"] == "img07: answer lacks required word 'violet'"
    report = (run_dir / "report.md").read_text()
    assert "caption under review, ticket MM-12" in report and "**Stale waivers**" in report
    # A PASS is green in both JUnit files: the waived failure is reported as passed with its waiver.
    from pytest_qualify.evidence.junit import counts, structure_errors

    for data in ((run_dir / "junit.xml").read_bytes(), project.junit.read_bytes()):
        assert structure_errors(data) == [] and counts(data)["failures"] + counts(data)["errors"] == 0
    waived = [c for name, c in project.cases().items() if name.endswith("test_image[rep1of1-img07]")]
    assert len(waived) == 1 and "WAIVED: caption under review" in waived[0].find("system-out").text


def test_expired_waiver_is_a_usage_error(project, tmp_path):
    result = run(project, tmp_path, """
        [[waiver]]
        item = "test_image[img07]"
        reason = "was fine last year"
        expires = 2020-01-01
    """)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "expired on 2020-01-01" in result.stderr.str()
    assert not list(project.evidence.rglob("summary.json"))  # stopped before anything ran


def test_waiver_naming_a_hard_test_is_a_usage_error(project, tmp_path):
    result = run(project, tmp_path, """
        [[waiver]]
        item = "test_health"
        reason = "flaky"
        expires = 2099-12-31
    """)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "test_hard.py::test_health of the hard serving-contract module 'smoke'" in result.stderr.str()
    assert "only multimodal accept waivers" in result.stderr.str()


def _nothing_started(project: QualifyPytest, result: pytest.RunResult) -> None:
    out = result.stdout.str() + result.stderr.str()
    assert "launching" not in out and "server ready" not in out, out  # no server process was started
    assert not project.evidence.exists() or not any(p.is_dir() for p in project.evidence.iterdir()), \
        list(project.evidence.rglob("*"))  # no run folder, no bundle
    errors = [line for line in result.stderr.str().splitlines() if line.startswith("ERROR:")]
    assert len(errors) == 1, result.stderr.str()
    assert "QUALIFICATION" not in out, out  # one verdict: the usage error, no INCOMPLETE line before it


@pytest.mark.parametrize("xdist", [(), ("-n", "2")], ids=["one-process", "xdist"])
def test_a_hard_module_waiver_stops_before_the_server_starts(project, tmp_path, xdist):
    result = run(project, tmp_path, """
        [[waiver]]
        item = "test_hard.py::test_health"
        reason = "flaky"
        expires = 2099-12-31
    """, *xdist)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "the hard serving-contract module 'smoke'" in result.stderr.str()
    _nothing_started(project, result)


@pytest.mark.parametrize("pattern, expect, message", [
    ("test_image[*]", 2, "matches every item of module 'multimodal' (2 items)"),
    ("test_image[img07*]", 2, "expects to match 2 item(s) and matches 1 ("),
    ("test_corpus.py::test_im?ge[img01]", 3, "expects to match 3 item(s) and matches 1"),
])
def test_a_waiver_pattern_is_held_to_the_collection_before_the_server_starts(project, tmp_path, pattern, expect,
                                                                             message):
    result = run(project, tmp_path, f"""
        [[waiver]]
        item = "{pattern}"
        reason = "under review"
        expires = 2099-12-31
        expect = {expect}
    """)
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    assert message in result.stderr.str() and "waivers.toml" in result.stderr.str()
    _nothing_started(project, result)


# -- waivers as a whole: their union is held to the module and to the profile's max_waived ----------

CORPUS_IDS = [f"test_corpus_item[{kind}-{n:02d}]" for kind, count in (("image", 12), ("mixed", 4), ("video", 14))
              for n in range(1, count + 1)]


def _whole_corpus(reps: int = 2) -> list[Candidate]:
    return [Candidate(f"suites/test_multimodal.py::{i[:-1]}-rep{r}of{reps}]", "multimodal",
                      item_ids(f"suites/test_multimodal.py::{i[:-1]}-rep{r}of{reps}]", i))
            for i in CORPUS_IDS for r in range(1, reps + 1)]


def _globs(*patterns: tuple[str, int]) -> tuple[Waiver, ...]:
    return tuple(Waiver(p, "under review", dt.date(2099, 1, 1), n, expect) for n, (p, expect) in enumerate(patterns, 1))


def test_waivers_that_each_keep_their_count_may_not_together_waive_a_whole_module():
    waivers = _globs(("test_corpus_item[image-*]", 12), ("test_corpus_item[mixed-*]", 4),
                     ("test_corpus_item[video-*]", 14))
    items = _whole_corpus()
    assert count_conflicts(waivers, items) == []  # each alone is what it says
    (problem,) = total_conflicts(waivers, items, {"multimodal": 30})
    assert problem == ("waiver #1 ('test_corpus_item[image-*]'), waiver #2 ('test_corpus_item[mixed-*]'), waiver #3 "
                       "('test_corpus_item[video-*]') together match every item of module 'multimodal' (30 of 30): "
                       "a module is judged, never waived whole")


@pytest.mark.parametrize("patterns, allowed, problem", [
    ((("test_corpus_item[image-01]", None), ("test_corpus_item[video-1?]", 5)), 2,
     "waiver #1 ('test_corpus_item[image-01]'), waiver #2 ('test_corpus_item[video-1?]') together match 6 items of "
     "module 'multimodal'; the profile allows at most 2 (modules.max_waived)"),
    ((("test_corpus_item[image-01]", None), ("test_corpus_item[video-14]", None)), 2, None),
    ((("test_corpus_item[image-01]", None), ("test_corpus_item[image-01]", None)), 1, None),  # one item, twice
    ((("test_corpus_item[image-01]", None),), 0,
     "waiver #1 ('test_corpus_item[image-01]') together match 1 items of module 'multimodal'; the profile allows "
     "at most 0 (modules.max_waived)"),
])
def test_all_waivers_together_waive_at_most_the_profiles_count_of_items(patterns, allowed, problem):
    found = total_conflicts(_globs(*patterns), _whole_corpus(reps=3), {"multimodal": allowed})
    assert found == ([problem] if problem else [])


def test_the_profile_states_how_many_items_of_a_module_may_be_waived(tmp_path):
    from pytest_qualify.profiles import ProfileError, builtin_profiles, load_profile

    assert dict(load_profile("262k").max_waived) == {"multimodal": 2}
    text = Path(builtin_profiles()["small"]).read_text()
    path = tmp_path / "p.toml"
    path.write_text(text.replace("max_waived = { multimodal = 2 }", "max_waived = { multimodal = 5 }"))
    assert dict(load_profile(str(path)).max_waived) == {"multimodal": 5}
    path.write_text(text.replace("max_waived = { multimodal = 2 }", "max_waived = { tools = 1 }"))
    with pytest.raises(ProfileError, match=r"modules\.max_waived\.tools.*not waivable"):
        load_profile(str(path))
    path.write_text(text.replace("max_waived = { multimodal = 2 }", "max_waived = { multimodal = -1 }"))
    with pytest.raises(ProfileError, match="max_waived"):
        load_profile(str(path))


def test_three_waivers_that_together_cover_the_corpus_stop_before_the_server_starts(qualify_pytest, tmp_path):
    from ..helpers import suite

    waivers = write(tmp_path, """
        [[waiver]]
        item = "test_corpus_item[image-*]"
        reason = "the route answers media requests with a refusal"
        expires = 2099-12-31
        expect = 12

        [[waiver]]
        item = "test_corpus_item[mixed-*]"
        reason = "the route answers media requests with a refusal"
        expires = 2099-12-31
        expect = 4

        [[waiver]]
        item = "test_corpus_item[video-*]"
        reason = "the route answers media requests with a refusal"
        expires = 2099-12-31
        expect = 14
    """)
    result = qualify_pytest("--qualify-waivers", str(waivers), modules=("multimodal",), suites=suite("multimodal"))
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    assert "together match every item of module 'multimodal' (30 of 30)" in result.stderr.str()
    _nothing_started(qualify_pytest, result)
