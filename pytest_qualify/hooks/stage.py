"""The promotion stage's pytest side: the stage (and the promoted run) resolved at configure, the
header line, and the served identity read at the start and again at the end of the run. The steps
(``steps.py``) and the collection call these; the logic is in ``promotion/``: ``stages.py``,
``identity.py``, ``promoted.py`` and ``stage_run.py`` (no pytest there)."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_qualify.promotion.identity import Identity, read_identity
from pytest_qualify.run import RunState
from pytest_qualify.promotion.stage_run import StageRun, StageUsageError, plan
from pytest_qualify.settings import Mode


def stage_of(state: RunState) -> StageRun:
    """The run's stage; ``configure`` sets it with the run state, on the controller and on workers."""
    assert state.stage_run is not None, "hooks.stage.configure runs with the run state"
    return state.stage_run


def configure(state: RunState) -> StageRun:
    """The run's stage (and, on the controller, the promoted run): a bad one is a usage error
    before any server starts."""
    try:
        run = plan(state.profile, state.settings.stage, state.settings.promoted,
                   simulated=state.settings.mode == Mode.REFERENCE, load=not state.is_worker,
                   key=state.settings.promoted_key, require_signature=state.profile.require_signature)
    except StageUsageError as exc:
        raise pytest.UsageError(str(exc)) from None
    state.stage_run = run
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


def read_start(state: RunState) -> None:
    """The start reading: what the server session already asked the server as it came up (called
    once it answered, so there is always a reading)."""
    info = state.server_info
    if info is None:
        return
    stage_of(state).start = read_identity(
        state.profile.deployment.served_name, info.models, info.version,
        models_error=info.models_error, version_error=info.version_error)


def end_problems(state: RunState, died: str | None) -> list[str]:
    """The end reading (a fresh client: the session's is closed by now), held to the start and to
    the promoted run. Nothing to read when the server never started or is gone: that is the reason."""
    run = stage_of(state)
    if state.startup_error or state.dead or died or run.start is None:
        return []
    if state.refused_items():
        return []  # the key was refused during the run: that is the (unjudged) reason, not the identity
    run.end = read_live(state)
    return run.problems_at_end()


# Two small GETs: a server that does not answer them in this time has no identity to read (and a
# hung one must not hold the end of the run for a whole request timeout).
IDENTITY_READ_TIMEOUT_S = 15.0


def read_live(state: RunState) -> Identity:
    from pytest_qualify.hooks.server_session import make_client

    served_name = state.profile.deployment.served_name
    models: Any = None
    version = models_error = version_error = None
    try:
        client = make_client(state, timeout_s=IDENTITY_READ_TIMEOUT_S)
    except Exception as exc:  # noqa: BLE001 - the reason is the reading's error
        return read_identity(served_name, None, None, models_error=f"{type(exc).__name__}: {exc}")
    try:
        try:
            version = client.version()
        except Exception as exc:  # noqa: BLE001
            version_error = _first_line(exc)
        try:
            models = client.models()
        except Exception as exc:  # noqa: BLE001
            models_error = _first_line(exc)
    finally:
        client.close()
    return read_identity(served_name, models, version, models_error=models_error, version_error=version_error)


def _first_line(exc: Exception) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"
