"""Served identity at both ends of a run, and the promoted run a post-promotion check is held to."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from ..helpers import seal_hand_bundle
from pytest_qualify.graders.identity import check_identity
from pytest_qualify.promotion.identity import Identity, change_reason, differences, model_entry, read_identity, revision_in
from pytest_qualify.promotion.promoted import PromotedError, load_promoted, mismatches

REV = "4d7d59380f327b76e73bc71f40e0c589ad0ca1d5"
MODELS = [{"id": "other", "root": "x", "max_model_len": 1},
          {"id": "agents-a1-fp8-mm-262k", "root": "InternScience/Agents-A1-FP8", "max_model_len": 262144}]
QUALIFIED = Identity("agents-a1-fp8-mm-262k", "InternScience/Agents-A1-FP8", 262144, "0.23.1rc1.dev1327+gf25953cc5")


def test_reading_takes_the_served_names_entry():
    i = read_identity("agents-a1-fp8-mm-262k", MODELS, "0.23.1rc1.dev1327+gf25953cc5")
    assert i == QUALIFIED and i.error is None


def test_reading_says_why_it_is_incomplete():
    i = read_identity("agents-a1-fp8-mm-262k", [MODELS[0]], None, version_error="HTTP 404")
    assert i.model_root is None and i.window_tokens is None
    assert "does not list 'agents-a1-fp8-mm-262k'" in i.error and "['other']" in i.error and "/version: HTTP 404" in i.error
    assert "/v1/models: HTTP 401" in read_identity("m", None, "v", models_error="HTTP 401").error


def test_revision_is_visible_only_in_a_snapshot_path():
    assert revision_in(f"/hf/models--InternScience--Agents-A1-FP8/snapshots/{REV}") == REV
    assert revision_in(f"/hf/snapshots/{REV}/") == REV
    assert revision_in("InternScience/Agents-A1-FP8") is None
    assert revision_in(f"/hf/snapshots/{REV}x") is None
    assert revision_in(None) is None


def test_an_unchanged_identity_is_no_reason():
    assert change_reason(QUALIFIED, QUALIFIED) is None
    assert differences(QUALIFIED, Identity.from_dict(QUALIFIED.as_dict())) == []


@pytest.mark.parametrize("field, value", [
    ("model_root", "Qwen/Qwen3.5-122B-A10B-NVFP4"),
    ("window_tokens", 131072),
    ("engine_version", "0.24.0"),
    ("served_name", "agents-a1-fp8-mm-128k"),
])
def test_a_change_fails_with_both_readings(field, value):
    end = Identity(**{**QUALIFIED.as_dict(), field: value})
    reason = change_reason(QUALIFIED, end)
    assert reason is not None and "changed during the run" in reason
    assert field in reason and str(value) in reason
    # Both readings, whole: the operator sees what was served before and after.
    assert f"at the start {QUALIFIED.describe()}" in reason and f"at the end {end.describe()}" in reason


def test_an_unreadable_end_fails_when_the_start_was_read():
    end = read_identity(QUALIFIED.served_name, None, None, models_error="ConnectError")
    reason = change_reason(QUALIFIED, end)
    assert reason is not None and "could not be read at the end" in reason and "ConnectError" in reason
    assert QUALIFIED.describe() in reason


# -- the promoted run ------------------------------------------------------------------------------


def _summary(**over) -> dict:
    s = {
        "schema": "pytest-qualify/summary", "schema_version": 1, "simulated": False,
        "run": {"id": "20260729T101500Z-abc123"},
        "verdict": {"result": "PASS"},
        "stage": {"name": "full"},
        "profile": {"name": "262k", "deployment": {"revision": REV, "served_name": QUALIFIED.served_name}},
        "target": {"engine_version": QUALIFIED.engine_version, "models": MODELS},
        "identity": {"start": QUALIFIED.as_dict(), "end": QUALIFIED.as_dict(), "changed": None},
    }
    s.update(over)
    return s


def _bundle(tmp_path: Path, summary: dict, manifest: bool = True) -> Path:
    run = tmp_path / "run"
    run.mkdir(parents=True, exist_ok=True)
    path = run / "summary.json"
    path.write_text(json.dumps(summary))
    (run / "report.md").write_text("# report\n")
    if manifest:
        seal_hand_bundle(run, summary)
    return path


def test_a_promoted_full_pass_loads_with_its_digests(tmp_path):
    path = _bundle(tmp_path, _summary())
    p = load_promoted(str(path))
    assert p.run_id == "20260729T101500Z-abc123" and p.identity == QUALIFIED and p.revision == REV
    assert p.summary_sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert p.manifest_sha256 == hashlib.sha256((path.parent / "SHA256SUMS").read_bytes()).hexdigest()
    assert mismatches(p, QUALIFIED, live_simulated=False) == []


def test_an_older_summary_without_identities_uses_its_models_and_version(tmp_path):
    s = _summary()
    del s["identity"], s["stage"]
    assert load_promoted(str(_bundle(tmp_path, s))).identity == QUALIFIED


@pytest.mark.parametrize("summary, message", [
    (_summary(verdict={"result": "FAIL"}), "did not pass.*verdict.result"),
    (_summary(stage={"name": "preflight"}), "preflight stage, not a qualification"),
    (_summary(schema="something/else"), "not a pytest-qualify summary.json"),
    ({"schema": "pytest-qualify/summary"}, "field 'run' is missing"),
    (_summary(identity=None, target={"models": [], "engine_version": "v"}), "recorded no served identity"),
])
def test_a_summary_that_cannot_back_a_promotion_is_refused(tmp_path, summary, message):
    path = _bundle(tmp_path, summary)
    with pytest.raises(PromotedError, match=message) as err:
        load_promoted(str(path))
    assert str(path) in str(err.value)


def test_missing_unreadable_and_unchecked_files_are_refused(tmp_path):
    with pytest.raises(PromotedError, match="cannot be read"):
        load_promoted(str(tmp_path / "absent.json"))
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(PromotedError, match="not JSON"):
        load_promoted(str(bad))
    with pytest.raises(PromotedError, match="no SHA256SUMS beside it"):
        load_promoted(str(_bundle(tmp_path / "a", _summary(), manifest=False)))
    path = _bundle(tmp_path / "b", _summary())
    (path.parent / "report.md").write_text("# edited after the run\n")
    with pytest.raises(PromotedError, match="report.md: checksum mismatch"):
        load_promoted(str(path))


def _promoted(tmp_path: Path, **over):
    return load_promoted(str(_bundle(tmp_path, _summary(**over))))


def test_the_live_route_must_serve_exactly_the_qualified_identity(tmp_path):
    p = _promoted(tmp_path)
    rollback = Identity(QUALIFIED.served_name, "Qwen/Qwen3.5-122B-A10B-NVFP4", 262144, QUALIFIED.engine_version)
    [reason] = mismatches(p, rollback, live_simulated=False)
    assert "does not serve the identity that run 20260729T101500Z-abc123 qualified" in reason
    assert "Qwen/Qwen3.5-122B-A10B-NVFP4" in reason and "InternScience/Agents-A1-FP8" in reason
    other_engine = Identity(**{**QUALIFIED.as_dict(), "engine_version": "0.24.0"})
    assert "engine_version" in mismatches(p, other_engine, live_simulated=False)[0]
    unread = read_identity(QUALIFIED.served_name, None, None, models_error="HTTP 404")
    assert "could not be read" in mismatches(p, unread, live_simulated=False)[0]


def test_revision_is_compared_where_the_live_root_shows_it(tmp_path):
    p = _promoted(tmp_path)
    same = Identity(**{**QUALIFIED.as_dict(), "revision": REV})
    assert mismatches(p, same, live_simulated=False) == []
    other = Identity(**{**QUALIFIED.as_dict(), "revision": "0" * 40})
    [reason] = mismatches(p, other, live_simulated=False)
    assert f"revision '{REV}' -> '{'0' * 40}'" in reason


def test_a_simulated_qualification_can_never_back_a_route(tmp_path):
    # Not a real route, nor another simulated one: a SIMULATED run is never promoted.
    with pytest.raises(PromotedError, match="qualified a SIMULATED endpoint .field 'simulated' is true."):
        _promoted(tmp_path, simulated=True)


# -- one stage run's readings ------------------------------------------------------------------------


def _stage(name="preflight"):
    from pytest_qualify.profiles import load_profile

    return load_profile("262k").stage(name)


def test_a_run_whose_server_never_answered_adds_no_identity_reason():
    from pytest_qualify.promotion.stage_run import StageRun

    assert StageRun(_stage()).problems_at_end() == []


def test_an_unreadable_start_is_a_reason_of_its_own():
    from pytest_qualify.promotion.stage_run import StageRun

    start = read_identity(QUALIFIED.served_name, [], "v")
    run = StageRun(_stage(), start=start, end=start)
    [reason] = run.problems_at_end()
    assert reason.startswith("served identity could not be read at the start of the run") and "does not list" in reason


def test_a_promoted_mismatch_is_reported_once_when_both_ends_show_it(tmp_path):
    from pytest_qualify.promotion.stage_run import StageRun, StageUsageError, plan
    from pytest_qualify.profiles import load_profile

    promoted = _promoted(tmp_path)
    other = Identity(**{**QUALIFIED.as_dict(), "engine_version": "0.24.0"})
    run = StageRun(_stage("post-promotion"), promoted=promoted, start=other, end=other)
    assert len(run.problems_at_end()) == 1 and run.promoted_mismatches == run.problems_at_end()
    with pytest.raises(StageUsageError, match="applies to the post-promotion and rollback stages only, not to full"):
        plan(load_profile("262k"), "full", "x.json", simulated=False)
    # A worker takes the stage but leaves the promoted file to the controller.
    assert plan(load_profile("262k"), "post-promotion", "absent.json", simulated=False, load=False).promoted is None


# -- the smoke module's grader reads /v1/models through the same lookup ----------------------------

SERVED = [{"id": "other"}, {"id": "small-chat-4k", "root": "pytest-qualify/small-chat", "max_model_len": 4096}, "junk"]


def test_model_entry_finds_the_served_name_and_lists_the_ids():
    entry, ids = model_entry(SERVED, "small-chat-4k")
    assert entry == SERVED[1] and ids == ["other", "small-chat-4k"]
    assert model_entry(SERVED, "absent") == (None, ["other", "small-chat-4k"])


def test_check_identity_accepts_the_profiles_identity():
    v = check_identity(SERVED, "small-chat-4k", "pytest-qualify/small-chat", 4096)
    assert v.ok and v.reason == "small-chat-4k: root pytest-qualify/small-chat, window 4096"


def test_check_identity_rejects_a_served_name_not_listed():
    v = check_identity(SERVED, "absent", "pytest-qualify/small-chat", 4096)
    assert not v.ok and v.reason == "served name 'absent' not listed; the server lists ['other', 'small-chat-4k']"


def test_check_identity_rejects_a_wrong_root_and_window_as_read_identity_reads_them():
    v = check_identity(SERVED, "small-chat-4k", "another/model", 2048)
    assert not v.ok and v.reason == ("small-chat-4k: root is 'pytest-qualify/small-chat', expected 'another/model'; "
                                     "max_model_len is 4096, expected 2048")
    i = read_identity("small-chat-4k", SERVED, "v")
    assert (i.model_root, i.window_tokens, i.error) == ("pytest-qualify/small-chat", 4096, None)


# -- a promoted bundle agrees with itself before it backs anything ---------------------------------


def _rewrite_summary(path: Path, **over) -> None:
    """What the issue's operator did: summary.json rewritten, its SHA256SUMS line redone, the
    statement written at the end of the run left as it was."""
    data = json.loads(path.read_text())
    data.update(over)
    path.write_text(json.dumps(data))
    sums = path.parent / "SHA256SUMS"
    lines = [f"{hashlib.sha256(path.read_bytes()).hexdigest()}  summary.json" if line.endswith("  summary.json")
             else line for line in sums.read_text().splitlines()]
    sums.write_text("\n".join(lines) + "\n")


def test_a_summary_rewritten_to_pass_with_its_checksum_redone_backs_nothing(tmp_path):
    path = _bundle(tmp_path, _summary(verdict={"result": "FAIL"}))
    _rewrite_summary(path, verdict={"result": "PASS"})
    with pytest.raises(PromotedError) as err:
        load_promoted(str(path))
    message = str(err.value)
    assert message.startswith(f"promoted summary {path}: provenance.intoto.json: summary.json has sha256 ")
    assert " in the statement, " in message and hashlib.sha256(path.read_bytes()).hexdigest() in message


@pytest.mark.parametrize("field, said, read", [
    ("verdict", {"result": "FAIL"}, "the verdict is 'FAIL' in the statement (predicate.verdict.result) but 'PASS'"),
    ("run", {"id": "another-run"}, "the run id is 'another-run' in the statement (predicate.run.id) but "
                                   "'20260729T101500Z-abc123'"),
])
def test_a_statement_that_says_another_verdict_or_run_is_refused_with_both_readings(tmp_path, field, said, read):
    path = _bundle(tmp_path, _summary())
    statement_path = path.parent / "provenance.intoto.json"
    statement = json.loads(statement_path.read_text())
    statement["predicate"][field] = said
    statement_path.write_text(json.dumps(statement))
    seal = path.parent / "SHA256SUMS"  # the statement's own line redone: only the contents disagree
    seal.write_text("".join(
        f"{hashlib.sha256(statement_path.read_bytes()).hexdigest()}  provenance.intoto.json\n"
        if line.endswith("provenance.intoto.json") else line + "\n" for line in seal.read_text().splitlines()))
    with pytest.raises(PromotedError, match="provenance.intoto.json: ") as err:
        load_promoted(str(path))
    assert read in str(err.value)


MODEL = "InternScience/Agents-A1-FP8"


@pytest.mark.parametrize("field, said, read", [
    ("model", "InternScience/Agents-A2-FP8",
     f"the model is 'InternScience/Agents-A2-FP8' in the statement (predicate.deployment.model) but {MODEL!r} in "
     "summary.json (profile.deployment.model)"),
    ("served_name", "agents-a1-fp8-mm-128k",
     "the served name is 'agents-a1-fp8-mm-128k' in the statement (predicate.deployment.served_name) but "
     f"{QUALIFIED.served_name!r} in summary.json (profile.deployment.served_name)"),
    ("engine_version", "0.24.0",
     "the engine version is '0.24.0' in the statement (predicate.deployment.engine_version) but "
     f"{QUALIFIED.engine_version!r} in summary.json (target.engine_version)"),
    # A statement that says the run was simulated where the summary says it was not: a SIMULATED run
    # rewritten as real must not back a promotion.
    ("simulated", True, "simulated is True in the statement (predicate.deployment.simulated) but False in "
                        "summary.json (simulated)"),
])
def test_a_statement_whose_identity_disagrees_with_the_summary_is_refused_with_both_readings(tmp_path, field, said, read):
    summary = _summary(profile={"name": "262k", "deployment": {"revision": REV, "model": MODEL,
                                                               "served_name": QUALIFIED.served_name}})
    path = _bundle(tmp_path, summary)
    load_promoted(str(path))  # as sealed, the statement agrees with its summary
    statement_path = path.parent / "provenance.intoto.json"
    statement = json.loads(statement_path.read_text())
    statement["predicate"]["deployment"][field] = said
    statement_path.write_text(json.dumps(statement))
    with seal_of(path) as lines:  # the statement's own line redone: only the contents disagree
        lines[:] = [f"{hashlib.sha256(statement_path.read_bytes()).hexdigest()}  provenance.intoto.json"
                    if line.endswith("  provenance.intoto.json") else line for line in lines]
    with pytest.raises(PromotedError) as err:
        load_promoted(str(path))
    assert str(err.value) == f"promoted summary {path}: provenance.intoto.json: {read}"


def test_a_bundle_without_its_statement_or_with_a_file_it_does_not_name_is_refused(tmp_path):
    path = _bundle(tmp_path / "a", _summary())
    (path.parent / "provenance.intoto.json").unlink()
    seal = path.parent / "SHA256SUMS"
    seal.write_text("".join(l + "\n" for l in seal.read_text().splitlines() if "provenance" not in l))
    with pytest.raises(PromotedError, match="provenance.intoto.json cannot be read"):
        load_promoted(str(path))
    path = _bundle(tmp_path / "b", _summary())
    extra = path.parent / "notes.txt"
    extra.write_text("added after the run\n")
    with seal_of(path) as lines:
        lines.append(f"{hashlib.sha256(extra.read_bytes()).hexdigest()}  notes.txt")
    with pytest.raises(PromotedError, match="notes.txt is in SHA256SUMS .* but not a subject of the statement"):
        load_promoted(str(path))


class seal_of:  # noqa: N801 - a context manager over a bundle's SHA256SUMS lines
    def __init__(self, summary: Path) -> None:
        self.path = summary.parent / "SHA256SUMS"

    def __enter__(self) -> list[str]:
        self.lines = self.path.read_text().splitlines()
        return self.lines

    def __exit__(self, *exc) -> None:
        self.path.write_text("\n".join(self.lines) + "\n")
