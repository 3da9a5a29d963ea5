"""The fleet's bundle: ``fleet.json`` (the record and the decision), ``junit.xml`` (a test case per
replica, named by its id, whose output holds its fingerprint and hits, and one per fleet check; red
exactly when the verdict is not PASS), ``report.md`` and ``report.html`` (the fleet: a row per
replica, its checks, links to its own run's report), then ``SHA256SUMS`` (secrets masked first).
Renders only: every call was made by ``judge.decide``. Each replica's own bundle stays under
``replicas/<id>/evidence/``."""

from __future__ import annotations

import html
import json
import os
import platform
import time
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pytest_qualify.bundle_format.manifest import JUNIT, REPORT
from pytest_qualify.evidence.bundle import write_manifest
from pytest_qualify.evidence.html import STYLE
from pytest_qualify.evidence.junit import structure_errors
from pytest_qualify.fleet.judge import FAIL, PASS, FleetDecision, FleetRecord

FLEET_JSON = "fleet.json"
HTML = "report.html"
SCHEMA_ID = "pytest-qualify/fleet/v1"


def fleet_document(record: FleetRecord, decision: FleetDecision, *, wall_s: float = 0.0) -> dict[str, Any]:
    """``fleet.json``: what was asked, what each replica said, and the decision."""
    replicas = []
    for r in record.replicas:
        replicas.append({
            "id": r.replica.id, "url": r.replica.url, "pin": r.replica.pin, "readiness": r.readiness.as_dict(),
            "fingerprint": r.fingerprint.as_dict() if r.fingerprint else None,
            "fingerprint_differences": list(r.check.differences) if r.check else [],
            "probes": [p.as_dict() for p in r.probes], "probe_requests_counted": r.probe_counted,
            "attributed_by": r.attributed_by or None, "graded": r.graded.as_dict() if r.graded else None,
            "graded_requests_counted": r.graded_counted, "reference_faults": [dict(f) for f in r.faults],
        })
    return {
        "schema": SCHEMA_ID, "profile": record.profile, "stage": record.stage, "simulated": record.simulated,
        "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "wall_s": round(wall_s, 2),
        "host": platform.node(), "ci_run": os.environ.get("GITHUB_RUN_ID") or os.environ.get("CI_JOB_ID"),
        "fleet": record.spec.as_dict(), "expected": record.expected.as_dict(),
        "routing": record.routing.as_dict() if record.routing else None,
        "reference_faults": {k: list(v) for k, v in record.reference_faults.items()},
        "replicas": replicas, "decision": decision.as_dict(),
    }


def verdict_line(doc: Mapping[str, Any]) -> str:
    d = doc["decision"]
    n = len(doc["replicas"])
    failing = d["failing_replicas"]
    line = f"FLEET {doc['stage'].upper()} CHECK: {d['result']} ({n} replicas"
    line += f"; failing: {', '.join(failing)}" if failing else ""
    line += f") (exit {d['exit_code']})"
    return line + (" · SIMULATED (not vLLM; never backs a promotion)" if doc["simulated"] else "")


def _hits(row: Mapping[str, Any]) -> str:
    return f"fingerprint {row['fingerprint'] or 'not read'}; hits {row['hits']}"


