"""Bad local input is a usage error (exit code 4) that names the thing, found before any server
is started: profiles and waiver files that cannot be read or are wrong, an evidence directory that
cannot be written, a taken port, an endpoint that is not a URL, a serve command that does not exist."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from ..helpers import pytester_run, write_profile
from ..fake_vllm import fake_command
from pytest_qualify.hooks.collection import suites_dir
from pytest_qualify.profiles import builtin_profiles

SMOKE = str(suites_dir() / "test_smoke.py")


def usage_error(pytester: pytest.Pytester, tmp_path: Path, *args: str, evidence: Path | None = None) -> str:
    """Run pytest, expect a usage error, return what it said."""
    result = pytester_run(pytester,
        "--qualify-evidence", str(evidence or tmp_path / "ev"), *args, SMOKE,
    )
    text = result.stderr.str() + result.stdout.str()
    assert result.ret == pytest.ExitCode.USAGE_ERROR, text
    assert "Traceback" not in text and "INTERNALERROR" not in text, text
    assert "qualify: launching" not in text and "server ready" not in text, "a server was started"
    return text


def test_unknown_profile_name(pytester, tmp_path):
    text = usage_error(pytester, tmp_path, "--qualify=nope")
    assert "unknown profile 'nope'" in text and "small" in text


@pytest.mark.parametrize("make, expected", [
    (lambda p: p.mkdir(), "does not exist or is not a file"),
    (lambda p: p.symlink_to(p.parent / "missing-target.toml"), "does not exist or is not a file"),
    (lambda p: p.write_bytes(b'name = "\xff\xfe"\n'), "cannot be read (not UTF-8 text"),
    (lambda p: p.write_text("name = [unclosed\n"), "not valid TOML"),
], ids=["directory", "broken-symlink", "not-utf8", "not-toml"])
def test_unreadable_profile_is_named(pytester, tmp_path, make, expected):
    path = tmp_path / "profile.toml"
    make(path)
    text = usage_error(pytester, tmp_path, f"--qualify={path}", "--qualify-endpoint", "reference")
    assert str(path) in text and expected in text


@pytest.mark.parametrize("old, new, expected", [
    ("request_s = 60", 'request_s = "sixty"', ["'timeouts.request_s'", "'sixty' is not of type 'number'"]),
    ("answer_tokens = 256", "answer_tokens = 2.5", ["limits.answer_tokens"]),
], ids=["string-for-number", "float-for-integer"])
def test_profile_field_of_the_wrong_type_is_named(pytester, tmp_path, old, new, expected):
    path = tmp_path / "profile.toml"
    path.write_text(Path(builtin_profiles()["small"]).read_text().replace(old, new))
    text = usage_error(pytester, tmp_path, f"--qualify={path}", "--qualify-endpoint", "reference")
    assert str(path) in text and all(e in text for e in expected), text


@pytest.mark.parametrize("make, expected", [
    (lambda p: None, "cannot be read (No such file or directory)"),
    (lambda p: p.mkdir(), "cannot be read (Is a directory)"),
    (lambda p: p.write_bytes(b"\xff\xfe"), "cannot be read (not UTF-8 text"),
], ids=["missing", "directory", "not-utf8"])
def test_unreadable_waiver_file_is_named(pytester, tmp_path, make, expected):
    path = tmp_path / "waivers.toml"
    make(path)
    text = usage_error(pytester, tmp_path, f"--qualify={write_profile(tmp_path)}", "--qualify-endpoint", "reference",
                       "--qualify-waivers", str(path))
    assert "--qualify-waivers" in text and str(path) in text and expected in text


def test_evidence_directory_that_cannot_be_written(pytester, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    text = usage_error(pytester, tmp_path, f"--qualify={write_profile(tmp_path)}", "--qualify-endpoint", "reference",
                       evidence=blocker / "evidence")
    assert "--qualify-evidence: cannot write the evidence directory" in text and str(blocker) in text


@pytest.mark.parametrize("mode", ["reference", "launch"])
def test_profile_port_already_taken(pytester, tmp_path, monkeypatch, mode):
    launches = tmp_path / "launches"
    monkeypatch.setenv("FAKE_VLLM_LAUNCH_LOG", str(launches))
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        profile = write_profile(tmp_path, extra_serve=f"port = {port}")
        target = ("--qualify-endpoint", "reference") if mode == "reference" else ("--qualify-serve-command", fake_command())
        text = usage_error(pytester, tmp_path, f"--qualify={profile}", *target)
    assert f"serve.port {port} on 127.0.0.1 is already in use" in text and str(profile) in text
    assert not launches.exists()


def test_endpoint_that_is_not_a_url_is_a_usage_error(pytester, tmp_path):
    text = usage_error(pytester, tmp_path, f"--qualify={write_profile(tmp_path)}", "--qualify-endpoint", "localhost:8000")
    assert "--qualify-endpoint: 'localhost:8000' is not a URL" in text


def test_serve_command_that_does_not_exist(pytester, tmp_path):
    text = usage_error(pytester, tmp_path, f"--qualify={write_profile(tmp_path)}",
                       "--qualify-serve-command", "/nonexistent/bin/vllm serve {model}")
    assert "--qualify-serve-command: cannot run '/nonexistent/bin/vllm'" in text


def test_profile_serve_command_that_does_not_exist(pytester, tmp_path):
    profile = write_profile(tmp_path)
    profile.write_text(profile.read_text().replace('command = ["vllm", "serve", "{model}"]',
                                                   'command = ["no-such-vllm-binary", "serve", "{model}"]'))
    text = usage_error(pytester, tmp_path, f"--qualify={profile}")
    assert f"serve.command of profile {profile}: cannot run 'no-such-vllm-binary'" in text
