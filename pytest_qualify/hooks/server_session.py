"""The session's one server, on the controller: local checks before anything starts, the launch
(or attach) with progress lines, what the server says it is, and the stop. The engine is
``target.py`` over ``lifecycle.py`` (no pytest there)."""

from __future__ import annotations

import signal
from types import FrameType
from typing import TYPE_CHECKING, Any

import pytest

from pytest_qualify.run import RunState
from pytest_qualify.settings import Mode

if TYPE_CHECKING:
    from pytest_qualify.client.endpoint import QualifyClient
    from pytest_qualify.server.info import ServerInfo, Stop


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


def first_step(state: RunState) -> Stop | None:
    """The run's first step (``server/info.py`` ``first_step``): the :class:`Stop` when the run must
    stop, None to go on; the profile's declared fields go to the stage run."""
    from pytest_qualify.server.info import ServerInfo, first_step as judge_first_step

    target = state.target
    launch_argv = target.process.spec.argv if (
        state.settings.mode == Mode.LAUNCH and target is not None and target.process is not None) else None
    # A server that never answered said nothing (the startup error is the step's reason).
    info = state.server_info or ServerInfo.unanswered(state.settings.mode)
    stop, declared = judge_first_step(info, state.profile, mode=state.settings.mode,
                                      startup_error=state.startup_error, api_key_env=state.settings.api_key_env,
                                      launch_argv=launch_argv)
    if declared is not None and state.stage_run is not None:
        state.stage_run.declared = declared
    return stop


def preflight(state: RunState, collect_only: bool = False) -> None:
    """Usage errors known before collection (on the controller, at configure): the target as
    configured (a taken port, a serve command that does not exist, an attach-only profile in launch
    mode, faults where no reference server runs), and every reference fault with its argument
    against the run's profile, stage and repetitions."""
    from pytest_qualify.server.target import TargetError, preflight as target_preflight

    settings = state.settings
    try:
        if not collect_only:  # --collect-only starts nothing
            target_preflight(state.profile, settings)
    except TargetError as exc:
        raise pytest.UsageError(str(exc)) from None
    if not settings.reference_faults:
        return
    from pytest_qualify.reference.faults import FaultError, check_for_run

    stage = state.stage_run.stage if state.stage_run is not None else None
    lanes = state.profile.limits.lanes
    try:
        check_for_run(settings.reference_faults,
                      modules=stage.modules if stage is not None else state.profile.required_modules,
                      lanes=stage.lanes if stage is not None else [lane.name for lane in lanes],
                      repeat=settings.repeat, where="--qualify-reference-fault",
                      default_lane=max(lanes, key=lambda lane: lane.prompt_tokens).name if lanes else None,
                      load_levels=state.profile.load.levels if state.profile.load is not None else ())
    except FaultError as exc:
        raise pytest.UsageError(str(exc)) from None


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
        from pytest_qualify.client.endpoint import preload
        from pytest_qualify.server.lifecycle import StartupError
        from pytest_qualify.server.target import TargetError, api_key_from_env, start_target

        state = self.state
        preload()  # the client's imports while the server starts
        try:
            # start_target stops its own process when interrupted (Ctrl-C or SIGTERM during startup).
            state.target = start_target(
                state.profile, state.settings, state.run_dir, api_key_from_env(state.settings), self.progress
            )
            state.base_url = state.target.base_url
            state.server_info = self.server_info()
        except (StartupError, TargetError) as exc:
            state.startup_error = str(exc)
            if state.settings.mode == Mode.ATTACH:
                return False  # nothing was started: the first step says it in one line
            self.progress("server startup FAILED; every protocol test will fail with this report:")
            for line in str(exc).splitlines():
                self.progress(line)
            return False
        if state.server_info.simulated and state.settings.mode != Mode.REFERENCE:
            self.progress("the endpoint declares itself SIMULATED (its /version or /v1/models): this run is SIMULATED "
                          "and can never back a promotion")
        state.serving_facts = self.serving_facts()
        from pytest_qualify.server.facts import header_lines

        for line in header_lines(state.serving_facts):
            self.progress(line)
        return True

    def serving_facts(self) -> dict[str, Any]:
        """The engine's own facts, read once the server is ready: its log (launch and reference) and
        one ``/metrics`` scrape; attach mode sees only the scrape."""
        from pathlib import Path

        from pytest_qualify.server.facts import serving_facts

        state = self.state
        target = state.target
        process = target.process if target is not None else None
        log_text = None
        if process is not None:
            try:
                log_text = Path(process.spec.log_path).read_text(encoding="utf-8", errors="replace")
            except OSError:
                log_text = None
        client = make_client(state)
        try:
            metrics_text = client.metrics_text()
        except Exception:  # noqa: BLE001 - a server without /metrics shows fewer facts, each said so
            metrics_text = None
        finally:
            client.close()
        return serving_facts(mode=state.settings.mode, simulated=state.simulated,
                             engine_version=(state.server_info.version if state.server_info else None) or None,
                             window_tokens=state.profile.limits.window_tokens, log_text=log_text,
                             metrics_text=metrics_text, ready_s=process.ready_s if process is not None else None)

    def server_info(self) -> ServerInfo:
        """What the server says it is (``server/info.py``), kept on the run state (the xdist
        hand-over carries its ``as_dict``); checked by the first step (:func:`first_step`) and the
        smoke module."""
        from pytest_qualify.server.info import read_server_info

        client = make_client(self.state)
        try:
            return read_server_info(client, self.state.settings.mode, self.state.target)
        finally:
            client.close()

    def begin_stop(self) -> None:
        """The run has read all it reads from the server: let it shut down while the bundle is written."""
        if self.state.target is None:
            return
        try:
            self.state.target.begin_stop()
        except KeyboardInterrupt:
            pass  # stop() at unconfigure still stops the whole group

    def stop(self) -> None:
        if self.state.target is None:
            return
        try:
            self.state.target.stop()
        except KeyboardInterrupt:
            # A second Ctrl-C during teardown: stop() killed the whole group before re-raising;
            # the run is already recorded as interrupted.
            pass
