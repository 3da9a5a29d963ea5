"""The pytest side of pytest-qualify: one module per concern, each a plugin object that
``plugin.py`` registers. Everything that imports pytest lives here (and ``plugin.py``, and
``checks.py`` for the suites); the rooms they drive do not.

The run's state is kept in ``config.stash`` under :data:`STATE_KEY` (``run.RunState``).
"""

from __future__ import annotations

import pytest

from pytest_qualify.run import RunState

STATE_KEY = pytest.StashKey[RunState]()


def state_of(config: pytest.Config) -> RunState | None:
    """The run's state, or None without ``--qualify``."""
    return config.stash.get(STATE_KEY, None)
