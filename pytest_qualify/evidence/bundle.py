"""The evidence bundle in ``<evidence dir>/<run id>/``. No pytest here.

``junit.xml``, ``report.md``, ``report.html`` (the page a signer opens: every item's requests,
answers and reasons, rendered from ``summary.json`` and ``transcripts.jsonl``, which ``qualify_ask``
writes during the run), ``summary.json``, ``server.log`` (written by the lifecycle),
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

from pytest_qualify.evidence import html, junit, report, transcripts
from pytest_qualify.bundle_format.manifest import JUNIT, MANIFEST, REPORT, SUMMARY, sha256_file
from pytest_qualify.evidence.metrics import Snapshot, parse
from pytest_qualify.evidence.plot import PLOT_FILE, PlotUnavailable, plot_ttft
from pytest_qualify.bundle_format.schema import validate
from pytest_qualify.gate.decide import GateCase
from pytest_qualify.redaction import redact, redact_file
from pytest_qualify.reference.fault_log import FAULT_LOG



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


def plot_marks(summary: Mapping[str, Any]) -> dict[str, Any]:
    """What the plot draws beside the points, from the summary: the window's edge, the TTFT SLO
    limits (per lane and run-wide), the load levels and their ``[slo.load]`` latency limits."""
    limits, load_limits = [], []
    for row in summary.get("slo") or []:
        if row.get("scope", "").startswith("lane ") and row.get("metric") == "ttft_s":
            limits.append({"lane": row["scope"][len("lane "):], "ttft_s": row["limit"]})
        elif row.get("name") == "run:ttft_s_p95":
            limits.append({"lane": None, "ttft_s": row["limit"], "label": f"SLO TTFT p95 <= {row['limit']:g} s"})
        elif row.get("scope") == "load" and row.get("bound") == "max":
            load_limits.append({"metric": row["metric"], "limit": row["limit"]})
    lanes = {lane["name"]: lane["prompt_tokens"] for lane in ((summary.get("profile") or {}).get("limits") or {}).get("lanes") or []}
    claims = []
    for c in summary.get("claims") or []:
        at = c.get("prompt_tokens") or lanes.get(c.get("lane"))
        if c.get("figure") == "ttft_s" and at:
            claims.append({"prompt_tokens": at, "ttft_s": c["claimed"], "bound": c.get("high"), "status": c["status"]})
    return {"window_tokens": (summary.get("profile") or {}).get("limits", {}).get("window_tokens"),
            "limits": limits, "load": summary["timing"].get("load"), "load_limits": load_limits,
            "sweep": (summary["timing"].get("sweep") or {}).get("points") or (), "claims": claims}


def make_plot(summary: dict[str, Any], run_dir: Path) -> None:
    """Draw the TTFT plot into the bundle, or note in the summary why there is none."""
    notes = summary["artifacts"].setdefault("notes", [])
    try:
        plot_ttft(summary["timing"]["points"], run_dir / PLOT_FILE,
                  f"{summary['profile']['deployment']['served_name']} — TTFT against prompt tokens",
                  summary["simulated"], **plot_marks(summary))
        summary["artifacts"]["plot"] = PLOT_FILE
    except PlotUnavailable as exc:
        summary["artifacts"]["plot"] = None
        notes.append(str(exc))
    except Exception as exc:  # a plot must never cost the run its evidence
        summary["artifacts"]["plot"] = None
        notes.append(f"plot skipped: {type(exc).__name__}: {exc}")


# Files a bundle may hold besides those every bundle has, linked from report.html when present.
OPTIONAL_FILES = ("answers.jsonl", transcripts.TRANSCRIPTS_FILE, "server.log", "server-death.txt",
                  "robustness-failures.jsonl", "parsers-cases.jsonl", "sizing.jsonl", FAULT_LOG)


def write_bundle(run_dir: Path, summary: dict[str, Any], cases: Mapping[str, Any],
                 secrets: Sequence[str], *, gate: Sequence[GateCase]) -> list[Path]:
    """Write plot, summary.json, junit.xml, report.md and report.html. The summary is validated
    against the shipped schema first: an invalid summary raises rather than being passed off as
    evidence. ``gate``: the run-level test cases of the decision the summary renders
    (``Decision.gate_cases``), which junit.xml holds as pytest's ``--junitxml`` does."""
    run_dir.mkdir(parents=True, exist_ok=True)
    make_plot(summary, run_dir)
    # Every bundle has its transcripts, empty when nothing was asked (the server never started).
    (run_dir / transcripts.TRANSCRIPTS_FILE).touch()
    summary["artifacts"]["html"] = html.HTML_FILE
    summary["artifacts"]["transcripts"] = transcripts.TRANSCRIPTS_FILE
    validate(summary)
    written = [
        write_text(run_dir / SUMMARY, json.dumps(summary, indent=2, sort_keys=False) + "\n", secrets),
        write_text(run_dir / JUNIT, junit.build_xml(summary, cases, gate).decode("utf-8"), secrets),
        write_text(run_dir / REPORT, report.render(summary), secrets),
        write_html(run_dir, summary, secrets),
    ]
    if summary["artifacts"].get("plot"):
        written.append(run_dir / PLOT_FILE)
    return written


def linked_files(run_dir: Path, summary: Mapping[str, Any]) -> list[str]:
    """The files report.html links to: what every bundle has, what this summary names, and the
    optional files present. The same at the end of the run and on a rebuild (the manifest and the
    statement, written after the page, are named, not looked for)."""
    names = [SUMMARY, REPORT, JUNIT, MANIFEST]
    names += [summary["artifacts"]["provenance"]] if summary["artifacts"].get("provenance") else []
    names += [summary["artifacts"]["plot"]] if summary["artifacts"].get("plot") else []
    names += [n for n in OPTIONAL_FILES if (run_dir / n).exists()]
    names += list(summary["server_metrics"].get("files") or [])
    return list(dict.fromkeys(names))


def render_html(run_dir: Path, summary: Mapping[str, Any]) -> str:
    """report.html from what the bundle holds: the summary, the transcripts and the plot."""
    plot = summary["artifacts"].get("plot")
    png = (run_dir / plot).read_bytes() if plot and (run_dir / plot).is_file() else None
    return html.render(summary, transcripts.read(run_dir), png, linked_files(run_dir, summary))


def write_html(run_dir: Path, summary: Mapping[str, Any], secrets: Sequence[str] = ()) -> Path:
    return write_text(run_dir / html.HTML_FILE, render_html(run_dir, summary), secrets)


def rebuild_html(run_dir: Path) -> Path:
    """``python -m pytest_qualify report DIR``: report.html again from an existing bundle's files.
    The same bundle gives the same bytes, so its SHA256SUMS still holds."""
    summary = json.loads((run_dir / SUMMARY).read_text(encoding="utf-8"))
    return write_html(run_dir, summary)


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
