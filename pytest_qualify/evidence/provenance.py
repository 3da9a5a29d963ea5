"""``provenance.intoto.json``: an in-toto Statement v1 that binds the evidence bundle to the exact
deployment it judged. No pytest here; no signing here either — the plugin holds no keys.

- ``subject``: every file of the bundle (but the statement itself and ``SHA256SUMS``, which lists
  the statement in turn) with its sha256, taken after secrets were redacted from the files;
- ``predicateType``: :data:`PREDICATE_TYPE`;
- ``predicate``: the deployment's identity (model, revision, served name, image and digest,
  engine version as ``/version`` reported it, what ``/v1/models`` served, the serve command with
  secrets masked), the profile and the sha256 of its file, the plugin's version, the run id,
  the verdict with its reasons, and the run's timestamps.

CI signs it with its own identity (keyless, OIDC), e.g. ``cosign attest-blob`` over the bundle's
``SHA256SUMS`` or ``cosign attest`` on the image digest with the predicate alone — docs/ci.md
shows both commands.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pytest_qualify.bundle_format.manifest import MANIFEST, SELFTEST_FILE, SUMMARY, sha256_file
from pytest_qualify.evidence.bundle import bundle_files

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://pytest-qualify/attestations/qualification/v1"  # named as the schemas' $id are
PROVENANCE_FILE = "provenance.intoto.json"


def subjects(run_dir: Path) -> list[dict[str, Any]]:
    """The bundle's files (sorted by name) as in-toto ResourceDescriptors."""
    return [{"name": p.name, "digest": {"sha256": sha256_file(p)}}
            for p in bundle_files(run_dir) if p.name != PROVENANCE_FILE]


def profile_digest(source: str) -> str | None:
    path = Path(source)
    try:
        return sha256_file(path)
    except OSError:
        return None


def predicate(summary: Mapping[str, Any], *, exit_code: int | None = None) -> dict[str, Any]:
    """The predicate, from the run's summary alone (which is already free of secrets)."""
    p, d, t, run, v = summary["profile"], summary["profile"]["deployment"], summary["target"], summary["run"], summary["verdict"]
    return {
        "deployment": {
            "model": d["model"],
            "revision": d["revision"] or None,
            "served_name": d["served_name"],
            "image": d.get("image") or None,
            "image_digest": d.get("image_digest") or None,
            "engine_declared": d["engine"] or None,
            "engine_version": t.get("engine_version"),
            "served_models": list(t.get("models") or []),
            "serve_command": t.get("launch_command"),
            "target_mode": t["mode"],
            "endpoint": t.get("base_url"),
            "simulated": bool(summary["simulated"]),
        },
        "profile": {"name": p["name"], "source": p["source"], "sha256": profile_digest(p["source"])},
        "qualifier": {"name": "pytest-qualify", "version": run["tool_version"]},
        "run": {"id": run["id"], "started_at": run["started_at"], "finished_at": run["finished_at"],
                "repeat": run["repeat"], "workers": run["workers"]},
        "verdict": {"result": v["result"], "reasons": list(v["reasons"]),
                    "failures": len(v["failures"]), "waived": len(v["waived"]), "exit_code": exit_code},
        "evidence": {"summary": SUMMARY, "manifest": MANIFEST,
                     "attempts": (summary.get("stats") or {}).get("overall")},
    }


def statement(run_dir: Path, summary: Mapping[str, Any], *, exit_code: int | None = None) -> dict[str, Any]:
    return {
        "_type": STATEMENT_TYPE,
        "subject": subjects(run_dir),
        "predicateType": PREDICATE_TYPE,
        "predicate": predicate(summary, exit_code=exit_code),
    }


def write_statement(run_dir: Path, summary: Mapping[str, Any], secrets: Sequence[str],
                    *, exit_code: int | None = None) -> Path:
    """Write the statement into the bundle (after the other files are final and redacted)."""
    from pytest_qualify.evidence.bundle import write_text

    text = json.dumps(statement(run_dir, summary, exit_code=exit_code), indent=2) + "\n"
    return write_text(run_dir / PROVENANCE_FILE, text, secrets)


def check_statement(run_dir: Path) -> list[str]:
    """Problems with the bundle's statement (empty: well formed, and every subject matches its file)."""
    path = run_dir / PROVENANCE_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return [f"{PROVENANCE_FILE}: cannot be read as JSON ({exc})"]
    problems = []
    if data.get("_type") != STATEMENT_TYPE:
        problems.append(f"_type is {data.get('_type')!r}, expected {STATEMENT_TYPE!r}")
    if data.get("predicateType") not in (PREDICATE_TYPE, SELFTEST_PREDICATE_TYPE):
        problems.append(f"predicateType is {data.get('predicateType')!r}")
    if not isinstance(data.get("predicate"), dict):
        problems.append("predicate is not an object")
    subs = data.get("subject")
    if not isinstance(subs, list) or not subs:
        return problems + ["subject must be a non-empty list"]
    for s in subs:
        name, digest = s.get("name"), (s.get("digest") or {}).get("sha256")
        if not name or not isinstance(digest, str) or len(digest) != 64:
            problems.append(f"subject {s!r} lacks a name or a sha256 digest")
        elif not (run_dir / name).is_file():
            problems.append(f"subject {name}: no such file in the bundle")
        elif sha256_file(run_dir / name) != digest:
            problems.append(f"subject {name}: sha256 does not match the file")
    return problems


SELFTEST_PREDICATE_TYPE = "https://pytest-qualify/attestations/selftest/v1"


def write_selftest_statement(run_dir: Path, selftest: Mapping[str, Any]) -> Path:
    """The statement of a gate self-test's bundle: its files, and what it showed with which versions."""
    from pytest_qualify.evidence.bundle import write_text

    data = {
        "_type": STATEMENT_TYPE,
        "subject": subjects(run_dir),
        "predicateType": SELFTEST_PREDICATE_TYPE,
        "predicate": {
            "qualifier": {"name": "pytest-qualify", "version": selftest["versions"]["pytest-qualify"]},
            "versions": dict(selftest["versions"]),
            "profile": dict(selftest["profile"]),
            "run": {"id": selftest["run_id"], "started_at": selftest["started_at"],
                    "finished_at": selftest["finished_at"]},
            "verdict": selftest["verdict"],
            "modules_proven": list(selftest["modules_proven"]),
            "evidence": {"selftest": SELFTEST_FILE, "manifest": MANIFEST},
        },
    }
    return write_text(run_dir / PROVENANCE_FILE, json.dumps(data, indent=2) + "\n", ())
