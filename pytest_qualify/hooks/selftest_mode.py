"""The gate self-test's pytest side: ``--qualify-selftest`` runs it instead of a qualification
(from ``pytest_cmdline_main``: no server of its own, no collection), and
``--qualify-require-selftest`` finds the self-test a qualification needs before any server starts
and names it in ``summary.json`` (under ``extra``) and ``report.md``. The logic is in the
``selftest/`` room (no pytest there)."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_qualify.run import RunState
from pytest_qualify.settings import SelftestRequirement, Settings


def run_selftest(config: pytest.Config, settings: Settings) -> int:
    """Run the self-test (``selftest/runner.py``); its exit status. Plain output: the terminal
    reporter does not exist yet."""
    from pytest_qualify.hooks.collection import suites_dir
    from pytest_qualify.selftest.engine import SelftestError
    from pytest_qualify.selftest.runner import run_selftest as run

    try:
        return run(settings, suites_dir(), lambda line: print(line, flush=True))
    except SelftestError as exc:
        raise pytest.UsageError(str(exc)) from None


class RequiredSelftest:
    """The self-test a qualification requires: found at configure (a usage error when there is
    none, so no server starts and no GPU time is spent on a run that could not be signed), named
    in the header, ``summary.json`` (``extra.selftest``) and ``report.md``."""

    def __init__(self, accepted: Any) -> None:
        self.accepted = accepted

    @classmethod
    def find(cls, state: RunState) -> "RequiredSelftest":
        from pytest_qualify.selftest import engine
        from pytest_qualify.evidence.summary import tool_version

        settings = state.settings
        assert state.stage_run is not None
        try:
            req = SelftestRequirement.parse(settings.require_selftest or "")
            accepted = engine.find(req, settings.evidence_dir, tool_version(), state.stage_run.stage.modules)
        except ValueError as exc:  # a malformed requirement or a SelftestError
            raise pytest.UsageError(f"--qualify-require-selftest: {exc}") from None
        return cls(accepted)

    def header_line(self) -> str:
        a = self.accepted
        return (f"qualify: gate self-test {a.run_id} (pytest-qualify {a.plugin_version}, profile {a.profile}, "
                f"{a.age_days:.1f} days old) required and found")

    def pytest_qualify_summary(self, config: pytest.Config, summary: dict[str, Any]) -> dict[str, Any]:
        return {"selftest": self.accepted.as_dict()}
