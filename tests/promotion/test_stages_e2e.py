"""The promotion's stages end to end on the reference server: preflight, full and post-promotion
each PASS (also under -n 2), each FAILs for its own reason under a fault, and a bad stage or promoted
run is a usage error.

The runs use the small profile cut to the modules the stages name (``STAGE_MODULES``): what is
tested is the stage path (selection, identity at both ends, the promoted-run link, the verdict word,
exit status, xdist hand-over), which is the same on a 4,096-token window as on 262,144; a 240K
haystack would only add minutes. The 262k profile's own stage table is checked in process
(``tests/promotion/test_stages.py``)."""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import pytest

from pytest_qualify.bundle_format.manifest import verify_manifest
from pytest_qualify.bundle_format.schema import validate

from ..helpers import run_pytest, write_profile

pytestmark = pytest.mark.e2e

USAGE_ERROR = 4
# Preflight's and post-promotion's modules, and window: the module only the full stage runs.
STAGE_MODULES = ("smoke", "json", "context", "tools", "reasoning", "window")


@dataclass
class Run:
    code: int
    out: str
    bundle: Path | None

    @property
    def summary(self) -> dict:
        return json.loads((self.bundle / "summary.json").read_text())

    @property
    def verdict_line(self) -> str:
        return next(line for line in self.out.splitlines()
                    if line.startswith(("QUALIFICATION", "PREFLIGHT", "POST-PROMOTION CHECK", "ROLLBACK CHECK")))


@pytest.fixture(scope="module")
def profile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The small profile cut to ``STAGE_MODULES``; every run of this file uses it."""
    return write_profile(tmp_path_factory.mktemp("profile"), STAGE_MODULES, name="stages.toml")


def qualify(profile: Path, where: Path, *args: str) -> Run:
    """``pytest --qualify=PROFILE --qualify-endpoint reference ARGS`` in ``where``; its one new bundle."""
    where.mkdir(parents=True, exist_ok=True)
    evidence = where / "ev"
    before = set(evidence.iterdir()) if evidence.is_dir() else set()
    proc = run_pytest(f"--qualify={profile}", "--qualify-endpoint", "reference", "--qualify-evidence", str(evidence),
                      *args, cwd=where, timeout=600)
    new = sorted(set(evidence.iterdir()) - before) if evidence.is_dir() else []
    return Run(proc.returncode, proc.stdout + proc.stderr, new[0] if new else None)


@pytest.fixture(scope="module")
def full_run(profile: Path, tmp_path_factory: pytest.TempPathFactory) -> Run:
    """One full qualification (the run a promotion is held to)."""
    return qualify(profile, tmp_path_factory.mktemp("full"), "--qualify-stage", "full")


@pytest.fixture(scope="module")
def promoted(full_run: Run, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The full run's bundle as a real deployment's would be: ``simulated`` false and the bundle
    sealed again. What these tests hold is the link between two runs (identity, digests); a
    SIMULATED summary itself is refused (test_a_simulated_run_can_never_be_promoted), and a real
    full qualification costs minutes of vLLM."""
    return sealed_as_real(full_run.bundle, tmp_path_factory.mktemp("promoted"))


def sealed_as_real(bundle: Path, where: Path) -> Path:
    """A copy of ``bundle`` in ``where`` with ``simulated`` false, its statement and ``SHA256SUMS``
    written again as the run itself would have written them; its summary.json."""
    import hashlib

    copy = where / bundle.name
    shutil.copytree(bundle, copy)
    summary = json.loads((copy / "summary.json").read_text())
    summary["simulated"] = summary["target"]["simulated"] = False
    (copy / "summary.json").write_text(json.dumps(summary, indent=2))
    # The statement written again over the new summary, as the run itself would have written it.
    from pytest_qualify.evidence.provenance import PROVENANCE_FILE, statement

    recorded = json.loads((copy / PROVENANCE_FILE).read_text())
    (copy / PROVENANCE_FILE).unlink()
    (copy / "SHA256SUMS").unlink()
    again = statement(copy, summary, exit_code=recorded["predicate"]["verdict"]["exit_code"])
    (copy / PROVENANCE_FILE).write_text(json.dumps(again, indent=2) + "\n")
    (copy / "SHA256SUMS").write_text("".join(f"  {p.name}\n" for p in sorted(copy.iterdir()) if p.is_file()))
    lines = [line.partition("  ") for line in (copy / "SHA256SUMS").read_text().splitlines()]
    (copy / "SHA256SUMS").write_text("".join(
        f"{hashlib.sha256((copy / name).read_bytes()).hexdigest()}  {name}\n" for _, _, name in lines))
    return copy / "summary.json"


