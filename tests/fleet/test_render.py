"""The fleet's bundle (fleet/render.py) and the merge of one CI job per replica (fleet/merge.py):
the JUnit keeps the xunit2 structure with a test case per replica, red exactly when the verdict is
not PASS; a merge takes each replica's row from the job that judged it and fails a replica no job
judged."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from dataclasses import replace

import pytest

from pytest_qualify.evidence.junit import counts
from pytest_qualify.fleet import render
from pytest_qualify.fleet.judge import decide
from pytest_qualify.fleet.merge import MergeError, merge

from .test_judge import healthy, record


def write(rec, folder):
    doc = render.fleet_document(rec, decide(rec))
    render.write(doc, folder, ["sk-secret-123"])
    return doc


def test_a_healthy_fleet_bundle(tmp_path):
    doc = write(record(), tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["SHA256SUMS", "fleet.json", "junit.xml", "report.html", "report.md"]
    root = ET.parse(tmp_path / "junit.xml").getroot()
    cases = root.findall(".//testcase")
    assert [c.get("name") for c in cases if c.get("classname") == "qualify.fleet.replica"] == ["r1", "r2", "r3", "r4"]
    assert cases[0].find("system-out").text.startswith("fingerprint ") and "hits 54" in cases[0].find("system-out").text
    assert counts((tmp_path / "junit.xml").read_bytes())["failures"] == 0
    assert render.verdict_line(doc).startswith("FLEET POST-PROMOTION CHECK: PASS (4 replicas)")
    assert "r4" in (tmp_path / "report.html").read_text() and "| r2 | **PASS** |" in (tmp_path / "report.md").read_text()


def test_report_html_shows_every_replica_and_the_fingerprints_side_by_side(tmp_path):
    import re

    from pytest_qualify.fleet.fingerprint import Fingerprint, FingerprintCheck
    from pytest_qualify.promotion.identity import Identity

    odd = replace(healthy("r3"), fingerprint=Fingerprint(Identity("m", "org/m", 2048, "v")),
                  check=FingerprintCheck("r3", ("window_tokens: profile p 4096, replica 2048",)))
    write(record(r3=odd), tmp_path)
    page = (tmp_path / "report.html").read_text()
    rows = re.findall(r"<tr><td class=mono>(r\d)<br>.*?<span class='verdict v-(\w+)'>", page)
    assert rows == [("r1", "PASS"), ("r2", "PASS"), ("r3", "FAIL"), ("r4", "PASS")]
    assert "<li class=reason>replica r3: fingerprint: " in page and "window_tokens: profile p 4096, replica 2048" in page
    window = re.search(r"<tr><th>window_tokens</th>(.*?)</tr>", page).group(1)
    assert re.findall(r"<td class='mono reason'>(\d+)</td>", window) == ["4096", "4096", "2048", "4096"]
    model = re.search(r"<tr><th>model_root</th>(.*?)</tr>", page).group(1)
    assert "reason" not in model  # a field every replica agrees on is not marked


def test_a_failing_replica_is_red_in_junit_by_its_id(tmp_path):
    bad = replace(healthy("r3"), probes=())
    write(record(r3=bad), tmp_path)
    root = ET.parse(tmp_path / "junit.xml").getroot()
    red = [c.get("name") for c in root.findall(".//testcase") if c.find("failure") is not None or c.find("error") is not None]
    assert red == ["r3"]
    assert json.loads((tmp_path / "fleet.json").read_text())["decision"]["result"] == "INCOMPLETE"


def test_one_job_per_replica_merges_into_the_fleet(tmp_path):
    rec = record()
    for rid in ("r1", "r2", "r3", "r4"):
        write(replace(rec, replicas=(healthy(rid),)), tmp_path / rid)
    doc = merge([tmp_path / rid for rid in ("r1", "r2", "r3", "r4")], tmp_path / "merged")
    assert doc["decision"]["result"] == "PASS" and [r["replica"] for r in doc["decision"]["replicas"]] == ["r1", "r2", "r3", "r4"]
    assert counts((tmp_path / "merged" / "junit.xml").read_bytes())["tests"] == 6


def test_a_replica_no_job_judged_fails_coverage_in_the_merge(tmp_path):
    rec = record()
    for rid in ("r1", "r2", "r4"):
        write(replace(rec, replicas=(healthy(rid),)), tmp_path / rid)
    doc = merge([tmp_path / rid for rid in ("r1", "r2", "r4")], tmp_path / "merged")
    assert doc["decision"]["result"] == "FAIL" and doc["decision"]["failing_replicas"] == ["r3"]
    assert "replica r3: coverage: no job judged it: the replica was never reached" in doc["decision"]["reasons"]


def test_a_merge_refuses_a_replica_judged_twice_and_a_tampered_bundle(tmp_path):
    rec = record()
    for name in ("a", "b"):
        write(replace(rec, replicas=(healthy("r1"),)), tmp_path / name)
    with pytest.raises(MergeError, match="judged in two bundles"):
        merge([tmp_path / "a", tmp_path / "b"], tmp_path / "merged")
    (tmp_path / "a" / "report.md").write_text("edited")
    with pytest.raises(MergeError, match="does not verify"):
        merge([tmp_path / "a"], tmp_path / "merged")
