"""A promoted bundle's signature, verified against the public key the operator names.

docs/ci.md's signing step is ``cosign attest-blob`` over the bundle's ``SHA256SUMS`` with the
statement's predicate; with ``--key`` cosign writes a DSSE envelope (inside its sigstore bundle,
``qualification.sigstore.json``) whose payload is an in-toto statement naming ``SHA256SUMS`` by
digest, signed with ECDSA P-256 over DSSE's pre-authentication encoding. Here the envelope is read
(the sigstore bundle's ``dsseEnvelope`` or a bare envelope), every signature tried against the key
(ECDSA P-256/SHA-256 as cosign signs, or Ed25519) with ``cryptography``, and the signed statement
held to the bundle: its subject ``SHA256SUMS`` has the digest of the bundle's own, and its
predicate's verdict and run id are the bundle statement's. Keyless (OIDC) signatures are verified
with ``cosign verify-blob-attestation`` in CI, not here. No pytest here.
"""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

from pytest_qualify.bundle_format.manifest import MANIFEST, STATEMENT

SIGNATURE_FILE = "qualification.sigstore.json"  # docs/ci.md: beside the run's folder, or in it


class SignatureError(ValueError):
    """A signature that is missing or does not verify; the message names the file and why."""


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE's pre-authentication encoding: what the signature is over."""
    kind = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)


def find_signature(bundle_dir: Path) -> Path | None:
    """The bundle's signature file: in the run's folder, or beside it (docs/ci.md writes it there)."""
    for folder in (bundle_dir, bundle_dir.parent):
        if (folder / SIGNATURE_FILE).is_file():
            return folder / SIGNATURE_FILE
    return None


def _verify_one(key: Any, signature: bytes, message: bytes) -> bool:
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519

    try:
        if isinstance(key, ed25519.Ed25519PublicKey):
            key.verify(signature, message)
        elif isinstance(key, ec.EllipticCurvePublicKey):
            key.verify(signature, message, ec.ECDSA(hashes.SHA256()))
        else:
            return False
    except InvalidSignature:
        return False
    return True


def verify_signature(bundle_dir: Path, key_path: str) -> str:
    """One line saying what verified (the key's digest, the signed ``SHA256SUMS`` digest), or
    :class:`SignatureError`."""
    from cryptography.hazmat.primitives import serialization

    try:
        key_bytes = Path(key_path).expanduser().read_bytes()
        key = serialization.load_pem_public_key(key_bytes)
    except OSError as exc:
        raise SignatureError(f"public key {key_path}: cannot be read ({exc.strerror or exc})") from None
    except ValueError as exc:
        raise SignatureError(f"public key {key_path}: not a PEM public key ({exc})") from None
    path = find_signature(bundle_dir)
    if path is None:
        raise SignatureError(f"no {SIGNATURE_FILE} in {bundle_dir} or beside it: the bundle is not signed")
    try:
        data = json.loads(path.read_bytes())
        envelope = data.get("dsseEnvelope", data)
        payload = base64.b64decode(envelope["payload"])
        payload_type = str(envelope["payloadType"])
        signatures = [base64.b64decode(s["sig"]) for s in envelope["signatures"]]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise SignatureError(f"{path}: not a DSSE envelope or sigstore bundle ({type(exc).__name__}: {exc})") from None
    message = pae(payload_type, payload)
    key_digest = hashlib.sha256(key.public_bytes(serialization.Encoding.DER,
                                                 serialization.PublicFormat.SubjectPublicKeyInfo)).hexdigest()
    if not any(_verify_one(key, s, message) for s in signatures):
        raise SignatureError(f"{path}: no signature verifies against public key {key_path} (sha256:{key_digest[:16]}); "
                             "the bundle was not signed with that key, or was changed after signing")
    try:
        signed = json.loads(payload)
    except ValueError as exc:
        raise SignatureError(f"{path}: the signed payload is not an in-toto statement ({exc})") from None
    subjects = {s.get("name"): (s.get("digest") or {}).get("sha256") for s in signed.get("subject") or []
                if isinstance(s, dict)}
    sums = hashlib.sha256((bundle_dir / MANIFEST).read_bytes()).hexdigest()
    if subjects.get(MANIFEST) != sums:
        raise SignatureError(f"{path}: the signature is over {MANIFEST} with sha256 {subjects.get(MANIFEST)}, but the "
                             f"bundle's {MANIFEST} has sha256 {sums}")
    statement = json.loads((bundle_dir / STATEMENT).read_bytes())
    for field in ("verdict", "run"):
        said = ((signed.get("predicate") or {}).get(field) or {})
        read = ((statement.get("predicate") or {}).get(field) or {})
        for key_name in ("result", "id"):
            if key_name in said or key_name in read:
                if said.get(key_name) != read.get(key_name):
                    raise SignatureError(f"{path}: the signed predicate's {field}.{key_name} is "
                                         f"{said.get(key_name)!r} but {STATEMENT} says {read.get(key_name)!r}")
    return f"signed {MANIFEST} sha256:{sums[:16]} verified against public key sha256:{key_digest[:16]}"