def test_a_simulated_run_can_never_be_promoted(profile, tmp_path, full_run):
    assert full_run.summary["simulated"] is True
    for stage in ("post-promotion", "rollback"):
        refused = qualify(profile, tmp_path / stage, "--qualify-stage", stage,
                          "--qualify-promoted", str(full_run.bundle / "summary.json"))
        assert refused.code == USAGE_ERROR, refused.out
        assert "qualified a SIMULATED endpoint" in refused.out and "server ready" not in refused.out
        assert refused.bundle is None  # no evidence of a run that never started


@pytest.fixture(scope="module")
def preflight_run(profile: Path, tmp_path_factory: pytest.TempPathFactory) -> Run:
    """One preflight under xdist: the controller reads the identity, the workers run the items."""
    return qualify(profile, tmp_path_factory.mktemp("preflight"), "--qualify-stage", "preflight", "-n", "2")


def items_by_module(summary: dict) -> dict[str, set]:
    out: dict[str, set] = {}
    for item in summary["items"]:
        out.setdefault(item["module"], set()).add(item["lane"])
    return out


def test_preflight_passes_as_a_preflight_under_xdist(preflight_run):
    run = preflight_run
    assert run.code == 0, run.out
    assert run.verdict_line == "PREFLIGHT: PASS (stage preflight; not a qualification)"
    assert "QUALIFICATION: PASS" not in run.out
    assert "preflight gate (not a qualification): profile small" in run.out
    assert ("qualify: stage preflight — Functional preflight: smoke, json, context, tools; context lanes 3K; "
            "not a qualification") in run.out
    s = run.summary
    validate(s)
    assert verify_manifest(run.bundle) == []
    # smoke, json, tools and the context module at the largest lane (3K) only: nothing else ran.
    assert items_by_module(s) == {"smoke": {None}, "json": {None}, "context": {"3K"}, "tools": {None}}
    assert s["stage"]["name"] == "preflight" and s["stage"]["qualifies"] is False
    assert s["identity"]["changed"] is None and s["identity"]["start"] == s["identity"]["end"]
    report = (run.bundle / "report.md").read_text()
    assert report.startswith("# Functional preflight: small-chat-4k — PREFLIGHT: PASS")
    props = {p.get("name"): p.get("value") for p in ET.parse(run.bundle / "junit.xml").iter("property")
             if p.get("name", "").startswith("stage")}
    assert props == {"stage": "preflight", "stage_is_qualification": "false",
                     "stage_verdict": "PREFLIGHT: PASS (stage preflight; not a qualification)"}


def test_the_full_stage_is_the_whole_protocol(full_run):
    assert full_run.code == 0, full_run.out
    assert full_run.verdict_line == "QUALIFICATION: PASS"
    s = full_run.summary
    validate(s)
    assert s["stage"]["name"] == "full" and s["stage"]["qualifies"] is True
    assert set(items_by_module(s)) == set(s["profile"]["required_modules"])
    assert items_by_module(s)["context"] == {"1K", "2K", "3K"}
    assert s["identity"]["end"]["model_root"] == "pytest-qualify/small-chat" and s["identity"]["changed"] is None
    assert (full_run.bundle / "report.md").read_text().startswith("# Qualification report: small-chat-4k — PASS")


