"""The session's one server, on the controller: local checks before anything starts, the launch
(or attach) with progress lines, what the server says it is, and the stop. The engine is
``target.py`` over ``lifecycle.py`` (no pytest there)."""

from __future__ import annotations

import signal
from types import FrameType
from typing import TYPE_CHECKING, Any

import pytest

from pytest_qualify.client.errors import ErrorKind, kind_of
from pytest_qualify.run import RunState
from pytest_qualify.settings import Mode

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


def first_step(state: RunState) -> tuple[str, bool, tuple[str, ...]] | None:
    """The run's first step, once the server answers: health, authentication and identity, read
    from what the server session asked as it came up. ``(reason, judged, modules still run)`` when
    the run must stop: not judged (a rejected key, not an OpenAI-compatible endpoint, no answer) is
    INCOMPLETE and runs nothing; a served identity that is not the profile's is a judged FAIL, and
    only the smoke module still runs (its identity items show the readings). None: go on."""
    from pytest_qualify.graders.identity import check_identity
    from pytest_qualify.promotion.identity import DIFFERS, declared_fields, engine_version_reason, read_identity

    info, profile = state.server_info, state.profile
    if state.startup_error:
        if state.settings.mode == Mode.ATTACH:
            return f"not judged: {state.startup_error.splitlines()[0]}", False, ()
        return None  # a failed launch: every protocol item reports it with the command and log tail
    status = info.get("models_status")
    if "models_error" in info:
        error = info["models_error"]
        if status in (401, 403):
            # The error's kind travels as a word (server_info is handed to xdist workers as JSON).
            why = error if info.get("models_error_kind") == ErrorKind.AUTH_REJECTED else (
                f"the endpoint refused the API key (the key is read from ${state.settings.api_key_env}): "
                f"HTTP {status} on GET /v1/models")
            return f"not judged: {why}", False, ()
        if status == 404 or info.get("models_error_kind") == ErrorKind.NOT_OPENAI:
            return (f"not judged: not an OpenAI-compatible endpoint: GET /v1/models "
                    + (f"answered HTTP {status}" if status else f"answered no model list ({error})")), False, ()
        return f"not judged: the endpoint did not answer GET /v1/models: {error}", False, ()
    if info.get("chat_status") in (401, 403):
        return (f"not judged: credentials refused on chat: HTTP {info['chat_status']} on POST /v1/chat/completions "
                f"although GET /v1/models accepted the key (the key is read from ${state.settings.api_key_env})"), \
            False, ()
    d = profile.deployment
    verdict = check_identity(info.get("models") or [], d.served_name, d.model, profile.limits.window_tokens)
    problems = [] if verdict.ok else [verdict.reason]
    if "version" in info:
        engine = engine_version_reason(d.engine, info.get("version"))
        if engine:
            problems.append(engine)
    declared = declared_fields(
        d, launch_argv=state.target.process.spec.argv if (
            state.settings.mode == Mode.LAUNCH and state.target is not None and state.target.process is not None) else None,
        served=read_identity(d.served_name, info.get("models"), info.get("version")))
    if state.stage_run is not None:
        state.stage_run.declared = declared
    problems += [f.reason() for f in declared if f.status == DIFFERS and f.name != "engine version"]
    if problems:
        return ("the served identity is not the profile's (stopped after the smoke module): " + "; ".join(problems),
                True, ("smoke",))
    return None


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
        from pytest_qualify.server.lifecycle import StartupError
        from pytest_qualify.server.target import TargetError, api_key_from_env, start_target

        state = self.state
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
        if state.server_info.get("simulated") and state.settings.mode != Mode.REFERENCE:
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
                             engine_version=state.server_info.get("version") or None,
                             window_tokens=state.profile.limits.window_tokens, log_text=log_text,
                             metrics_text=metrics_text, ready_s=process.ready_s if process is not None else None)

    def server_info(self) -> dict[str, Any]:
        """What the server says it is; recorded for the report, checked by the first step
        (:func:`first_step`) and the smoke module. ``simulated``: the reference server, or an
        endpoint whose ``/version`` or ``/v1/models`` says ``"simulated": true``."""
        state = self.state
        client = make_client(state)
        info: dict[str, Any] = {"mode": state.settings.mode, "simulated": state.settings.mode == Mode.REFERENCE}
        try:
            body = client.get_json("/version")
            info["version"] = str(body.get("version", "")) if isinstance(body, dict) else ""
            info["simulated"] = info["simulated"] or (isinstance(body, dict) and body.get("simulated") is True)
        except Exception as exc:  # recorded, judged by the first step and the smoke module
            info["version_error"] = str(exc)
            info["version_status"] = getattr(exc, "status", None)
        try:
            body = client.get_json("/v1/models")
            if not isinstance(body, dict) or not isinstance(body.get("data"), list):
                raise ValueError(f"GET /v1/models answered no model list (got {str(body)[:80]!r})")
            info["models"] = body["data"]
            info["simulated"] = info["simulated"] or any(
                isinstance(m, dict) and m.get("simulated") is True for m in body["data"])
        except Exception as exc:
            info["models_error"] = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            info["models_status"] = getattr(exc, "status", None)
            info["models_error_kind"] = kind_of(exc)
        if state.settings.mode == Mode.ATTACH and "models" in info:
            # One minimal chat request: a key that lists the models may still be refused on chat.
            try:
                client.chat([{"role": "user", "content": "Say OK."}], max_tokens=1, temperature=0)
            except Exception as exc:  # judged by the first step (401/403) and by the smoke module
                info["chat_status"] = getattr(exc, "status", None)
                info["chat_error"] = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
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
