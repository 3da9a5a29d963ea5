"""What every test file shares: a profile builder, a pytester runner for ``--qualify`` runs, and
one Hypothesis settings profile.

Test modules use the fixtures (``profile_file``, ``qualify_pytest``); a helper that runs outside
a test takes :func:`write_profile` directly.
"""

from __future__ import annotations

import json
import os
import re
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

import real_vllm
from pytest_qualify.hooks.collection import suites_dir
from pytest_qualify.profiles import builtin_profiles

pytest_plugins = ["pytester"]

# One profile for every property test: no per-example deadline, because the graders' speed is not
# what they test and a shared 2-core CI machine makes wall-clock limits flaky.
settings.register_profile("pytest-qualify", deadline=None)
settings.load_profile("pytest-qualify")

SMOKE = str(suites_dir() / "test_smoke.py")
_LAUNCH_CHECK = pytest.StashKey[str]()


def pytest_configure(config: pytest.Config) -> None:
    # The controller names the session once; xdist workers inherit the variable, so the launch log
    # lines of every process of this session carry the same name.
    os.environ.setdefault(real_vllm.SESSION_ENV, uuid.uuid4().hex)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Proof that real vLLM was launched one at a time: the launch log's lines of this session, read
    back on the controller once every worker is done; an overlap fails the session."""
    real_vllm.release_ended()
    if hasattr(session.config, "workerinput"):
        return
    launches = real_vllm.read_launches(os.environ[real_vllm.SESSION_ENV])
    if not launches:
        return
    bad = real_vllm.overlapping(launches)
    if bad:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        pairs = "; ".join(f"{a['label']} [{a['start_s']:.1f}, {a['end_s']:.1f}] and {b['label']} "
                          f"[{b['start_s']:.1f}, {b['end_s']:.1f}]" for a, b in bad)
        session.config.stash[_LAUNCH_CHECK] = f"real vLLM launches OVERLAPPED ({len(bad)} pair(s)): {pairs}"
    else:
        busy = sum(f["end_s"] - f["start_s"] for f in launches)
        session.config.stash[_LAUNCH_CHECK] = (
            f"real vLLM launches: {len(launches)}, one at a time (none overlapped; {busy:.0f} s of vLLM; "
            f"log {real_vllm.launch_log_path()})")


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    line = config.stash.get(_LAUNCH_CHECK, None)
    if line:
        terminalreporter.write_line(line, red="OVERLAPPED" in line, bold=True)


@pytest.fixture(autouse=True)
def _no_ci_job_summary(monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs inside these tests must not append to the CI job's own summary page (GitHub Actions
    sets GITHUB_STEP_SUMMARY for every step); a test that wants one sets its own file."""
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)


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
        text = re.sub(r"(\[\[limits\.lanes\]\]\nname = \"[^\"]+\"\nprompt_tokens = \d+\n\n?)+", "", text)
        text = text.replace(
            "[thinking]", "".join(f'[[limits.lanes]]\nname = "{n}"\nprompt_tokens = {t}\n\n' for n, t in lanes) + "[thinking]"
        )
    if extra_serve:
        text = text.replace("[serve]\n", f"[serve]\n{extra_serve}\n", 1)
    path = directory / (name or f"{base}-test.toml")
    path.write_text(text)
    return path


@pytest.fixture
def profile_file(tmp_path: Path) -> Callable[..., Path]:
    """``profile_file(modules=("smoke",), **edits)``: :func:`write_profile` into this test's tmp_path."""

    def build(modules: Sequence[str] = ("smoke",), **edits: Any) -> Path:
        return write_profile(tmp_path, modules, **edits)

    return build


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
                "--qualify-evidence", str(self.evidence), f"--junitxml={self.junit}", "-p", "no:cacheprovider"]
        if endpoint is not None:
            argv += ["--qualify-endpoint", endpoint]
        if repeat is not None:
            argv += ["--repeat", str(repeat)]
        for fault in faults:
            argv += ["--qualify-reference-fault", fault]
        return self.pytester.runpytest_subprocess(*argv, *args, *suites, timeout=timeout)

    def run_dir(self) -> Path:
        """The one run folder under the evidence directory."""
        (found,) = [p for p in self.evidence.iterdir() if p.is_dir()]
        return found

    def summary(self) -> dict[str, Any]:
        return json.loads((self.run_dir() / "summary.json").read_text())

    def cases(self) -> dict[str, ET.Element]:
        """pytest's own JUnit test cases by ``classname::name``."""
        root = ET.parse(self.junit).getroot()
        return {f"{c.get('classname')}::{c.get('name')}": c for c in root.iter("testcase")}


@pytest.fixture
def qualify_pytest(pytester: pytest.Pytester) -> QualifyPytest:
    return QualifyPytest(pytester)