def test_post_promotion_is_held_to_the_promoted_run_under_xdist(profile, tmp_path, full_run, promoted):
    run = qualify(profile, tmp_path, "--qualify-stage", "post-promotion", "--qualify-promoted", str(promoted), "-n", "2")
    assert run.code == 0, run.out
    assert run.verdict_line == "POST-PROMOTION CHECK: PASS (stage post-promotion; not a qualification)"
    s = run.summary
    validate(s)
    assert set(items_by_module(s)) == {"smoke", "json", "tools", "reasoning"}
    assert s["promoted"]["run_id"] == full_run.summary["run"]["id"] and s["promoted"]["mismatches"] == []
    manifest_digest = s["promoted"]["bundle_sha256sums_sha256"]
    import hashlib

    assert manifest_digest == hashlib.sha256((promoted.parent / "SHA256SUMS").read_bytes()).hexdigest()
    report = (run.bundle / "report.md").read_text()
    assert f"Promoted run: `{full_run.summary['run']['id']}`" in report and manifest_digest in report


def test_an_identity_change_mid_run_fails_the_preflight(profile, tmp_path):
    run = qualify(profile, tmp_path, "--qualify-stage", "preflight", "-n", "2", "--qualify-reference-fault", "engine_swap_after=2")
    assert run.code == 1, run.out
    assert run.verdict_line.startswith("PREFLIGHT: FAIL")
    reasons = run.summary["verdict"]["reasons"]
    assert len(reasons) == 1 and reasons[0].startswith("served identity changed during the run (engine_version")
    assert "at the start" in reasons[0] and "reference-swapped" in reasons[0]
    # Every protocol test passed: the identity check alone failed the stage.
    assert run.summary["verdict"]["failures"] == []


@pytest.fixture(scope="module")
def overwindow_run(profile: Path, tmp_path_factory: pytest.TempPathFactory) -> Run:
    """A full qualification that FAILs: over-window prompts answered with HTTP 500."""
    return qualify(profile, tmp_path_factory.mktemp("overwindow"), "--qualify-reference-fault", "overwindow_500")


def test_the_full_stage_fails_for_what_only_it_runs(profile, tmp_path, overwindow_run):
    # An over-window prompt answered with HTTP 500: the window bracket is in the full stage only, so
    # in the preflight the fault cannot engage (a usage error: a PASS with it on would prove nothing).
    preflight = qualify(profile, tmp_path / "pre", "--qualify-stage", "preflight", "--qualify-reference-fault", "overwindow_500")
    assert preflight.code == USAGE_ERROR and preflight.bundle is None, preflight.out
    assert "only module(s) window see it, and this run's profile and stage run smoke, json, context, tools" \
        in preflight.out
    full = overwindow_run
    assert full.code == 1 and full.verdict_line == "QUALIFICATION: FAIL", full.out
    failed = {f["module"] for f in full.summary["verdict"]["failures"]}
    # The window bracket fails; no preflight module does.
    assert "window" in failed and not failed & set(full.summary["stage"]["modules"]) & {"smoke", "json", "context", "tools"}


def test_a_fail_bundle_rewritten_to_pass_backs_no_post_promotion(profile, tmp_path, overwindow_run):
    """The issue's operator: a FAIL bundle (of a route that looks real) whose summary.json was
    rewritten to PASS and its SHA256SUMS line redone. The statement written at the end of the run
    still names the first summary's digest: exit 4, one line, before any server starts."""
    import hashlib

    assert overwindow_run.code == 1, overwindow_run.out
    path = sealed_as_real(overwindow_run.bundle, tmp_path / "bundle")
    written = hashlib.sha256(path.read_bytes()).hexdigest()
    summary = json.loads(path.read_text())
    summary["verdict"] = {**summary["verdict"], "result": "PASS", "reasons": [], "failures": []}
    path.write_text(json.dumps(summary, indent=2))
    rewritten = hashlib.sha256(path.read_bytes()).hexdigest()
    sums = path.parent / "SHA256SUMS"
    sums.write_text("".join(f"{rewritten}  summary.json\n" if line.endswith("  summary.json") else line + "\n"
                            for line in sums.read_text().splitlines()))
    assert verify_manifest(path.parent) == []  # SHA256SUMS alone no longer tells the rewrite

    run = qualify(profile, tmp_path / "check", "--qualify-stage", "post-promotion", "--qualify-promoted", str(path))
    assert run.code == USAGE_ERROR, run.out
    errors = [line for line in run.out.splitlines() if line.startswith("ERROR:")]
    assert len(errors) == 1, run.out
    assert f"promoted summary {path}: provenance.intoto.json: summary.json has sha256 {written} in the statement, " \
           f"{rewritten} in SHA256SUMS" in errors[0], errors[0]
    assert "server ready" not in run.out and run.bundle is None
    assert "POST-PROMOTION CHECK: PASS" not in run.out


