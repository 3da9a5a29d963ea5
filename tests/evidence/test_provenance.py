"""provenance.intoto.json: an in-toto Statement v1 whose subjects are the bundle's files with their
sha256 and whose predicate is the deployment's identity, the profile and its digest, the plugin's
version, the run, the verdict — with no secret, also not in the serve command."""

from __future__ import annotations

import hashlib
import json
import secrets
from pathlib import Path

import pytest

from ..helpers import SMOKE, pytester_run, write_profile
from ..fake_vllm import fake_command
from pytest_qualify.evidence.provenance import (
    PREDICATE_TYPE, PROVENANCE_FILE, STATEMENT_TYPE, check_statement, predicate, subjects,
)


def test_subjects_are_every_bundle_file_but_the_statement_and_the_manifest(tmp_path):
    (tmp_path / "summary.json").write_text("{}")
    (tmp_path / "server.log").write_bytes(b"\x00\x01log")
    (tmp_path / "SHA256SUMS").write_text("x")
    (tmp_path / PROVENANCE_FILE).write_text("old")
    (tmp_path / ".write-test").write_text("")
    subs = subjects(tmp_path)
    assert [s["name"] for s in subs] == ["server.log", "summary.json"]
    assert subs[0]["digest"]["sha256"] == hashlib.sha256(b"\x00\x01log").hexdigest()


def test_check_statement_finds_a_changed_or_missing_subject(tmp_path):
    (tmp_path / "a.txt").write_text("a")
    (tmp_path / "b.txt").write_text("b")
    data = {"_type": STATEMENT_TYPE, "subject": subjects(tmp_path), "predicateType": PREDICATE_TYPE, "predicate": {}}
    (tmp_path / PROVENANCE_FILE).write_text(json.dumps(data))
    assert check_statement(tmp_path) == []
    (tmp_path / "a.txt").write_text("changed")
    (tmp_path / "b.txt").unlink()
    assert check_statement(tmp_path) == ["subject a.txt: sha256 does not match the file",
                                         "subject b.txt: no such file in the bundle"]
    data["_type"] = "https://in-toto.io/Statement/v0.1"
    (tmp_path / PROVENANCE_FILE).write_text(json.dumps(data))
    assert any("_type" in p for p in check_statement(tmp_path))


def test_launch_mode_statement_binds_the_bundle_to_the_deployment(pytester, tmp_path, monkeypatch):
    key = "sk-qualify-" + secrets.token_hex(12)
    hf = "hf_" + secrets.token_hex(12)
    monkeypatch.setenv("QUALIFY_API_KEY", key)
    profile = write_profile(tmp_path)
    result = pytester_run(pytester, f"--qualify={profile}", "--qualify-evidence", str(tmp_path / "ev"),
        "--qualify-serve-command", fake_command("--hf-token", hf, "--served-model-name", "{served_name}"), SMOKE,
    )
    out = result.stdout.str()
    assert result.ret == 0, out[-3000:]
    (d,) = list((tmp_path / "ev").iterdir())
    assert check_statement(d) == []
    data = json.loads((d / PROVENANCE_FILE).read_text())
    assert data["_type"] == STATEMENT_TYPE and data["predicateType"] == PREDICATE_TYPE
    names = {s["name"] for s in data["subject"]}
    assert names == {p.name for p in d.iterdir()} - {PROVENANCE_FILE, "SHA256SUMS"}
    assert {"junit.xml", "report.md", "summary.json", "server.log", "ttft-vs-prompt-tokens.png"} <= names
    # The manifest covers the statement in turn.
    assert f"  {PROVENANCE_FILE}" in (d / "SHA256SUMS").read_text()

    summary = json.loads((d / "summary.json").read_text())
    pred = data["predicate"]
    dep = pred["deployment"]
    assert (dep["model"], dep["revision"], dep["served_name"]) == ("pytest-qualify/small-chat", "main", "small-chat-4k")
    assert dep["engine_version"] == summary["target"]["engine_version"] and dep["engine_version"]
    assert dep["target_mode"] == "launch" and dep["simulated"] is False
    assert dep["served_models"][0]["id"] == "small-chat-4k"
    assert "--hf-token ***" in dep["serve_command"] and "fake_vllm.py serve" in dep["serve_command"]
    assert pred["profile"]["sha256"] == hashlib.sha256(Path(profile).read_bytes()).hexdigest()
    assert pred["profile"]["source"] == str(profile)
    assert pred["run"]["id"] == summary["run"]["id"] == d.name
    assert pred["run"]["started_at"] == summary["run"]["started_at"] and pred["run"]["finished_at"]
    assert pred["verdict"] == {"result": "PASS", "reasons": [], "failures": 0, "waived": 0, "exit_code": 0}
    assert pred["qualifier"]["name"] == "pytest-qualify" and pred["qualifier"]["version"] == summary["run"]["tool_version"]
    for path in d.iterdir():
        data_bytes = path.read_bytes()
        assert key.encode() not in data_bytes and hf.encode() not in data_bytes, f"a secret in {path.name}"


def test_a_failed_startup_still_gets_its_statement(pytester, tmp_path):
    result = pytester_run(pytester, f"--qualify={write_profile(tmp_path)}", "--qualify-evidence", str(tmp_path / "ev"),
        "--qualify-serve-command", fake_command("--exit-during-startup", "3"), SMOKE,
    )
    assert result.ret == pytest.ExitCode.INTERRUPTED
    (d,) = list((tmp_path / "ev").iterdir())
    assert check_statement(d) == []
    pred = json.loads((d / PROVENANCE_FILE).read_text())["predicate"]
    assert pred["verdict"]["result"] == "INCOMPLETE" and pred["verdict"]["exit_code"] == 2
    assert pred["verdict"]["reasons"][0].startswith("server startup failed")
    assert "server.log" in {s["name"] for s in json.loads((d / PROVENANCE_FILE).read_text())["subject"]}


def test_statement_from_a_summary_alone():
    summary = {
        "profile": {"name": "p", "source": "/nonexistent/p.toml",
                    "deployment": {"model": "m", "revision": "", "served_name": "s", "engine": "", "image": "img",
                                   "image_digest": "sha256:" + "0" * 64}},
        "target": {"mode": "attach", "engine_version": None, "models": [], "launch_command": None,
                   "base_url": "http://router:8000"},
        "run": {"id": "r", "started_at": "a", "finished_at": "b", "repeat": 3, "workers": 0, "tool_version": "0.1.0"},
        "verdict": {"result": "FAIL", "reasons": ["x"], "failures": [{}], "waived": []},
        "simulated": False,
    }
    pred = predicate(summary, exit_code=1)
    assert pred["deployment"]["image_digest"] == "sha256:" + "0" * 64 and pred["deployment"]["revision"] is None
    assert pred["deployment"]["serve_command"] is None and pred["deployment"]["endpoint"] == "http://router:8000"
    assert pred["profile"]["sha256"] is None  # the file is gone: said, not invented
    assert pred["verdict"]["failures"] == 1 and pred["verdict"]["exit_code"] == 1
