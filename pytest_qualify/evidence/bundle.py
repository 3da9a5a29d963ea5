"""The evidence bundle in ``<evidence dir>/<run id>/``. No pytest here.

``junit.xml``, ``report.md``, ``summary.json``, ``server.log`` (written by the lifecycle),
``metrics-*.prom`` snapshots, ``ttft-vs-prompt-tokens.png`` (drawn with Pillow),
``provenance.intoto.json`` (an in-toto statement over the other files) and ``SHA256SUMS`` over
all of them, which ``sha256sum -c SHA256SUMS`` verifies. The statement and the manifest are
written last, after the server has stopped, because the server appends to its log until then.
The value of the API key is redacted from every file before either is taken.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pytest_qualify.evidence import junit, report
from pytest_qualify.bundle_format.manifest import JUNIT, MANIFEST, REPORT, SUMMARY, sha256_file
from pytest_qualify.evidence.metrics import Snapshot, parse
from pytest_qualify.evidence.plot import PLOT_FILE, PlotUnavailable, plot_ttft
from pytest_qualify.bundle_format.schema import validate
from pytest_qualify.redaction import redact, redact_file



def write_text(path: Path, text: str, secrets: Sequence[str]) -> Path:
    path.write_text(redact(text, secrets), encoding="utf-8")
    return path


def metrics_file(name: str) -> str:
    """``metrics-<name>.prom`` with a name safe on any file system."""
    return "metrics-" + re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") + ".prom"


def save_snapshot(run_dir: Path, name: str, text: str, secrets: Sequence[str]) -> Snapshot:
    """Parse a scrape and keep its text as evidence; raises MetricsParseError on non-Prometheus text."""
    snapshot = parse(text)
    write_text(run_dir / metrics_file(name), text, secrets)
    return snapshot


def lane_metrics_name(label: str, lane: str, repetition: int, when: str) -> str:
    """The snapshot name of one context-lane item's scrape ``before`` or ``after`` it."""
    base = re.sub(r"[^A-Za-z0-9]+", "_", label).strip("_")
    return f"lane-{lane}-{base}-rep{repetition}-{when}"


def metrics_files(run_dir: Path) -> list[str]:
    return sorted(p.name for p in run_dir.glob("metrics-*.prom"))


def make_plot(summary: dict[str, Any], run_dir: Path) -> None:
    """Draw the TTFT plot into the bundle, or note in the summary why there is none."""
    notes = summary["artifacts"].setdefault("notes", [])
    try:
        plot_ttft(summary["timing"]["points"], run_dir / PLOT_FILE,
                  f"{summary['profile']['deployment']['served_name']} — TTFT against prompt tokens",
                  summary["simulated"])
        summary["artifacts"]["plot"] = PLOT_FILE
    except PlotUnavailable as exc:
        summary["artifacts"]["plot"] = None
        notes.append(str(exc))
    except Exception as exc:  # a plot must never cost the run its evidence
        summary["artifacts"]["plot"] = None
        notes.append(f"plot skipped: {type(exc).__name__}: {exc}")


def write_bundle(run_dir: Path, summary: dict[str, Any], cases: Mapping[str, Any],
                 secrets: Sequence[str]) -> list[Path]:
    """Write plot, summary.json, junit.xml and report.md. The summary is validated against the
    shipped schema first: an invalid summary raises rather than being passed off as evidence."""
    run_dir.mkdir(parents=True, exist_ok=True)
    make_plot(summary, run_dir)
    validate(summary)
    written = [
        write_text(run_dir / SUMMARY, json.dumps(summary, indent=2, sort_keys=False) + "\n", secrets),
        write_text(run_dir / JUNIT, junit.build_xml(summary, cases).decode("utf-8"), secrets),
        write_text(run_dir / REPORT, report.render(summary), secrets),
    ]
    if summary["artifacts"].get("plot"):
        written.append(run_dir / PLOT_FILE)
    return written


def bundle_files(run_dir: Path) -> list[Path]:
    """The bundle's files, sorted by name: everything but ``SHA256SUMS`` and hidden files."""
    return sorted(p for p in run_dir.iterdir() if p.is_file() and p.name != MANIFEST and not p.name.startswith("."))


def redact_files(run_dir: Path, secrets: Sequence[str]) -> list[str]:
    """Mask secrets in every file of the bundle (the server log included); names of files changed."""
    return [path.name for path in bundle_files(run_dir) if redact_file(path, secrets)]


def write_manifest(run_dir: Path, secrets: Sequence[str] = ()) -> Path:
    """Redact, then write ``SHA256SUMS`` in ``sha256sum``'s own format (two spaces: text mode)."""
    redact_files(run_dir, secrets)
    lines = []
    for path in bundle_files(run_dir):
        lines.append(f"{sha256_file(path)}  {path.name}\n")
    manifest = run_dir / MANIFEST
    manifest.write_text("".join(lines), encoding="utf-8")
    return manifest


def seal(run_dir: Path, secrets: Sequence[str]) -> str | None:
    """After the server stopped: redact and checksum the bundle. Returns an error text or None."""
    if not run_dir.is_dir():
        return None
    try:
        write_manifest(run_dir, secrets)
    except OSError as exc:
        return f"SHA256SUMS could not be written: {exc}"
    return None