def test_a_route_serving_another_build_fails_post_promotion(profile, tmp_path, full_run, promoted):
    promoted = str(promoted)
    run = qualify(profile, tmp_path, "--qualify-stage", "post-promotion", "--qualify-promoted", promoted,
                  "--qualify-reference-fault", "engine_version=0.24.0")
    assert run.code == 1, run.out
    assert run.verdict_line.startswith("POST-PROMOTION CHECK: FAIL")
    [reason] = run.summary["verdict"]["reasons"]
    assert "does not serve the identity that run" in reason and "'0.24.0'" in reason
    assert run.summary["verdict"]["failures"] == []  # smoke, json, tools, reasoning all passed
    # Without the promoted run the same route passes the stage: the link is what caught it.
    assert qualify(profile, tmp_path / "unlinked", "--qualify-stage", "post-promotion",
                   "--qualify-reference-fault", "engine_version=0.24.0").code == 0


def test_a_route_serving_another_model_fails_post_promotion(profile, tmp_path, full_run, promoted):
    promoted = str(promoted)
    run = qualify(profile, tmp_path, "--qualify-stage", "post-promotion", "--qualify-promoted", promoted,
                  "--qualify-reference-fault", "wrong_identity")
    assert run.code == 1, run.out
    reasons = run.summary["verdict"]["reasons"]
    # The first step sees a served identity that is not the profile's and stops the run after the
    # smoke module (a judged FAIL); the end reading is held to the promoted run all the same.
    assert reasons[0].startswith("the served identity is not the profile's (stopped after the smoke module)")
    assert any("does not serve the identity" in r and "pytest-qualify/small-chat-other" in r for r in reasons)
    assert run.summary["promoted"]["mismatches"] and set(run.summary["promoted"]["mismatches"]) <= set(reasons)
    assert {i["module"] for i in run.summary["items"]} == {"smoke"}


def test_a_partial_stage_is_never_a_pass(profile, tmp_path):
    run = qualify(profile, tmp_path, "--qualify-stage", "preflight", "-k", "not test_health")
    # Nothing judged failed, but a partial selection leaves the stage unjudged: INCOMPLETE, exit 2.
    assert run.code == 2 and run.verdict_line.startswith("PREFLIGHT: INCOMPLETE"), run.out
    assert "stage preflight needs every one of its items" in run.out
    # The run's last verdict line (stderr may follow it in the combined output).
    last = [line for line in run.out.splitlines() if line.startswith("PREFLIGHT:")][-1]
    assert last.startswith("PREFLIGHT: INCOMPLETE (stage preflight; not a qualification) (exit 2)"), last


@pytest.mark.parametrize("args, message", [
    (("--qualify-stage", "prefligth"), "--qualify-stage: unknown stage 'prefligth'"),
    (("--qualify-stage", "preflight", "--qualify-promoted", "x.json"), "--qualify-promoted applies to the post-promotion and rollback stages only"),
    (("--qualify-stage", "post-promotion", "--qualify-promoted", "absent.json"), "--qualify-promoted: promoted summary absent.json: cannot be read"),
    (("--qualify-stage", "rollback"), "--qualify-stage rollback needs --qualify-promoted SUMMARY"),
])
def test_bad_stage_settings_are_usage_errors(profile, tmp_path, args, message):
    run = qualify(profile, tmp_path, *args)
    assert run.code == USAGE_ERROR and message in run.out, run.out
    assert "server ready" not in run.out  # refused before any server starts


def test_a_preflight_run_cannot_be_promoted(profile, tmp_path, preflight_run):
    assert preflight_run.code == 0, preflight_run.out
    refused = qualify(profile, tmp_path, "--qualify-stage", "post-promotion",
                      "--qualify-promoted", str(preflight_run.bundle / "summary.json"))
    assert refused.code == USAGE_ERROR and "is the preflight stage, not a qualification" in refused.out, refused.out