def build_junit(doc: Mapping[str, Any]) -> bytes:
    """A test case per replica (``qualify.fleet.replica``, named by its id) and per fleet check."""
    d = doc["decision"]
    cases: list[tuple[str, str, str, list[str], str, float]] = []  # classname, name, result, reasons, output, time
    wall = {r["id"]: float((r.get("graded") or {}).get("wall_s") or 0.0) for r in doc["replicas"]}
    for row in d["replicas"]:
        out = "\n".join([_hits(row)] + [f"{c['check']}: {c['result']}: {c['detail']}" for c in row["checks"]])
        cases.append(("qualify.fleet.replica", row["replica"], row["result"], row["reasons"], out,
                      wall.get(row["replica"], 0.0)))
    for c in d["fleet_checks"]:
        cases.append(("qualify.fleet", c["check"], c["result"], [c["detail"]] if c["result"] != PASS else [],
                      c["detail"], 0.0))
    failures = sum(1 for c in cases if c[2] == FAIL)
    errors = sum(1 for c in cases if c[2] not in (PASS, FAIL))
    suites = ET.Element("testsuites")
    suite = ET.SubElement(suites, "testsuite", name="qualify.fleet", tests=str(len(cases)), failures=str(failures),
                          errors=str(errors), skipped="0", time=f"{doc['wall_s']:.3f}", timestamp=doc["written"],
                          hostname=str(doc["host"] or "localhost"))
    props = ET.SubElement(suite, "properties")
    for name, value in (("profile", doc["profile"]), ("stage", doc["stage"]), ("verdict", d["result"]),
                        ("replicas", ",".join(r["id"] for r in doc["replicas"])),
                        ("router", doc["fleet"]["router"] or ""), ("channel", doc["fleet"]["channel"]),
                        ("simulated", str(doc["simulated"]).lower())):
        ET.SubElement(props, "property", name=name, value=str(value))
    for classname, name, result, reasons, out, seconds in cases:
        case = ET.SubElement(suite, "testcase", classname=classname, name=name, time=f"{seconds:.3f}")
        if result == FAIL:
            ET.SubElement(case, "failure", message=reasons[0] if reasons else "failed", type="qualify.fleet").text = \
                "\n".join(reasons)
        elif result != PASS:
            ET.SubElement(case, "error", message=f"{result}: " + (reasons[0] if reasons else "not judged"),
                          type="qualify.fleet.incomplete").text = "\n".join(reasons)
        ET.SubElement(case, "system-out").text = out
    data = ET.tostring(suites, encoding="utf-8", xml_declaration=True)
    problems = structure_errors(data)
    if problems:
        raise ValueError(f"fleet junit.xml breaks the xunit2 structure: {problems}")
    return data


