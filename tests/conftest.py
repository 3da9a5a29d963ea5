"""The tests' pytest wiring: the fixtures over the shared helpers (``profile_file``,
``qualify_pytest``; the helpers themselves are in :mod:`tests.helpers`, which test files import),
one Hypothesis settings profile, the pytester plugin, and the end-of-session check that real vLLM
was launched one at a time.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from . import real_vllm
from . import helpers
from .helpers import QualifyPytest, write_profile

pytest_plugins = ["pytester"]

# One profile for every property test: no per-example deadline, because the graders' speed is not
# what they test and a shared 2-core CI machine makes wall-clock limits flaky.
settings.register_profile("pytest-qualify", deadline=None)
settings.load_profile("pytest-qualify")

_LAUNCH_CHECK = pytest.StashKey[str]()


def pytest_configure(config: pytest.Config) -> None:
    # About 150 tests run pytest again in a subprocess (a qualification, a documented command). A
    # machine that sets PYTHONDONTWRITEBYTECODE (CI images often do) makes each of them compile the
    # plugin and rewrite the suites' asserts anew: about 1.5 s of CPU a run, a third of a smoke
    # run. The subprocesses may cache bytecode (``__pycache__`` is ignored by git); this process
    # and what it tests are unchanged.
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
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


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Marker ``e2e`` on every test that asks for ``pytester`` (its only use here is an inner run);
    the others that run one say so themselves, and :func:`pytest_runtest_setup` holds them to it."""
    for item in items:
        if "pytester" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.e2e)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Before the test's fixtures (module-scoped ones too): whether it may start an inner pytest
    (:func:`tests.helpers.run_pytest` and the others fail at once in a test without ``e2e``)."""
    helpers.E2E_ALLOWED["current"] = item.get_closest_marker("e2e") is not None


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    line = config.stash.get(_LAUNCH_CHECK, None)
    if line:
        terminalreporter.write_line(line, red="OVERLAPPED" in line, bold=True)


@pytest.fixture(autouse=True)
def _no_ci_job_summary(monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs inside these tests must not append to the CI job's own summary page (GitHub Actions
    sets GITHUB_STEP_SUMMARY for every step); a test that wants one sets its own file."""
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)


@pytest.fixture
def profile_file(tmp_path: Path) -> Callable[..., Path]:
    """``profile_file(modules=("smoke",), **edits)``: :func:`write_profile` into this test's tmp_path."""

    def build(modules: Sequence[str] = ("smoke",), **edits: Any) -> Path:
        return write_profile(tmp_path, modules, **edits)

    return build


@pytest.fixture
def qualify_pytest(pytester: pytest.Pytester) -> QualifyPytest:
    return QualifyPytest(pytester)
