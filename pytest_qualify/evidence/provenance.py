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
import platform
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pytest_qualify.bundle_format.manifest import MANIFEST, SELFTEST_FILE, SUMMARY, sha256_file
from pytest_qualify.evidence.bundle import bundle_files

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://pytest-qualify/attestations/qualification/v1"  # named as the schemas' $id are
PROVENANCE_FILE = "provenance.intoto.json"


# What a verdict depends on besides the deployment: the distributions whose versions every run records.
VERSIONED = ("pytest-qualify", "pytest", "pytest-xdist", "openai", "httpx")
# The CI run, from the variables each CI system sets for every job. An allow-list: a token
# (GITHUB_TOKEN, CI_JOB_TOKEN) is never read.
CI_VARIABLES = {
    "github": ("GITHUB_ACTIONS", {
        "server_url": "GITHUB_SERVER_URL", "repository": "GITHUB_REPOSITORY", "workflow": "GITHUB_WORKFLOW",
        "job": "GITHUB_JOB", "run_id": "GITHUB_RUN_ID", "run_attempt": "GITHUB_RUN_ATTEMPT",
        "ref": "GITHUB_REF", "sha": "GITHUB_SHA", "actor": "GITHUB_ACTOR", "event": "GITHUB_EVENT_NAME",
    }),
    "gitlab": ("GITLAB_CI", {
        "server_url": "CI_SERVER_URL", "repository": "CI_PROJECT_PATH", "pipeline_id": "CI_PIPELINE_ID",
        "pipeline_url": "CI_PIPELINE_URL", "job": "CI_JOB_NAME", "job_id": "CI_JOB_ID", "job_url": "CI_JOB_URL",
        "ref": "CI_COMMIT_REF_NAME", "sha": "CI_COMMIT_SHA",
    }),
}


def versions() -> dict[str, str]:
    """python and the versions of what the verdict depends on, on this machine (metadata only:
    nothing is imported)."""
    from importlib import metadata

    out = {"python": platform.python_version()}
    for dist in VERSIONED:
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "not installed"
    return out


# A CI job names its runner's kind here (a runner label, e.g. "h200-x1"), replacing what is read.
HOST_KIND_ENV = "QUALIFY_HOST_KIND"


def host_kind(environ: Mapping[str, str]) -> str:
    """What kind of machine measured the run, so that a comparison can refuse boots from unlike
    hosts: the operator's name for it (``QUALIFY_HOST_KIND``), else the GPUs ``nvidia-smi`` lists
    (name and count), else the CPU's model name and count. Never the hostname: two runners of one
    kind are the same kind."""
    named = environ.get(HOST_KIND_ENV, "").strip()
    if named:
        return named
    import os
    import shutil
    import subprocess

    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                                 text=True, timeout=10, check=False).stdout
        except (OSError, subprocess.SubprocessError):
            out = ""
        gpus = [line.strip() for line in out.splitlines() if line.strip()]
        if gpus:
            return ", ".join(f"{n} x {name}" for name, n in sorted({g: gpus.count(g) for g in gpus}.items()))
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"cpu: {os.cpu_count()} x {model}"


def host(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    return {"hostname": platform.node(), "platform": platform.platform(), "machine": platform.machine(),
            "python_implementation": platform.python_implementation(), "kind": host_kind(environ or {})}


def ci_run(environ: Mapping[str, str]) -> dict[str, str | None] | None:
    """The CI run this ran in (GitHub Actions or GitLab CI), or None outside CI."""
    for system, (marker, names) in CI_VARIABLES.items():
        if environ.get(marker, "").lower() == "true":
            out: dict[str, str | None] = {"system": system}
            out.update({key: environ.get(var) or None for key, var in names.items()})
            if system == "github" and out["server_url"] and out["repository"] and out["run_id"]:
                out["run_url"] = f"{out['server_url']}/{out['repository']}/actions/runs/{out['run_id']}"
            return out
    return None


def provenance_section(environ: Mapping[str, str]) -> dict[str, Any]:
    """``summary.json``'s ``provenance``: versions, host, CI run — for every run."""
    return {"versions": versions(), "host": host(environ), "ci": ci_run(environ)}


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
        # Versions, host and CI run, as summary.json recorded them (None in a summary from before).
        "environment": summary.get("provenance"),
        "protocol": summary.get("protocol"),
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
