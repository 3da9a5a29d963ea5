"""The session's one server, on the controller: local checks before anything starts, the launch
(or attach) with progress lines, what the server says it is, and the stop. The engine is
``target.py`` over ``lifecycle.py`` (no pytest there)."""

from __future__ import annotations

import signal
from types import FrameType
from typing import TYPE_CHECKING, Any

import pytest

from pytest_qualify.run import RunState
from pytest_qualify.settings import REFERENCE

if TYPE_CHECKING:
    from pytest_qualify.client.endpoint import QualifyClient


def make_client(state: RunState, timeout_s: float | None = None) -> QualifyClient:
    """The one way the plugin builds a client on the run's endpoint: its served name, API key and
    the profile's timeouts (``timeout_s`` caps a request's limit lower, as the identity reading
    does). Imports openai: call lazily."""
    from pytest_qualify.client.endpoint import QualifyClient
    from pytest_qualify.server.target import api_key_from_env

    request_s = state.profile.timeouts.request_s
    return QualifyClient(
        state.base_url or "", api_key_from_env(state.settings),
        state.profile.deployment.served_name, request_s if timeout_s is None else min(timeout_s, request_s),
        timeouts=state.profile.timeouts, api_key_env=state.settings.api_key_env,
    )


def install_sigterm_handler() -> None:
    # SIGTERM (a cancelled CI job) and SIGHUP (a closed terminal or SSH session) to pytest become an
    # interruption, so teardown stops the server's whole process group as Ctrl-C does. A signal
    # someone chose to ignore or handle stays as it is.
    def handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(f"received {signal.Signals(signum).name}")

    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) in (signal.SIG_DFL, None):
            signal.signal(sig, handler)


class ServerSession:
    """Starts and stops the run's one server; ``steps.RunSteps`` decides when."""

    def __init__(self, config: pytest.Config, state: RunState) -> None:
        self.config = config
        self.state = state

    def progress(self, line: str) -> None:
        tr = self.config.pluginmanager.get_plugin("terminalreporter")
        if tr is not None:
            tr.write_line(f"qualify: {line}")

    def start(self) -> bool:
        """Launch or attach and wait until ready; True when the server answers. A local problem
        (a taken port, a serve command that does not exist) is a usage error, raised before
        anything starts; a failed start is recorded and fails every protocol test."""
        from pytest_qualify.server.lifecycle import StartupError
        from pytest_qualify.server.target import TargetError, api_key_from_env, preflight, start_target

        state = self.state
        try:
            preflight(state.profile, state.settings)
        except TargetError as exc:
            raise pytest.UsageError(str(exc)) from None
        try:
            # start_target stops its own process when interrupted (Ctrl-C or SIGTERM during startup).
            state.target = start_target(
                state.profile, state.settings, state.run_dir, api_key_from_env(state.settings), self.progress
            )
            state.base_url = state.target.base_url
            state.server_info = self.server_info()
        except (StartupError, TargetError) as exc:
            state.startup_error = str(exc)
            self.progress("server startup FAILED; every protocol test will fail with this report:")
            for line in str(exc).splitlines():
                self.progress(line)
            return False
        rejected = state.server_info.get("models_error", "")
        if "rejected the API key" in rejected:
            self.progress(f"WARNING: {rejected}")
        return True

    def server_info(self) -> dict[str, Any]:
        """What the server says it is; recorded for the report, checked by the smoke module."""
        state = self.state
        client = make_client(state)
        info: dict[str, Any] = {"mode": state.settings.mode, "simulated": state.settings.mode == REFERENCE}
        try:
            info["version"] = client.version()
        except Exception as exc:  # recorded, judged by the smoke module
            info["version_error"] = str(exc)
        try:
            info["models"] = client.models()
        except Exception as exc:
            info["models_error"] = str(exc)
        if state.target is not None:
            info["launch_command"] = state.target.display_command
            if state.target.process is not None:
                # xdist workers use these to tell a dead server from a failing request on their own.
                info["server_pid"] = state.target.process.pid
                info["server_log"] = str(state.target.process.spec.log_path)
        client.close()
        return info

    def stop(self) -> None:
        if self.state.target is None:
            return
        try:
            self.state.target.stop()
        except KeyboardInterrupt:
            # A second Ctrl-C during teardown: stop() killed the whole group before re-raising;
            # the run is already recorded as interrupted.
            pass
