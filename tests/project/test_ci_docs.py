"""docs/ci.md cannot rot: its CI jobs' commands run here, as written, against the reference server.

The GitHub job's launch on a GPU becomes a launch of the reference server (`--qualify-endpoint
reference` appended); the GitLab job attaches, with its API key from the environment, to a
reference server started here; `cosign` is a recording stub (no signing identity here); every
other line runs as written. The matrix expands per entry and collects; the distributed profile
loads and its launch command carries vLLM's parallel flags.
"""

from __future__ import annotations

import glob
import json
import os
import re
import secrets
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from ..fake_vllm import wait_for
from pytest_qualify.evidence.provenance import PREDICATE_TYPE, PROVENANCE_FILE, check_statement
from pytest_qualify.gate.decide import EXIT_CODES, INCOMPLETE
from pytest_qualify.server.lifecycle import free_port
from pytest_qualify.profiles import load_profile

from ..helpers import run_pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "ci.md"
BLOCK_RE = re.compile(r"<!-- ci-docs: (?P<name>\S+)(?: (?P<arg>\S+))? -->\n```(?P<lang>\w+)\n(?P<body>.*?)```", re.S)


@dataclass(frozen=True)
class Block:
    name: str
    arg: str | None
    lang: str
    body: str


def blocks() -> dict[str, Block]:
    found = {m["name"]: Block(m["name"], m["arg"], m["lang"], m["body"]) for m in BLOCK_RE.finditer(DOC.read_text())}
    assert set(found) == {"github-workflow", "gitlab-job", "matrix", "distributed-profile"}, set(found)
    return found


def run_commands(yaml_text: str) -> list[str]:
    """Every ``run:`` value of a workflow, a ``run: |`` block as one script."""
    out, lines, i = [], yaml_text.splitlines(), 0
    while i < len(lines):
        m = re.match(r"^(\s*)(?:- )?run: (.*)$", lines[i])
        i += 1
        if not m:
            continue
        if m[2].strip() != "|":
            out.append(m[2].strip())
            continue
        indent, script = len(m[1]), []
        while i < len(lines) and (not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > indent):
            script.append(lines[i].strip())
            i += 1
        out.append("\n".join(script).strip())
    return out


def yaml_list(yaml_text: str, key: str) -> list[str]:
    """The items of ``key:`` followed by ``- item`` lines (a list block in a GitLab job)."""
    m = re.search(rf"^(\s*){key}:\n((?:\1\s+- .*\n)+)", yaml_text, re.M)
    assert m, f"no list {key}: in\n{yaml_text}"
    return [line.strip()[2:] for line in m[2].splitlines()]


def yaml_value(yaml_text: str, key: str) -> str:
    m = re.search(rf"^\s*{key}: (.+)$", yaml_text, re.M)
    assert m, f"no {key}: in\n{yaml_text}"
    return m[1].strip().strip('"')


def pytest_args(command: str) -> list[str]:
    """A documented ``pytest ...`` command's arguments, to run as an inner pytest."""
    argv = shlex.split(command)
    assert argv[0] == "pytest", command
    return argv[1:]


def env_for(tmp_path: Path, **extra: str) -> dict[str, str]:
    return dict(extra)  # over the outer environment less its QUALIFY_*, PYTEST_* and GITHUB_* (run_pytest)


def bundle_dir(root: Path) -> Path:
    (run,) = [p for p in root.iterdir() if p.is_dir()]
    return run


