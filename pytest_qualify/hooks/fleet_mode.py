"""The fleet's pytest side: ``pytest --qualify=PROFILE --qualify-fleet`` judges every replica of the
profile's ``[fleet]`` instead of one endpoint (from ``pytest_cmdline_main``: no server of its own, no
collection), with the run's own settings: its stage, promoted run, API key and evidence folder;
``--qualify-endpoint URL`` names the router, ``reference`` starts the SIMULATED fleet. The logic is in
the ``fleet/`` room (``python -m pytest_qualify fleet``, no pytest there)."""

from __future__ import annotations

import time

import pytest

from pytest_qualify.settings import Mode, Settings


def fleet_argv(settings: Settings, out_name: str) -> list[str]:
    """The ``fleet`` command's arguments for these settings."""
    argv = ["--qualify", settings.profile or "", "--stage", settings.stage, "--api-key-env", settings.api_key_env,
            "--out", str(settings.evidence_dir / out_name)]
    if settings.promoted:
        argv += ["--promoted", settings.promoted]
    if settings.mode == Mode.REFERENCE:
        argv += ["--endpoint", "reference"]
    elif settings.mode == Mode.ATTACH:
        argv += ["--router", settings.endpoint or ""]
    return argv


def run_fleet(config: pytest.Config, settings: Settings) -> int:
    """The fleet's run (``fleet/cli.py``); its exit status. Plain output: the terminal reporter does
    not exist yet."""
    from pytest_qualify.fleet.cli import run_argv

    return run_argv(fleet_argv(settings, time.strftime("fleet-%Y%m%dT%H%M%SZ", time.gmtime())))
