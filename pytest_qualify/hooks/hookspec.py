"""Hooks a user plugin or conftest.py may implement: be told when the target is up, add fields to
``summary.json``, and be told when the summary is written and the verdict reached (to notify a
channel, archive the bundle, ...). All are called on the controller only, once per run."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_qualify.gate.decide import GateVerdict


@pytest.hookspec
def pytest_qualify_target_started(config: pytest.Config, base_url: str, server_info: dict[str, Any]) -> None:
    """The target answers: ``base_url`` and what the server says it is (version, models, launch
    command). Not called when startup failed or under ``--collect-only``."""


@pytest.hookspec
def pytest_qualify_summary(config: pytest.Config, summary: dict[str, Any]) -> dict[str, Any] | None:
    """Return fields to add to ``summary.json`` (under ``extra``) before it is written; the
    summary itself is for reading. A hook that raises costs the run its evidence, so the gate fails."""


@pytest.hookspec
def pytest_qualify_summary_written(config: pytest.Config, summary: dict[str, Any], bundle_dir: str) -> None:
    """``summary.json``, ``junit.xml`` and ``report.md`` are in ``bundle_dir`` (``SHA256SUMS``
    follows after the server has stopped)."""


@pytest.hookspec
def pytest_qualify_verdict_reached(config: pytest.Config, verdict: GateVerdict) -> None:
    """The gate's final verdict (``passed``, ``reasons``, ``failures``)."""
