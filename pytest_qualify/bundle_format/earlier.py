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

from pytest_qualify.bundle_format.manifest import MANIFEST, STATEMENT, sha256_file, verify_manifest


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


# What the statement's predicate says (its path) and where summary.json says the same (its path).
_AGREES = (
    (("verdict", "result"), ("verdict", "result"), "the verdict"),
    (("run", "id"), ("run", "id"), "the run id"),
    (("deployment", "model"), ("profile", "deployment", "model"), "the model"),
    (("deployment", "served_name"), ("profile", "deployment", "served_name"), "the served name"),
    (("deployment", "engine_version"), ("target", "engine_version"), "the engine version"),
    (("deployment", "simulated"), ("simulated",), "simulated"),
)


def _at(data: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        data = data.get(key) if isinstance(data, dict) else None
    return data


def verify_statement(summary: EarlierFile, label: str) -> dict[str, Any]:
    """The bundle's in-toto statement, once it agrees with the bundle and with the summary beside
    it, or :class:`EarlierRunError` naming the file and both readings: every file the bundle's
    ``SHA256SUMS`` lists (but the statement) is one of its subjects with the same digest, every
    subject is such a file, and its verdict, run id and identity are the summary's. A bundle whose
    summary was rewritten and its ``SHA256SUMS`` line redone still carries the statement written at
    the end of the run: they disagree, and the bundle backs nothing."""
    folder = summary.path.parent
    path = folder / STATEMENT
    where = f"{label}: {STATEMENT}"
    try:
        statement = json.loads(path.read_bytes())
    except OSError as exc:
        raise EarlierRunError(f"{where} cannot be read ({exc.strerror or exc}); a bundle backs a promotion only "
                              "with its statement") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise EarlierRunError(f"{where}: not JSON ({exc})") from None
    subjects = {}
    for s in statement.get("subject") or [] if isinstance(statement, dict) else []:
        if isinstance(s, dict) and isinstance(s.get("name"), str):
            subjects[s["name"]] = (s.get("digest") or {}).get("sha256")
    listed = {}
    for line in (folder / MANIFEST).read_text(encoding="utf-8", errors="replace").splitlines():
        digest, _, name = line.partition("  ")
        listed[name] = digest
    for name in sorted(set(listed) | set(subjects)):
        if name in (STATEMENT, MANIFEST):
            continue
        if name not in subjects:
            raise EarlierRunError(f"{where}: {name} is in {MANIFEST} ({listed[name]}) but not a subject of the "
                                  "statement")
        if name not in listed:
            raise EarlierRunError(f"{where}: subject {name} ({subjects[name]}) is not in {MANIFEST}")
        actual = sha256_file(folder / name) if (folder / name).is_file() else None
        if subjects[name] != listed[name] or subjects[name] != actual:
            raise EarlierRunError(f"{where}: {name} has sha256 {subjects[name]} in the statement, {listed[name]} in "
                                  f"{MANIFEST} and {actual or 'no file'} on disk")
    predicate = statement.get("predicate") if isinstance(statement, dict) else None
    for in_statement, in_summary, what in _AGREES:
        said, read = _at(predicate, in_statement), _at(summary.data, in_summary)
        if said != read:
            raise EarlierRunError(f"{where}: {what} is {said!r} in the statement ({'.'.join(('predicate',) + in_statement)})"
                                  f" but {read!r} in {summary.path.name} ({'.'.join(in_summary)})")
    return statement
