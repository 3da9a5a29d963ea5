"""The bundle's file names and ``SHA256SUMS``: a file's digest and the re-check of a bundle against
its manifest. On the ground floor, because a reader of an earlier bundle (``bundle_format/earlier.py``
for the promoted run and the self-test) needs it without importing the evidence writers.
No pytest here.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

MANIFEST = "SHA256SUMS"
SUMMARY = "summary.json"
JUNIT = "junit.xml"
REPORT = "report.md"
SELFTEST_FILE = "selftest.json"
STATEMENT = "provenance.intoto.json"  # the in-toto statement over the bundle's files


def sha256_file(path: Path) -> str:
    """The file's sha256, read in blocks (a server log can be large)."""
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def verify_manifest(run_dir: Path) -> list[str]:
    """Problems found re-checking ``SHA256SUMS`` (empty: the bundle is intact)."""
    problems = []
    for line in (run_dir / MANIFEST).read_text(encoding="utf-8").splitlines():
        digest, _, name = line.partition("  ")
        path = run_dir / name
        if not path.is_file():
            problems.append(f"{name}: missing")
        elif sha256_file(path) != digest:
            problems.append(f"{name}: checksum mismatch")
    return problems
