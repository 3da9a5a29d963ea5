"""What the test files share: a profile builder, the protocol suite files, the one way an inner pytest
starts (:func:`pytest_command`, run by :func:`run_pytest`, :func:`start_pytest`, :func:`pytester_run`
and :class:`QualifyPytest`), and JUnit read back by element text. Test files import it
(``from ..helpers import write_profile``), never ``conftest``: a relative import of the ``tests`` package works under every ``--import-mode``,
including ``importlib``, which puts nothing on ``sys.path``. The fixtures that wrap these helpers
(``profile_file``, ``qualify_pytest``) stay in ``tests/conftest.py``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from pytest_qualify.graders import Verdict
from pytest_qualify.hooks.collection import suites_dir
from pytest_qualify.profiles import builtin_profiles

SMOKE = str(suites_dir() / "test_smoke.py")


def suite(*modules: str) -> list[str]:
    """The protocol suite files of these modules."""
    return [str(suites_dir() / f"test_{m}.py") for m in modules]


def write_profile(
    directory: Path,
    modules: Sequence[str] = ("smoke",),
    *,
    base: str = "small",
    extra_serve: str = "",
    request_s: float | None = None,
    per_1k_prompt_tokens_s: float | None = None,
    lanes: Sequence[tuple[str, int]] | None = None,
    name: str | None = None,
) -> Path:
    """A copy of a built-in profile whose gate needs only ``modules``; optionally other request
    timeouts, other context lanes, or extra ``[serve]`` lines."""
    text = Path(builtin_profiles()[base]).read_text()
    text = text[: text.index("[modules]")] + f"[modules]\nrequired = {json.dumps(list(modules))}\n"
    if request_s is not None:
        text = re.sub(r"(?m)^request_s = .*$", f"request_s = {request_s}", text, count=1)
    if per_1k_prompt_tokens_s is not None:
        text = re.sub(r"(?m)^per_1k_prompt_tokens_s = .*$", f"per_1k_prompt_tokens_s = {per_1k_prompt_tokens_s}", text)
    if lanes is not None:
        # The profile's claims name its lanes: with other lanes they would name none.
        text = re.sub(r"(?ms)^\[claims(\.[^\]]+)?\]\n.*?(?=^\[(?!claims)|\Z)", "", text)
        text = re.sub(r"(\[\[limits\.lanes\]\]\nname = \"[^\"]+\"\nprompt_tokens = \d+\n\n?)+", "", text)
        text = text.replace(
            "[thinking]", "".join(f'[[limits.lanes]]\nname = "{n}"\nprompt_tokens = {t}\n\n' for n, t in lanes) + "[thinking]"
        )
    if extra_serve:
        text = text.replace("[serve]\n", f"[serve]\n{extra_serve}\n", 1)
    path = directory / (name or f"{base}-test.toml")
    path.write_text(text)
    return path


# -- inner pytest runs: one command line, one marker ------------------------------------------------

ROOT = Path(__file__).resolve().parents[1]

# Set by tests/conftest.py for the test being set up (before its fixtures, module-scoped ones
# included): whether it carries the ``e2e`` marker. An inner run in a test without it fails at once,
# so the fast loop (``-m "not e2e and not real_vllm"``) cannot keep one by an oversight.
E2E_ALLOWED = {"current": True}


class InnerRunOutsideE2E(AssertionError):
    pass


def _require_e2e() -> None:
    if not E2E_ALLOWED["current"]:
        raise InnerRunOutsideE2E("an inner pytest run in a test without the e2e marker: mark it "
                                 "@pytest.mark.e2e (or the file, pytestmark = pytest.mark.e2e)")


def pytest_command(*args: str, python: str | Path = sys.executable) -> list[str]:
    """The command line of every inner pytest: this interpreter (or another venv's), ``-m pytest``,
    no cache provider (a run must not write ``.pytest_cache`` into the folder it runs in)."""
    return [str(python), "-m", "pytest", "-p", "no:cacheprovider", *args]


def inner_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The outer environment less what would reach into an inner run's settings (``PYTEST_*``,
    ``QUALIFY_*``, the CI job summary), plus ``env``."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "QUALIFY_", "GITHUB_"))}
    return {**base, **(env or {})}


def run_pytest(*args: str, cwd: Path, env: Mapping[str, str] | None = None, timeout: float = 900,
               python: str | Path = sys.executable) -> subprocess.CompletedProcess[str]:
    """An inner pytest to its end in ``cwd``, its output captured."""
    _require_e2e()
    return subprocess.run(pytest_command(*args, python=python), cwd=cwd, env=inner_env(env), capture_output=True, text=True,
                          timeout=timeout)


def start_pytest(*args: str, cwd: Path, env: Mapping[str, str] | None = None, **popen: Any) -> subprocess.Popen:
    """An inner pytest left running (to be signalled, or run beside another)."""
    _require_e2e()
    return subprocess.Popen(pytest_command(*args), cwd=cwd, env=inner_env(env), **popen)


def pytester_run(pytester: pytest.Pytester, *args: str, timeout: float | None = None) -> pytest.RunResult:
    """An inner pytest in the pytester directory, for tests that read pytester's ``RunResult``."""
    _require_e2e()
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", *args, timeout=timeout)


def junit_failures(junit: Path) -> dict[str, str]:
    """Failed or errored test cases of a JUnit file by name (``test_x[rep1of1-...]``), each with its
    full text: the element text, which pytest never shortens (pytest 9.2 truncates the ``message``
    attribute: ``[truncated; full report in element text]``), after the message."""
    out: dict[str, str] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        for node in (case.find("failure"), case.find("error")):
            if node is not None:
                out[case.get("name", "")] = (node.get("message") or "") + "\n" + (node.text or "")
    return out


class QualifyPytest:
    """pytest with ``--qualify`` in a subprocess (pytester), against the reference server unless
    told otherwise; evidence and JUnit land in the pytester directory."""

    def __init__(self, pytester: pytest.Pytester) -> None:
        self.pytester = pytester
        self.evidence = pytester.path / "ev"
        self.junit = pytester.path / "junit.xml"

    def __call__(
        self,
        *args: str,
        profile: Path | str | None = None,
        modules: Sequence[str] = ("smoke",),
        endpoint: str | None = "reference",
        faults: Sequence[str] = (),
        repeat: int | None = None,
        suites: Sequence[str] = (SMOKE,),
        timeout: float | None = None,
    ) -> pytest.RunResult:
        argv = [f"--qualify={profile or write_profile(self.pytester.path, modules)}",
                "--qualify-evidence", str(self.evidence), f"--junitxml={self.junit}"]
        if endpoint is not None:
            argv += ["--qualify-endpoint", endpoint]
        if repeat is not None:
            argv += ["--repeat", str(repeat)]
        for fault in faults:
            argv += ["--qualify-reference-fault", fault]
        return pytester_run(self.pytester, *argv, *args, *suites, timeout=timeout)

    def run_dir(self) -> Path:
        """The one run folder under the evidence directory."""
        (found,) = [p for p in self.evidence.iterdir() if p.is_dir()]
        return found

    def summary(self) -> dict[str, Any]:
        return json.loads((self.run_dir() / "summary.json").read_text())

    def item_properties(self) -> dict[str, dict[str, str]]:
        """Each protocol item's figures by its test name (``test_x[rep1of1-...]``), as text, from
        summary.json: the figures an xunit2 JUnit file no longer carries as testcase properties."""
        newest = max(p for p in self.evidence.iterdir() if p.is_dir())  # run ids start with the time
        summary = json.loads((newest / "summary.json").read_text())
        return {i["nodeid"].split("::")[-1]: {k: "" if v is None else str(v) for k, v in i["properties"].items()}
                for i in summary["items"]}

    def cases(self) -> dict[str, ET.Element]:
        """pytest's own JUnit test cases by ``classname::name``."""
        root = ET.parse(self.junit).getroot()
        return {f"{c.get('classname')}::{c.get('name')}": c for c in root.iter("testcase")}


# -- the answer-style corpus (tests/graders/test_answer_styles.py, tests/graders/test_answer_styles_structured.py) --


@dataclass(frozen=True)
class Styles:
    """One module's corpus: ``grade`` is the suite's own grading call over one answer."""

    module: str
    grade: Callable[[Any], Verdict]
    correct: Sequence[Any]
    near_misses: Sequence[tuple[Any, str]]  # (answer, what the reason must say)
    notes: dict[str, str] = field(default_factory=dict)

    def label(self, answer: Any) -> str:
        """A test id for one of the corpus's answers."""
        return f"{self.module}:{json.dumps(answer, ensure_ascii=False)[:60]}"

    def assert_accepts(self, answer: Any) -> None:
        verdict = self.grade(answer)
        assert verdict.ok, verdict.reason

    def assert_rejects(self, answer: Any, why: str) -> None:
        """Fails with a reason that says ``why``; a near miss marked as a format failure
        (``why`` starts ``format:``) is one, and a wrong value is never called one."""
        verdict = self.grade(answer)
        assert not verdict.ok, f"accepted: {verdict.reason}"
        assert why in verdict.reason, verdict.reason
        assert verdict.is_format is why.startswith("format:"), verdict.reason


def seal_hand_bundle(run_dir: Path, summary: Mapping[str, Any]) -> None:
    """A hand-made bundle sealed as a run seals its own: the in-toto statement over its files, saying
    the summary's verdict, run id and identity, then ``SHA256SUMS`` over everything."""
    from pytest_qualify.bundle_format.manifest import MANIFEST, STATEMENT, sha256_file
    from pytest_qualify.evidence.bundle import write_manifest

    subjects = [{"name": p.name, "digest": {"sha256": sha256_file(p)}} for p in sorted(run_dir.iterdir())
                if p.is_file() and p.name not in (MANIFEST, STATEMENT)]
    deployment = (summary.get("profile") or {}).get("deployment") or {}
    predicate = {
        "verdict": {"result": (summary.get("verdict") or {}).get("result")},
        "run": {"id": (summary.get("run") or {}).get("id")},
        "deployment": {"model": deployment.get("model"), "served_name": deployment.get("served_name"),
                       "engine_version": (summary.get("target") or {}).get("engine_version"),
                       "simulated": summary.get("simulated")},
    }
    statement = {"_type": "https://in-toto.io/Statement/v1", "subject": subjects,
                 "predicateType": "https://pytest-qualify/attestations/qualification/v1", "predicate": predicate}
    (run_dir / STATEMENT).write_text(json.dumps(statement, indent=2) + "\n")
    write_manifest(run_dir)


def wait_for_health(url: str, ready_s: float = 20.0) -> None:
    """Return once ``url``'s /health answers 200, or after ``ready_s`` (the test's own request then fails)."""
    import time

    import httpx

    deadline = time.monotonic() + ready_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.1)


def reference_server(profile: str | Path, *, ready_s: float = 20.0) -> Iterator[str]:
    """A reference server for ``profile`` in a process of its own, as an attached endpoint would be:
    yields its URL once /health answers, and stops it after. Use with ``yield from`` in a fixture,
    or as ``for url in reference_server(...)``."""
    from pytest_qualify.server.lifecycle import free_port

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "pytest_qualify.reference", "--port", str(port),
                             "--profile", str(profile)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for_health(url, ready_s)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)