def test_the_rollback_route_serving_its_qualified_identity_passes(profile, tmp_path, full_run, promoted):
    run = qualify(profile, tmp_path, "--qualify-stage", "rollback", "--qualify-promoted", str(promoted))
    assert run.code == 0, run.out
    assert run.verdict_line == "ROLLBACK CHECK: PASS (stage rollback; not a qualification)"
    s = run.summary
    validate(s)
    assert set(items_by_module(s)) == {"smoke", "json", "tools"}
    assert s["stage"]["requires_promoted"] is True
    assert s["promoted"]["run_id"] == full_run.summary["run"]["id"] and s["promoted"]["mismatches"] == []
    assert (run.bundle / "report.md").read_text().startswith("# Rollback target check: small-chat-4k")


def test_a_rollback_route_serving_another_build_fails_with_both_readings(profile, tmp_path, full_run, promoted):
    promoted = str(promoted)
    qualified = full_run.summary["identity"]["end"]["engine_version"]
    run = qualify(profile, tmp_path, "--qualify-stage", "rollback", "--qualify-promoted", promoted,
                  "--qualify-reference-fault", "engine_version=0.24.0")
    assert run.code == 1, run.out
    assert run.verdict_line.startswith("ROLLBACK CHECK: FAIL")
    [reason] = run.summary["verdict"]["reasons"]
    assert f"does not serve the identity that run {full_run.summary['run']['id']} qualified" in reason
    assert f"engine_version {qualified!r} -> '0.24.0'" in reason  # both readings, qualified then live
    assert run.summary["verdict"]["failures"] == []  # smoke, json and tools passed: the identity failed it
    assert reason in run.out


def test_a_signed_promoted_bundle_backs_post_promotion_only_with_its_key(profile, tmp_path, full_run, promoted):
    """--qualify-promoted-key from the command line: the right key backs the check; another key, or a
    profile that requires a signature when none is named, is a usage error before any server starts."""
    from cryptography.hazmat.primitives.asymmetric import ec

    from .test_signature import _pem, _sign

    bundle = tmp_path / "signed" / promoted.parent.name
    shutil.copytree(promoted.parent, bundle)
    key = ec.generate_private_key(ec.SECP256R1())
    _sign(bundle, key)
    (tmp_path / "cosign.pub").write_bytes(_pem(key))
    (tmp_path / "other.pub").write_bytes(_pem(ec.generate_private_key(ec.SECP256R1())))
    signed_profile = tmp_path / "signed.toml"
    signed_profile.write_text(profile.read_text().replace("[deployment]", "[promotion]\nrequire_signature = true\n\n"
                                                          "[deployment]", 1))
    args = ("--qualify-stage", "post-promotion", "--qualify-promoted", str(bundle / "summary.json"))
    ok = qualify(signed_profile, tmp_path / "ok", *args, "--qualify-promoted-key", str(tmp_path / "cosign.pub"))
    assert ok.code == 0 and ok.verdict_line.startswith("POST-PROMOTION CHECK: PASS"), ok.out
    other = qualify(signed_profile, tmp_path / "other", *args, "--qualify-promoted-key", str(tmp_path / "other.pub"))
    assert other.code == USAGE_ERROR and "no signature verifies against public key" in other.out, other.out
    assert "server ready" not in other.out and other.bundle is None
    unnamed = qualify(signed_profile, tmp_path / "unnamed", *args)
    assert unnamed.code == USAGE_ERROR and "requires a signed promoted bundle" in unnamed.out, unnamed.out
    # Leaving the promoted bundle out leaves no signature to verify: refused, not a bare PASS.
    bare = qualify(signed_profile, tmp_path / "bare", "--qualify-stage", "post-promotion")
    assert bare.code == USAGE_ERROR and "requires a signed promoted bundle" in bare.out, bare.out
    assert "name it with --qualify-promoted SUMMARY" in bare.out and "server ready" not in bare.out
    assert bare.bundle is None
