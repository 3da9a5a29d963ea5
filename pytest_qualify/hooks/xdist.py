"""The xdist hand-over: the controller starts the one server and hands its URL, run id and
identity to every worker; workers send back what only they saw (their selection counts).
A death found by one worker reaches the others through ``watch.DEATH_FILE`` in the run folder."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_qualify.hooks import state_of
from pytest_qualify.run import RunState


def worker_input(config: pytest.Config) -> dict[str, Any] | None:
    """What the controller handed this xdist worker, or None on the controller."""
    return getattr(config, "workerinput", None)


def adopt_controller_server(state: RunState, workerinput: dict[str, Any]) -> None:
    """On a worker: the controller's server, as if this process had started it."""
    state.base_url = workerinput["qualify_base_url"]
    state.startup_error = workerinput.get("qualify_startup_error")
    state.server_info = dict(workerinput.get("qualify_server_info") or {})


def send_to_controller(config: pytest.Config, key: str, value: Any) -> None:
    """On a worker: a value the controller reads when the worker goes down."""
    output = getattr(config, "workeroutput", None)
    if output is not None:
        output[key] = value


class XdistHandover:
    """Registered on the controller; its hooks are xdist's and are called only under ``-n``."""

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        """Hand the controller's one server to each worker."""
        state = state_of(node.config)
        if state is None:
            return
        node.workerinput["qualify_run_id"] = state.run_id
        node.workerinput["qualify_base_url"] = state.base_url
        node.workerinput["qualify_startup_error"] = state.startup_error
        node.workerinput["qualify_server_info"] = state.server_info

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        """A worker's selection counts come back with its output; every worker collected the same
        items, so the largest count is the run's."""
        state = state_of(node.config)
        output = getattr(node, "workeroutput", None) or {}
        if state is not None and "qualify_user_deselected" in output:
            state.user_deselected = max(state.user_deselected, int(output["qualify_user_deselected"]))
