"""One CI job per replica (``fleet --only ID``), then one bundle: the jobs' fleet bundles merged. Each
job waited for, routed and fingerprinted the whole fleet and judged its own replicas; the merge
takes every replica's row from the job that judged it, the worst of each fleet check across the
jobs, and fails coverage for a named replica no job judged. Each job's bundle must verify against
its ``SHA256SUMS`` and name the same fleet, profile and stage."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pytest_qualify.bundle_format.manifest import MANIFEST, verify_manifest
from pytest_qualify.fleet import render
from pytest_qualify.fleet.judge import EXIT, FAIL, PASS, worst


class MergeError(ValueError):
    """Bundles that cannot be merged; the message names the bundle."""


def _read(path: Path) -> dict[str, Any]:
    doc_path = path / render.FLEET_JSON
    if not doc_path.is_file():
        raise MergeError(f"{path}: not a fleet bundle (no {render.FLEET_JSON})")
    if not (path / MANIFEST).is_file():
        raise MergeError(f"{path}: no {MANIFEST}")
    problems = verify_manifest(path)
    if problems:
        raise MergeError(f"{path}: {MANIFEST} does not verify: {'; '.join(problems)}")
    doc = json.loads(doc_path.read_text(encoding="utf-8"))
    if doc.get("schema") != render.SCHEMA_ID:
        raise MergeError(f"{path}: schema {doc.get('schema')!r}, expected {render.SCHEMA_ID!r}")
    return doc


def merge(paths: list[Path], out_dir: Path) -> dict[str, Any]:
    docs = [(p, _read(p)) for p in paths]
    first_path, first = docs[0]
    key = ("profile", "stage", "simulated")
    named = [r["id"] for r in first["fleet"]["replicas"]]
    for path, doc in docs[1:]:
        for k in key:
            if doc[k] != first[k]:
                raise MergeError(f"{path}: {k} {doc[k]!r}, but {first_path} has {first[k]!r}")
        if [r["id"] for r in doc["fleet"]["replicas"]] != named:
            raise MergeError(f"{path}: names another fleet than {first_path}")
    rows: dict[str, dict[str, Any]] = {}
    replicas: dict[str, dict[str, Any]] = {}
    fleet_checks: dict[str, dict[str, Any]] = {}
    for path, doc in docs:
        for row in doc["decision"]["replicas"]:
            if row["replica"] in rows:
                raise MergeError(f"{path}: replica {row['replica']} is judged in two bundles")
            rows[row["replica"]] = row
        for rep in doc["replicas"]:
            replicas.setdefault(rep["id"], {**rep, "job_bundle": str(path)})
        for c in doc["decision"]["fleet_checks"]:
            if c["check"] == "replicas":
                continue
            kept = fleet_checks.get(c["check"])
            if kept is None or worst([kept["result"], c["result"]]) != kept["result"]:
                fleet_checks[c["check"]] = c
    missing = [rid for rid in named if rid not in rows]
    for rid in missing:
        rows[rid] = {"replica": rid, "result": FAIL, "fingerprint": None, "hits": 0, "reasons": [
            "coverage: no job judged it: the replica was never reached"], "checks": [
            {"check": "coverage", "result": FAIL, "detail": "no job judged it: the replica was never reached"}]}
        replicas[rid] = {"id": rid, "url": None, "pin": None, "fingerprint": None, "graded": None}
    fleet_checks["replicas"] = {"check": "replicas", "result": PASS if not missing else FAIL,
                                "detail": f"{len(named) - len(missing)} of {len(named)} named replicas judged "
                                          f"across {len(docs)} bundles" + (f"; never judged: {', '.join(missing)}" if missing else "")}
    ordered = [rows[rid] for rid in named]
    checks = list(fleet_checks.values())
    result = worst([*(r["result"] for r in ordered), *(c["result"] for c in checks)])
    reasons = [f"fleet: {c['check']}: {c['detail']}" for c in checks if c["result"] != PASS]
    reasons += [f"replica {r['replica']}: {reason}" for r in ordered for reason in r["reasons"]]
    merged = {**first, "replicas": [replicas[rid] for rid in named], "merged_from": [str(p) for p, _ in docs],
              "wall_s": max(d.get("wall_s", 0.0) for _, d in docs),
              "decision": {"result": result, "exit_code": EXIT[result],
                           "failing_replicas": [r["replica"] for r in ordered if r["result"] == FAIL],
                           "reasons": reasons, "fleet_checks": checks, "replicas": ordered}}
    render.write(merged, out_dir)
    return merged
