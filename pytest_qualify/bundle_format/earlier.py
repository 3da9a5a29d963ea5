"""The one door to an earlier run's file: read it, parse its JSON, check its schema id, and (for a
file that must come with its bundle) verify the bundle against ``SHA256SUMS``.

Three readers hold this run to an earlier one: the baseline (``gate/baseline.py``), the promoted
run (``promotion/promoted.py``) and the self-test a qualification requires
(``selftest/engine.py``). Each adds its own checks of the content; what a file must be to be read
at all is said here once, with one wording. No pytest here.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_qualify.bundle_format.manifest import MANIFEST, verify_manifest


class EarlierRunError(ValueError):
    """An earlier run's file that cannot be read as one; the message starts with its label."""


@dataclass(frozen=True)
class EarlierFile:
    path: Path
    data: dict[str, Any]
    raw: bytes  # the bytes read, so a digest names exactly what was judged

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.raw).hexdigest()


def read_earlier(path: Path, label: str, schema_id: str) -> EarlierFile:
    """The file's JSON object, or :class:`EarlierRunError`: it cannot be read, is not JSON, or is
    not a file of ``schema_id`` (its ``schema`` field)."""
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise EarlierRunError(f"{label}: cannot be read ({exc.strerror or exc})") from None
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise EarlierRunError(f"{label}: not JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("schema") != schema_id:
        kind = schema_id.rpartition("/")[2] + ".json"
        raise EarlierRunError(f"{label}: not a pytest-qualify {kind} (field 'schema' is not {schema_id!r})")
    return EarlierFile(Path(path), data, raw)


def verify_bundle(earlier: EarlierFile, label: str) -> bytes:
    """The bundle's ``SHA256SUMS`` (its bytes, for a digest of the whole bundle), or
    :class:`EarlierRunError`: none beside the file, the file not listed in it, or a file of the
    bundle changed or missing."""
    folder = earlier.path.parent
    manifest = folder / MANIFEST
    if not manifest.is_file():
        raise EarlierRunError(f"{label}: no {MANIFEST} beside it; name the {earlier.path.name} inside "
                              "the run's evidence bundle")
    text = manifest.read_bytes()
    broken = verify_manifest(folder)
    listed = earlier.path.name in {line.partition("  ")[2] for line in text.decode("utf-8", "replace").splitlines()}
    if broken or not listed:
        raise EarlierRunError(f"{label}: the bundle does not match its {MANIFEST} ("
                              + ("; ".join(broken) if broken else f"{earlier.path.name} is not listed") + ")")
    return text
