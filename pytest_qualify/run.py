"""The run's shared state, kept in ``config.stash``: what every pytest-facing room reads."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from pytest_qualify import gate as gate_mod
from pytest_qualify.profiles import Profile
from pytest_qualify.settings import Settings

MODULE_KEY = "qualify_module"


@dataclass
class RunState:
    """Everything the plugin knows about this run; kept in ``config.stash``."""

    settings: Settings
    profile: Profile
    run_id: str
    run_dir: Path
    is_worker: bool
    base_url: str | None = None
    target: Any = None  # pytest_qualify.target.Target on the controller
    startup_error: str | None = None
    dead: str | None = None
    server_info: dict[str, Any] = field(default_factory=dict)
    results: dict[str, gate_mod.ItemResult] = field(default_factory=dict)
    verdict: gate_mod.GateVerdict | None = None
    interrupted: str | None = None
    deselected_modules: set[str] = field(default_factory=set)
    # Protocol items of required modules that a selection (-k, -m, --deselect, --lf, node ids)
    # left out: a partial protocol can never be a PASS.
    user_deselected: int = 0
    partial_selection: str | None = None
    client: Any = None


STATE_KEY = pytest.StashKey[RunState]()


def state_of(config: pytest.Config) -> RunState | None:
    return config.stash.get(STATE_KEY, None)


def module_of(item_or_def: Any) -> str | None:
    marker = item_or_def.get_closest_marker(MODULE_KEY)
    return marker.args[0] if marker and marker.args else None


def secrets_of(state: RunState) -> tuple[str, ...]:
    # The value of the API key variable must reach no artifact, whatever the variable is called.
    value = os.environ.get(state.settings.api_key_env)
    return (value,) if value else ()
