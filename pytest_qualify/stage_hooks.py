"""pytest-facing part of the promotion stages: the stage and promoted run in ``config.stash``, the
header line, and the served identity read at the start and at the end of the run. The plugin's
hooks call these; the logic is in ``stages.py``, ``identity.py``, ``promotion.py`` and
``stage_run.py`` (no pytest there)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from pytest_qualify.identity import Identity, read_identity
from pytest_qualify.stage_run import StageRun, StageUsageError, plan

STAGE_KEY = pytest.StashKey[StageRun]()


def stage_run_of(config: pytest.Config) -> StageRun | None:
    return config.stash.get(STAGE_KEY, None)


def configure(config: pytest.Config, state: Any) -> StageRun:
    """The run's stage (and, on the controller, the promoted run): a bad one is a usage error
    before any server starts."""
    try:
        run = plan(state.profile, state.settings.stage, state.settings.promoted,
                   simulated=state.settings.mode == "reference", load=not state.is_worker)
    except StageUsageError as exc:
        raise pytest.UsageError(str(exc)) from None
    config.stash[STAGE_KEY] = run
    return run


def header_line(run: StageRun) -> str:
    stage = run.stage
    text = f"qualify: stage {stage.name} — {stage.title}: {', '.join(stage.modules)}"
    if "context" in stage.modules:
        text += f"; context lanes {', '.join(stage.lanes)}"
    if not stage.qualifies:
        text += "; not a qualification"
    if run.promoted is not None:
        text += f"; held to promoted run {run.promoted.run_id}"
    return text


def identity_from_info(served_name: str, info: dict[str, Any]) -> Identity:
    """The start reading from what the session start already asked the server."""
    return read_identity(served_name, info.get("models"), info.get("version"),
                         models_error=info.get("models_error"), version_error=info.get("version_error"))


def read_live(served_name: str, make_client: Callable[[], Any]) -> Identity:
    """A fresh reading of ``/v1/models`` and ``/version`` (the session's client is closed by now)."""
    models = version = models_error = version_error = None
    try:
        client = make_client()
    except Exception as exc:  # noqa: BLE001 - the reason is the reading's error
        return read_identity(served_name, None, None, models_error=f"{type(exc).__name__}: {exc}")
    try:
        try:
            version = client.version()
        except Exception as exc:  # noqa: BLE001
            version_error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        try:
            models = client.models()
        except Exception as exc:  # noqa: BLE001
            models_error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    finally:
        client.close()
    return read_identity(served_name, models, version, models_error=models_error, version_error=version_error)