def render_md(doc: Mapping[str, Any]) -> str:
    d = doc["decision"]
    lines = [f"# {verdict_line(doc)}", ""]
    if doc["simulated"]:
        lines += ["SIMULATED: this fleet is the reference server's; it describes no deployment.", ""]
    fleet = doc["fleet"]
    lines += [f"Profile `{doc['profile']}`, stage `{doc['stage']}`; router {fleet['router'] or '(none named)'}; "
              f"channel `{fleet['channel']}` ({fleet['channel_description']}); expected fingerprint from "
              f"{doc['expected']['source']}.", ""]
    if d["reasons"]:
        lines += ["## Reasons", "", *[f"- {r}" for r in d["reasons"]], ""]
    lines += ["## Replicas", "", "| replica | result | fingerprint | hits | ready | routed | fingerprint check | probes | graded | coverage |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for row in d["replicas"]:
        by = {c["check"]: c for c in row["checks"]}

        def cell(name: str) -> str:
            c = by.get(name)
            return "—" if c is None else f"{c['result']}: {c['detail']}".replace("|", "\\|")

        lines.append(f"| {row['replica']} | **{row['result']}** | `{row['fingerprint'] or '-'}` | {row['hits']} | "
                     + " | ".join(cell(n) for n in ("ready", "routed", "fingerprint", "probes", "graded", "coverage")) + " |")
    lines += ["", "## Fleet checks", "", *[f"- {c['check']}: {c['result']}: {c['detail']}" for c in d["fleet_checks"]], ""]
    return "\n".join(lines)


def render_html(doc: Mapping[str, Any], out_dir: Path) -> str:
    e = html.escape
    d = doc["decision"]
    cls = f"v-{d['result']}"
    out = ["<!doctype html><html lang=en><head><meta charset=utf-8>",
           f"<title>Fleet: {e(d['result'])}</title><style>{STYLE}</style></head><body><header>",
           f"<h1>Fleet <span class='verdict {cls}'>{e(d['result'])}</span> <span class=muted>exit {d['exit_code']}</span></h1>",
           f"<p class=muted>{e(verdict_line(doc))}</p>"]
    if doc["simulated"]:
        out.append("<div class=sim>SIMULATED: this fleet is the reference server's; it describes no deployment.</div>")
    if d["reasons"]:
        out.append("<ul>" + "".join(f"<li class=reason>{e(r)}</li>" for r in d["reasons"]) + "</ul>")
    fleet = doc["fleet"]
    out.append(f"</header><main><p>Router <code>{e(str(fleet['router'] or '(none named)'))}</code>; channel "
               f"<code>{e(fleet['channel'])}</code> ({e(fleet['channel_description'])}); expected fingerprint from "
               f"{e(doc['expected']['source'])}.</p><h2>Replicas</h2><table><tr><th>replica</th><th>result</th>"
               "<th>fingerprint</th><th>hits</th><th>checks</th><th>its run</th></tr>")
    replicas = {r["id"]: r for r in doc["replicas"]}
    for row in d["replicas"]:
        rep = replicas[row["replica"]]
        checks = "".join(f"<li><span class='badge {'b-ok' if c['result'] == PASS else 'b-fail' if c['result'] == FAIL else 'b-other'}'>"
                         f"{e(c['result'])}</span> <b>{e(c['check'])}</b>: {e(c['detail'])}</li>" for c in row["checks"])
        bundle = (rep.get("graded") or {}).get("bundle")
        link = "—"
        if bundle and (Path(bundle) / HTML).is_file():
            rel = os.path.relpath(Path(bundle) / HTML, out_dir)
            link = f"<a href='{e(rel)}'>report.html</a>"
        where = rep["url"] or f"pinned {rep['pin']}"
        out.append(f"<tr><td class=mono>{e(row['replica'])}<br><span class=muted>{e(str(where))}</span></td>"
                   f"<td><span class='verdict v-{e(row['result'])}'>{e(row['result'])}</span></td>"
                   f"<td class=mono>{e(str(row['fingerprint'] or '-'))}</td><td>{row['hits']}</td>"
                   f"<td><ul>{checks}</ul></td><td>{link}</td></tr>")
    out.append("</table><h2>Fleet checks</h2><ul>" + "".join(
        f"<li><b>{e(c['check'])}</b>: {e(c['result'])}: {e(c['detail'])}</li>" for c in d["fleet_checks"]) + "</ul>")
    if doc["routing"]:
        out.append(f"<h2>The router's round</h2><pre>{e(json.dumps(doc['routing'], indent=1))}</pre>")
    out.append("<h2>Fingerprints</h2><table><tr><th>field</th>"
               + "".join(f"<th>{e(r['id'])}</th>" for r in doc["replicas"]) + "</tr>")
    names = sorted({k for r in doc["replicas"] for k in ((r["fingerprint"] or {}).get("fields") or {})})
    for name in names:
        values = [((r["fingerprint"] or {}).get("fields") or {}).get(name) for r in doc["replicas"]]
        odd = len({json.dumps(v) for v in values}) > 1
        out.append(f"<tr><th>{e(name)}</th>" + "".join(
            f"<td class='mono{' reason' if odd else ''}'>{e(str(v))}</td>" for v in values) + "</tr>")
    out.append("</table></main></body></html>")
    return "".join(out)


def write(doc: Mapping[str, Any], out_dir: Path, secrets: Sequence[str] = ()) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / FLEET_JSON, out_dir / JUNIT, out_dir / REPORT, out_dir / HTML]
    paths[0].write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    paths[1].write_bytes(build_junit(doc))
    paths[2].write_text(render_md(doc), encoding="utf-8")
    paths[3].write_text(render_html(doc, out_dir), encoding="utf-8")
    write_manifest(out_dir, secrets)
    return paths
