"""The API key: read from the environment only, required by the server, and found in no artifact —
not the terminal, the launch command, the server log, JUnit, the report or the summary. A rejected
key is reported as such, without a traceback."""

from __future__ import annotations

import re
import os
import secrets
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from ..helpers import pytester_run, write_profile
from ..fake_vllm import answers_health, fake_command, wait_for
from pytest_qualify.server.lifecycle import free_port


def every_artifact(root: Path) -> dict[Path, bytes]:
    return {path: path.read_bytes() for path in root.rglob("*") if path.is_file()}


def assert_nowhere(key: str, result: pytest.RunResult, *roots: Path) -> int:
    """The key in no output and no file under the roots; returns how many files were searched."""
    assert key not in result.stdout.str() and key not in result.stderr.str()
    searched = 0
    for root in roots:
        for path, data in every_artifact(root).items():
            searched += 1
            assert key.encode() not in data, f"the API key leaked into {path}"
    return searched


@pytest.fixture
def api_key(monkeypatch) -> str:
    key = "sk-qualify-" + secrets.token_hex(16)
    monkeypatch.setenv("QUALIFY_API_KEY", key)
    return key


def start_reference(tmp_path: Path, key_env: str, key: str, *faults: str) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest_qualify.reference", "--port", str(port), "--profile",
         str(write_profile(tmp_path)), "--api-key-env", key_env, *(a for f in faults for a in ("--fault", f))],
        env={**os.environ, key_env: key}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )

    assert wait_for(lambda: answers_health(port), 30)
    return proc, port


def test_reference_server_requires_the_key(tmp_path):
    proc, port = start_reference(tmp_path, "REF_KEY", "sk-right-0123456789")
    try:
        def models(key: str | None) -> int:
            req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/models")
            if key:
                req.add_header("Authorization", f"Bearer {key}")
            try:
                return urllib.request.urlopen(req, timeout=5).status
            except urllib.error.HTTPError as exc:
                return exc.code

        assert models(None) == 401
        assert models("sk-wrong") == 401
        assert models("sk-right-0123456789") == 200
    finally:
        proc.kill()
        proc.wait()


def test_known_key_reaches_no_artifact_reference_server(pytester, qualify_pytest, tmp_path, api_key):
    result = qualify_pytest("-rA", repeat=2)
    assert result.ret == 0, result.stdout.str()
    assert "QUALIFICATION: PASS" in result.stdout.str()
    searched = assert_nowhere(api_key, result, qualify_pytest.evidence, tmp_path, pytester.path)
    assert searched >= 5  # junit.xml, report.md, summary.json, server.log, SHA256SUMS at least


def test_known_key_reaches_no_artifact_launch_mode(pytester, qualify_pytest, tmp_path, api_key):
    # The fake vLLM requires the key (given as VLLM_API_KEY) and writes it into its own log.
    result = qualify_pytest("-rA", "--qualify-serve-command", fake_command(), endpoint=None)
    out = result.stdout.str()
    assert result.ret == 0, out
    assert "qualify: launching: " in out
    assert_nowhere(api_key, result, qualify_pytest.evidence, tmp_path, pytester.path)
    (server_log,) = qualify_pytest.evidence.rglob("server.log")
    assert "'api_key': '***'" in server_log.read_text()


def test_key_in_a_failure_message_is_redacted(pytester, qualify_pytest, tmp_path, api_key):
    pytester.makepyfile(test_leak="""
        import os
        import pytest

        pytestmark = pytest.mark.qualify_module("smoke")

        def test_leaks(qualify_client):
            print("captured output with", os.environ["QUALIFY_API_KEY"])
            assert os.environ["QUALIFY_API_KEY"] == "something else"
    """)
    result = qualify_pytest("-rA", suites=["test_leak.py"])
    result.assert_outcomes(failed=1)
    assert "***" in result.stdout.str()
    assert_nowhere(api_key, result, qualify_pytest.evidence, tmp_path)


def test_rejected_key_is_reported_as_such_without_a_traceback(qualify_pytest, tmp_path, monkeypatch):
    proc, port = start_reference(tmp_path, "REF_KEY", "sk-the-right-key-0123")
    monkeypatch.setenv("MY_ENDPOINT_KEY", "sk-a-wrong-key-4567")
    try:
        result = qualify_pytest("-rA", "--qualify-api-key-env", "MY_ENDPOINT_KEY", endpoint=f"http://127.0.0.1:{port}")
    finally:
        proc.kill()
        proc.wait()
    out = result.stdout.str()
    # /health and /version need no key (as on vLLM); /v1/models is refused: the run's first step
    # stops it, nothing was judged (INCOMPLETE, exit 2), and no protocol item runs to fail.
    assert result.ret == pytest.ExitCode.INTERRUPTED, out
    # No protocol item ran; the gate's not-judged test cases are the only ones, as errors.
    result.assert_outcomes(errors=len(re.findall(r"^ERROR .*qualify\.gate::", out, re.M)))
    assert "FAILED" not in out and 1 <= out.count("ERROR ") <= 5, out
    assert all("qualify.gate::" in line for line in out.splitlines() if line.startswith("ERROR "))
    expected = ("not judged: the endpoint rejected the API key (the key is read from $MY_ENDPOINT_KEY): HTTP 401 on "
                "GET /v1/models")
    assert f"qualify: run stopped at its first step: {expected}" in out  # said once, at the start
    assert out.splitlines()[-1].startswith(f"QUALIFICATION: INCOMPLETE (exit 2): {expected}")
    assert "Traceback" not in out and "def test_" not in out and "AuthenticationError" not in out
    assert "sk-a-wrong-key-4567" not in out and "sk-the-right-key-0123" not in out
    summary = qualify_pytest.summary()
    assert summary["verdict"]["result"] == "INCOMPLETE" and summary["verdict"]["incomplete"][0] == expected


def test_key_comes_from_the_named_environment_variable_only(pytester, qualify_pytest, monkeypatch):
    # No key in the environment: the reference server runs without one and the run passes;
    # the option names a variable, never a value.
    monkeypatch.delenv("QUALIFY_API_KEY", raising=False)
    result = qualify_pytest("-rA", "--qualify-api-key-env", "UNSET_KEY_VAR")
    assert result.ret == 0
    help_text = pytester_run(pytester, "--help").stdout.str()
    assert "--qualify-api-key-env" in help_text and "--qualify-api-key=" not in help_text
