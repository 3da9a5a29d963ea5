"""A promoted bundle's signature (docs/ci.md's signing step, cosign's DSSE envelope) verified against
the operator's public key, offline, with keys made here; a profile that requires a signature refuses
a post-promotion or rollback check without one. Every refusal is a usage error naming the file."""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import replace
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

from pytest_qualify.profiles import load_profile
from pytest_qualify.promotion.signature import SIGNATURE_FILE, pae
from pytest_qualify.promotion.stage_run import StageUsageError, plan

from .test_identity import _bundle, _summary

IN_TOTO = "application/vnd.in-toto+json"


def _pem(private) -> bytes:  # type: ignore[no-untyped-def]
    return private.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def _sign(run: Path, private, *, where: Path | None = None, predicate: dict | None = None) -> Path:  # type: ignore[no-untyped-def]
    """What ``cosign attest-blob --key`` writes: a sigstore bundle whose DSSE envelope signs an in-toto
    statement naming SHA256SUMS by digest, with the bundle statement's predicate."""
    recorded = json.loads((run / "provenance.intoto.json").read_text())["predicate"]
    statement = {"_type": "https://in-toto.io/Statement/v1",
                 "subject": [{"name": "SHA256SUMS",
                              "digest": {"sha256": hashlib.sha256((run / "SHA256SUMS").read_bytes()).hexdigest()}}],
                 "predicateType": "https://pytest-qualify/attestations/qualification/v1",
                 "predicate": predicate if predicate is not None else recorded}
    payload = json.dumps(statement).encode()
    message = pae(IN_TOTO, payload)
    sig = private.sign(message) if isinstance(private, ed25519.Ed25519PrivateKey) else \
        private.sign(message, ec.ECDSA(hashes.SHA256()))
    bundle = {"mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json",
              "dsseEnvelope": {"payload": base64.b64encode(payload).decode(), "payloadType": IN_TOTO,
                               "signatures": [{"sig": base64.b64encode(sig).decode()}]}}
    path = (where or run.parent) / SIGNATURE_FILE
    path.write_text(json.dumps(bundle))
    return path


@pytest.fixture
def signed(tmp_path):  # type: ignore[no-untyped-def]
    path = _bundle(tmp_path, _summary())
    key = ec.generate_private_key(ec.SECP256R1())
    _sign(path.parent, key)
    public = tmp_path / "cosign.pub"
    public.write_bytes(_pem(key))
    return path, public, key


PROFILE = load_profile("262k")


def _plan(path: Path, key: Path | str | None, *, require: bool = False):  # type: ignore[no-untyped-def]
    return plan(PROFILE, "post-promotion", str(path), simulated=False, key=str(key) if key else None,
                require_signature=require)


def test_a_bundle_signed_with_the_named_key_backs_the_check(signed):
    path, public, _ = signed
    run = _plan(path, public, require=True)
    assert run.promoted is not None and run.promoted.run_id == "20260729T101500Z-abc123"


def test_an_ed25519_signature_in_a_bare_envelope_inside_the_run_folder_verifies(tmp_path):
    path = _bundle(tmp_path, _summary())
    key = ed25519.Ed25519PrivateKey.generate()
    written = _sign(path.parent, key, where=path.parent)
    envelope = json.loads(written.read_text())["dsseEnvelope"]
    written.write_text(json.dumps(envelope))  # DSSE alone, without the sigstore wrapper
    (tmp_path / "ed.pub").write_bytes(_pem(key))
    assert _plan(path, tmp_path / "ed.pub", require=True).promoted is not None


def test_another_key_is_refused_naming_the_signature_file(signed, tmp_path):
    path, _, _ = signed
    other = tmp_path / "other.pub"
    other.write_bytes(_pem(ec.generate_private_key(ec.SECP256R1())))
    with pytest.raises(StageUsageError, match=f"{SIGNATURE_FILE}: no signature verifies against public key") as err:
        _plan(path, other)
    assert str(err.value).startswith("--qualify-promoted-key: promoted bundle ")


def test_a_bundle_changed_and_resealed_after_signing_is_refused_with_both_digests(signed):
    path, public, _ = signed
    report = path.parent / "report.md"
    report.write_text("# edited after the run\n")
    # The operator redoes SHA256SUMS and the statement's subject: the bundle agrees with itself again...
    statement = json.loads((path.parent / "provenance.intoto.json").read_text())
    for s in statement["subject"]:
        if s["name"] == "report.md":
            s["digest"]["sha256"] = hashlib.sha256(report.read_bytes()).hexdigest()
    (path.parent / "provenance.intoto.json").write_text(json.dumps(statement, indent=2) + "\n")
    from pytest_qualify.evidence.bundle import write_manifest

    write_manifest(path.parent)
    assert _plan(path, None).promoted is not None  # no key named: the self-agreement holds
    # ...but not with its signature.
    with pytest.raises(StageUsageError, match="the signature is over SHA256SUMS with sha256 [0-9a-f]{64}, but the "
                                              "bundle's SHA256SUMS has sha256 [0-9a-f]{64}"):
        _plan(path, public)


def test_a_signed_predicate_that_says_another_verdict_is_refused(tmp_path):
    path = _bundle(tmp_path, _summary())
    key = ec.generate_private_key(ec.SECP256R1())
    recorded = json.loads((path.parent / "provenance.intoto.json").read_text())["predicate"]
    _sign(path.parent, key, predicate={**recorded, "verdict": {"result": "FAIL"}})
    (tmp_path / "k.pub").write_bytes(_pem(key))
    with pytest.raises(StageUsageError, match="signed predicate's verdict.result is 'FAIL' but provenance.intoto.json "
                                              "says 'PASS'"):
        _plan(path, tmp_path / "k.pub")


def test_a_profile_that_requires_a_signature_refuses_an_unsigned_bundle_or_no_key(tmp_path, signed):
    path, public, _ = signed
    with pytest.raises(StageUsageError, match="requires a signed promoted bundle"):
        _plan(path, None, require=True)
    unsigned = _bundle(tmp_path / "u", _summary())
    with pytest.raises(StageUsageError, match=f"no {SIGNATURE_FILE} in .* the bundle is not signed"):
        _plan(unsigned, public, require=True)
    with pytest.raises(StageUsageError, match="applies only with --qualify-promoted"):
        plan(PROFILE, "post-promotion", None, simulated=False, key=str(public))


def test_the_profile_states_whether_a_signature_is_required(tmp_path):
    from pytest_qualify.profiles import builtin_profiles

    assert load_profile("262k").require_signature is False
    text = Path(builtin_profiles()["small"]).read_text()
    p = tmp_path / "signed.toml"
    p.write_text(text.replace("[deployment]", "[promotion]\nrequire_signature = true\n\n[deployment]", 1))
    assert load_profile(str(p)).require_signature is True
    assert replace(load_profile(str(p)), require_signature=False).require_signature is False
