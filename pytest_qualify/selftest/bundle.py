"""The gate self-test's bundle: ``selftest.json``, its in-toto statement and ``SHA256SUMS``.

Written with the evidence writers' own tools (``evidence/bundle.py``, ``evidence/provenance.py``):
the self-test's runs and their judgement are pure (``selftest/engine.py``); this only renders
them into files."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_qualify.evidence.bundle import write_manifest, write_text
from pytest_qualify.evidence.provenance import write_selftest_statement
from pytest_qualify.bundle_format.manifest import SELFTEST_FILE


def write_selftest_bundle(run_dir: Path, data: Mapping[str, Any]) -> Path:
    """``selftest.json``, its in-toto statement and ``SHA256SUMS`` in ``run_dir``."""
    run_dir.mkdir(parents=True, exist_ok=True)
    path = write_text(run_dir / SELFTEST_FILE, json.dumps(data, indent=2) + "\n", ())
    write_selftest_statement(run_dir, data)
    write_manifest(run_dir)
    return path