@pytest.mark.e2e
def test_github_workflow_runs_as_written(tmp_path):
    wf = blocks()["github-workflow"].body
    commands = run_commands(wf)
    assert commands[0] == "pip install -e ."  # the checkout is this project: already installed here
    git, qualify, sign = commands[1:4]
    assert subprocess.run(["bash", "-c", git], capture_output=True).returncode == 0  # git is here: no apt
    assert qualify == "pytest --qualify=262k --repeat 3 --qualify-evidence qualify-evidence"
    step = tmp_path / "step-summary.md"
    env = env_for(tmp_path, GITHUB_STEP_SUMMARY=str(step), HF_HUB_OFFLINE=yaml_value(wf, "HF_HUB_OFFLINE"))
    # The GPU runner launches vLLM; here the launch is the reference server's.
    done = run_pytest(*pytest_args(qualify), "--qualify-endpoint", "reference", cwd=tmp_path, env=env, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert done.stdout.splitlines()[-1].startswith("QUALIFICATION: PASS (exit 0)")
    upload = yaml_value(wf, "path")
    assert upload == "qualify-evidence/" and (tmp_path / upload).is_dir()
    (junit,) = glob.glob(str(tmp_path / yaml_value(wf, "report_paths")))
    assert Path(junit).name == "junit.xml"
    assert step.read_text().startswith("## Qualification: PASS — `agents-a1-fp8-mm-262k` (profile `262k`)")

    # The signing block, as written, with cosign recording its arguments.
    record = tmp_path / "cosign-args.txt"
    stub = f'cosign() {{ printf "%s\\n" "$@" > {shlex.quote(str(record))}; }}\nset -e\n'
    signed = subprocess.run(["bash", "-c", stub + sign], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert signed.returncode == 0, signed.stdout + signed.stderr
    assert ": FAILED" not in signed.stdout and "provenance.intoto.json: OK" in signed.stdout
    assert record.read_text().splitlines() == ["attest-blob", "--yes", "--type", PREDICATE_TYPE, "--predicate",
                                               "../predicate.json", "--bundle", "../qualification.sigstore.json",
                                               "SHA256SUMS"]
    run = bundle_dir(tmp_path / "qualify-evidence")
    statement = json.loads((run / PROVENANCE_FILE).read_text())
    assert json.loads((tmp_path / "qualify-evidence" / "predicate.json").read_text()) == statement["predicate"]
    assert check_statement(run) == []


def healthy(url: str) -> bool:
    import httpx

    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.fixture
def router(tmp_path):
    """The router in front of vLLM: a reference server for the 262k profile that requires a key."""
    key = "sk-router-" + secrets.token_hex(12)
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest_qualify.reference", "--port", str(port), "--profile", "262k",
         "--api-key-env", "ROUTER_KEY"],
        env={**os.environ, "ROUTER_KEY": key}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        assert wait_for(lambda: healthy(f"http://127.0.0.1:{port}/health"), 60), "reference server did not start"
        yield f"http://127.0.0.1:{port}", key
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.mark.e2e
def test_gitlab_job_runs_as_written(tmp_path, router):
    job = blocks()["gitlab-job"].body
    assert yaml_list(job, "before_script") == ["pip install -e ."]
    (command,) = yaml_list(job, "script")
    # A masked CI/CD variable in GitLab; the endpoint is the job's variable, pointed at our router.
    assert yaml_value(job, "QUALIFY_ENDPOINT").startswith("https://")
    url, key = router
    env = env_for(tmp_path, QUALIFY_ENDPOINT=url, QUALIFY_API_KEY=key)
    done = run_pytest(*pytest_args(command), cwd=tmp_path, env=env, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert yaml_value(job, "when") == "always"
    assert yaml_list(job, "paths") == ["qualify-evidence/"] and (tmp_path / "qualify-evidence").is_dir()
    (junit,) = glob.glob(str(tmp_path / yaml_value(job, "junit")))
    # Retried exactly on INCOMPLETE.
    assert int(yaml_value(job, "exit_codes")) == EXIT_CODES[INCOMPLETE]
    run = bundle_dir(tmp_path / "qualify-evidence")
    summary = json.loads((run / "summary.json").read_text())
    assert summary["target"]["mode"] == "attach" and summary["verdict"]["result"] == "PASS"
    assert key not in done.stdout + done.stderr
    for path in run.iterdir():
        assert key.encode() not in path.read_bytes(), f"the API key leaked into {path.name}"


@pytest.mark.e2e
def test_matrix_gives_each_deployment_its_own_job_and_bundle(tmp_path):
    found = blocks()
    matrix = found["matrix"].body
    entries = [dict(re.findall(r"(deployment|profile|runner): (\S+)", chunk))
               for chunk in re.split(r"\n\s*- (?=deployment:)", matrix)[1:]]
    assert len(entries) >= 2 and len({e["deployment"] for e in entries}) == len(entries)
    commands = run_commands(matrix)
    assert commands[0] == "pip install -e ."
    template = commands[1]
    profile_block = found["distributed-profile"]
    (tmp_path / profile_block.arg).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / profile_block.arg).write_text(profile_block.body)
    evidence_dirs = set()
    for entry in entries:
        command = re.sub(r"\$\{\{ matrix\.(\w+) \}\}", lambda m: entry[m[1]], template)
        # The profile and the options resolve without a server: configure finds no usage error in them,
        # and only then refuses --collect-only (a qualification runs every test body).
        done = run_pytest(*pytest_args(command), "--collect-only", "-q", cwd=tmp_path, env=env_for(tmp_path), timeout=300)
        assert done.returncode == 4, done.stdout[-3000:] + done.stderr[-2000:]
        errors = [line for line in (done.stdout + done.stderr).splitlines() if line.startswith("ERROR:")]
        assert len(errors) == 1 and "--collect-only cannot be combined with --qualify" in errors[0], errors
        evidence_dirs.add(shlex.split(command)[shlex.split(command).index("--qualify-evidence") + 1])
    assert evidence_dirs == {f"qualify-evidence/{e['deployment']}" for e in entries}
    # One artifact per deployment: the upload's name carries the matrix entry.
    assert re.findall(r"name: (qualify-evidence-.+)", matrix) == ["qualify-evidence-${{ matrix.deployment }}"]


def test_distributed_profile_loads_and_launches_with_vllms_parallel_flags(tmp_path):
    from pytest_qualify.settings import resolve
    from pytest_qualify.server.target import launch_spec

    block = blocks()["distributed-profile"]
    path = tmp_path / "dist.toml"
    path.write_text(block.body)
    profile = load_profile(str(path))
    assert profile.name == Path(block.arg).stem
    settings = resolve({}, {}, lambda key: None)
    argv = launch_spec(profile, settings, tmp_path, None).argv
    text = " ".join(argv)
    for flag in ("--tensor-parallel-size 4", "--pipeline-parallel-size 2", "--distributed-executor-backend ray"):
        assert flag in text
    # Replicas instead of a split: the schema accepts data parallelism the same way.
    dp = block.body.replace('"--pipeline-parallel-size", "2",', '"--data-parallel-size", "2",')
    path.write_text(dp)
    assert "--data-parallel-size" in load_profile(str(path)).serve.args
