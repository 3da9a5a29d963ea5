"""The xdist hand-over: the controller starts the one server once the first worker has collected
(so a usage error found at collection starts nothing) and hands its URL, identity and any stop to
every worker through ``server-handover.json`` in the run folder, written before a single item is
scheduled; workers read it before their first protocol item and send back what only they saw (their
selection counts, a usage error found at their collection). A death found by one worker reaches
the others through ``DEATH_FILE`` (``server/death.py``) in the run folder."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pytest_qualify.hooks import state_of
from pytest_qualify.run import RunState
from pytest_qualify.server.info import ServerInfo, Stop

HANDOVER_FILE = "server-handover.json"
# A worker's usage error found at the end of its collection (a waiver naming a hard module ...):
# the controller raises it before it starts anything.
USAGE_ERROR_FILE = "collection-usage-error.txt"


def worker_input(config: pytest.Config) -> dict[str, Any] | None:
    """What the controller handed this xdist worker, or None on the controller."""
    return getattr(config, "workerinput", None)


def is_xdist_controller(config: pytest.Config) -> bool:
    """Under ``-n N`` the controller collects nothing: its workers do, and it hears of it."""
    return config.pluginmanager.get_plugin("dsession") is not None


def write_handover(state: RunState) -> None:
    """On the controller, once the server is up (or could not be): what every worker adopts (the
    server's reading and the first step's stop as their ``as_dict``)."""
    facts = {
        "base_url": state.base_url,
        "startup_error": state.startup_error,
        "server_info": state.server_info.as_dict() if state.server_info is not None else None,
        "stop": state.stop.as_dict() if state.stop is not None else None,
    }
    (state.run_dir / HANDOVER_FILE).write_text(json.dumps(facts, default=str), encoding="utf-8")


def adopt_handover(state: RunState) -> None:
    """On a worker, before its first protocol item: the controller's server, as if this process
    had started it. Items are scheduled only after the file is written."""
    if state.handover_adopted:
        return
    state.handover_adopted = True
    try:
        facts = json.loads((state.run_dir / HANDOVER_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        state.startup_error = state.startup_error or "the controller handed over no server (server-handover.json)"
        return
    state.base_url = facts.get("base_url")
    state.startup_error = facts.get("startup_error")
    state.server_info = ServerInfo.of(facts["server_info"]) if facts.get("server_info") else None
    state.stop = Stop.of(facts["stop"]) if facts.get("stop") else None


def send_to_controller(config: pytest.Config, key: str, value: Any) -> None:
    """On a worker: a value the controller reads when the worker goes down."""
    output = getattr(config, "workeroutput", None)
    if output is not None:
        output[key] = value


def report_usage_error(state: RunState, message: str) -> None:
    """On a worker: a usage error its collection found, for the controller to raise."""
    try:
        (state.run_dir / USAGE_ERROR_FILE).write_text(message, encoding="utf-8")
    except OSError:
        pass


def workers_usage_error(state: RunState) -> str | None:
    try:
        return (state.run_dir / USAGE_ERROR_FILE).read_text(encoding="utf-8") or None
    except OSError:
        return None


class XdistHandover:
    """Registered on the controller; its hooks are xdist's and are called only under ``-n``."""

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        """Each worker shares the controller's run (its id, so its folder)."""
        state = state_of(node.config)
        if state is None:
            return
        node.workerinput["qualify_run_id"] = state.run_id

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        """A worker's selection counts come back with its output; every worker collected the same
        items, so the largest count is the run's."""
        state = state_of(node.config)
        output = getattr(node, "workeroutput", None) or {}
        if state is not None and "qualify_user_deselected" in output:
            state.user_deselected = max(state.user_deselected, int(output["qualify_user_deselected"]))
