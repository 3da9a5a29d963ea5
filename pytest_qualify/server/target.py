"""The session's one target: a launched vLLM, the reference server, or an attached endpoint.

No pytest here: the plugin builds a :class:`Target` on the controller, starts it once, and hands
its URL to xdist workers.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from pytest_qualify.server.lifecycle import (
    LaunchSpec, ServerProcess, free_port, pid_exit, port_is_free, render_argv, tail,
)
from pytest_qualify.profiles import Profile
from pytest_qualify.redaction import redact_file
from pytest_qualify.reference.fault_log import FAULT_LOG
from pytest_qualify.settings import Mode, Settings

SERVER_LOG = "server.log"
STEER_PROXY_LOG = "steer-proxy.log"


class TargetError(RuntimeError):
    """The target cannot be used as configured (before anything is started)."""


@dataclass
class Target:
    mode: Mode
    base_url: str
    display_command: str = ""
    process: ServerProcess | None = None
    # A steered profile (profile.steer): the steering proxy in front of the launched vLLM;
    # base_url is the proxy's.
    proxy: ServerProcess | None = None

    def died(self) -> str | None:
        """Why the launched process is gone, or None while it runs (or when attached)."""
        if self.process is not None and self.process.proc is not None and not self.process.alive():
            return f"server process (pid {self.process.pid}) exited with code {self.process.exit_code}"
        if self.proxy is not None and self.proxy.proc is not None and not self.proxy.alive():
            return f"steering proxy (pid {self.proxy.pid}) exited with code {self.proxy.exit_code}"
        return None

    def death(self) -> str | None:
        """Why the launched process is gone with its last log line, or None while it runs."""
        why = self.died()
        if not why:
            return None
        last = self.process.log_tail(1).strip() if self.process is not None else ""
        return why + (f" (last log line: {last[:200]})" if last else "")

    def log_tail(self, lines: int = 20) -> str:
        return self.process.log_tail(lines) if self.process is not None else ""

    def begin_stop(self) -> None:
        """SIGTERM the steering proxy and the server at once, and return: both shut down while the
        run writes its bundle; :meth:`stop` waits for them."""
        for process in (self.proxy, self.process):
            if process is not None:
                process.begin_stop()

    def stop(self) -> None:
        """Stop the process group; then scrub secrets from the log the server wrote."""
        self.begin_stop()  # both at once: the proxy's and the server's shutdowns overlap
        if self.proxy is not None:
            try:
                self.proxy.stop()
            finally:
                redact_file(self.proxy.spec.log_path, self.proxy.spec.secrets)
        if self.process is None:
            return
        try:
            self.process.stop()
        finally:
            redact_file(self.process.spec.log_path, self.process.spec.secrets)


def process_gone(pid: int) -> str | None:
    """Why a server process we did not start (seen from an xdist worker) is gone, or None."""
    exited, code = pid_exit(pid)
    if not exited:
        return None
    return f"server process (pid {pid}) exited" + (f" with code {code}" if code is not None else "")


def log_tail(path: str | os.PathLike[str] | None, secrets: tuple[str, ...] = (), lines: int = 20) -> str:
    return tail(Path(path), lines, secrets) if path else ""


def preflight(profile: Profile, settings: Settings) -> None:
    """Local problems that make a launch pointless, found before anything is started."""
    if settings.reference_faults and not (
            settings.mode == Mode.REFERENCE or (settings.mode == Mode.LAUNCH and profile.steer is not None)):
        raise TargetError(
            f"--qualify-reference-fault {settings.reference_faults[0]}: cannot engage: faults are switched on in the "
            "reference server (--qualify-endpoint reference) or a steered profile's proxy, not in an endpoint "
            f"this run {'attaches to' if settings.mode == Mode.ATTACH else 'launches'}")
    if settings.reference_faults and settings.mode == Mode.LAUNCH and profile.steer is not None:
        from pytest_qualify.reference.steer import check_faults
        from pytest_qualify.reference.steer_forcing import SteerError

        try:
            check_faults([spec.partition("=")[0] for spec in settings.reference_faults])
        except SteerError as exc:
            raise TargetError(f"--qualify-reference-fault: cannot engage: {exc}") from None
    if settings.mode == Mode.ATTACH:
        return
    if settings.mode == Mode.LAUNCH and profile.serve.attach_only:
        raise TargetError(
            f"--qualify={profile.source}: profile {profile.name} is attach-only (written from a running endpoint, "
            "which cannot say how it was launched): run it with --qualify-endpoint URL, or write [serve] command "
            "and args from the real serve command")
    host = profile.serve.host
    if profile.serve.port is not None and not port_is_free(host, profile.serve.port):
        raise TargetError(
            f"profile {profile.name}: serve.port {profile.serve.port} on {host} is already in use "
            f"(profile file {profile.source})"
        )
    if settings.mode == Mode.LAUNCH:
        command = settings.serve_command or profile.serve.command
        exe = command[0]
        where = "--qualify-serve-command" if settings.serve_command else f"serve.command of profile {profile.source}"
        if shutil.which(exe) is None:
            raise TargetError(f"{where}: cannot run {exe!r}: not found or not executable")


def launch_spec(profile: Profile, settings: Settings, run_dir: Path, api_key: str | None) -> LaunchSpec:
    """The exact command line for this profile: vLLM's recipe, or the reference server."""
    host = profile.serve.host
    if profile.serve.port is not None:
        if not port_is_free(host, profile.serve.port):
            raise TargetError(f"profile {profile.name}: serve.port {profile.serve.port} on {host} is already in use")
        port = profile.serve.port
    else:
        port = free_port(host)
    env = dict(profile.serve.env)
    secrets: tuple[str, ...] = (api_key,) if api_key else ()
    startup_timeout = settings.startup_timeout_s or profile.timeouts.startup_s
    if settings.mode == Mode.REFERENCE:
        argv: tuple[str, ...] = (
            sys.executable, "-m", "pytest_qualify.reference",
            "--host", host, "--port", str(port), "--profile", profile.source,
        )
        for fault in settings.reference_faults:
            argv += ("--fault", fault)
        if settings.reference_faults:
            argv += ("--fault-log", str(run_dir / FAULT_LOG))  # which engaged, read at the run's end
        if api_key:
            # The key travels by environment, never on a command line.
            argv += ("--api-key-env", "QUALIFY_REFERENCE_API_KEY")
            env["QUALIFY_REFERENCE_API_KEY"] = api_key
    else:
        values = {
            "model": profile.deployment.model,
            "revision": profile.deployment.revision,
            "served_name": profile.deployment.served_name,
            "host": host,
            "port": str(port),
            # The package's fixtures folder: a recipe's engine-side plugin (fixtures/vllm_plugins).
            "fixtures": str(resources.files("pytest_qualify.fixtures")),
        }
        command = settings.serve_command or profile.serve.command
        argv = render_argv(command, values) + render_argv(profile.serve.args, values)
        env = dict(zip(env, render_argv(tuple(env.values()), values)))
        argv += ("--host", host, "--port", str(port))
        if api_key:
            env["VLLM_API_KEY"] = api_key
    return LaunchSpec(
        argv=argv,
        host=host,
        port=port,
        log_path=run_dir / SERVER_LOG,
        startup_timeout_s=startup_timeout,
        env=env,
        secrets=secrets,
    )


def steer_spec(profile: Profile, settings: Settings, upstream: LaunchSpec, run_dir: Path) -> LaunchSpec:
    """The steering proxy in front of a launched vLLM (profile ``[steer]``, reference/steer.py):
    every request goes to ``upstream``, chat answers forced to the oracles'; its log of forced
    answers (``steer.jsonl``) is what the run's end reads."""
    from pytest_qualify.reference.steer_log import STEER_LOG

    assert profile.steer is not None
    port = free_port(upstream.host)
    argv: tuple[str, ...] = (
        sys.executable, "-m", "pytest_qualify.reference", "--steer", upstream.base_url,
        "--host", upstream.host, "--port", str(port), "--profile", profile.source,
        "--tool-call-syntax", profile.steer.tool_call_syntax, "--steer-log", str(run_dir / STEER_LOG),
    )
    if profile.steer.strip_chat_template_kwargs:
        argv += ("--strip-chat-template-kwargs",)
    for fault in settings.reference_faults:
        argv += ("--fault", fault)
    if settings.reference_faults:
        argv += ("--fault-log", str(run_dir / FAULT_LOG))
    # Started beside vLLM, waited for once vLLM is ready: its clock runs through vLLM's start-up too.
    return LaunchSpec(argv=argv, host=upstream.host, port=port, log_path=run_dir / STEER_PROXY_LOG,
                      startup_timeout_s=upstream.startup_timeout_s + 60.0, secrets=upstream.secrets)


def start_target(
    profile: Profile,
    settings: Settings,
    run_dir: Path,
    api_key: str | None,
    progress: Callable[[str], None] | None = None,
) -> Target:
    """Launch (or attach) and wait until ``/health`` answers. Raises StartupError/TargetError."""
    if settings.mode == Mode.ATTACH:
        assert settings.endpoint
        unreachable = unreachable_reason(settings.endpoint)
        if unreachable:
            from pytest_qualify.redaction import safe_url

            # Not a dead server: nothing was ever judged, and the verdict says INCOMPLETE.
            raise TargetError(f"--qualify-endpoint {safe_url(settings.endpoint)}: the endpoint could not be "
                              f"reached: {unreachable}")
        return Target(mode=Mode.ATTACH, base_url=settings.endpoint)
    spec = launch_spec(profile, settings, run_dir, api_key)
    process = ServerProcess(spec)
    target = Target(
        mode=settings.mode,
        base_url=spec.base_url,
        display_command=spec.display_command(),
        process=process,
    )
    if progress:
        progress(f"launching: {spec.display_command()}")
    process.start()
    proxy_spec = None
    try:
        if settings.mode == Mode.LAUNCH and profile.steer is not None:
            # The steering proxy starts while vLLM does (it asks vLLM nothing until a request comes):
            # its own start-up is then inside vLLM's, not after it.
            proxy_spec = steer_spec(profile, settings, spec, run_dir)
            target.proxy = ServerProcess(proxy_spec)
            if progress:
                progress(f"steering: {proxy_spec.display_command()}")
            target.proxy.start()
        seconds = process.wait_ready(progress=progress, progress_every_s=2.0 if settings.mode == Mode.REFERENCE else 10.0)
    except BaseException:
        # A failed start, a startup timeout, or Ctrl-C/SIGTERM while waiting: nothing may be
        # left running, and the caller never got a Target to stop.
        target.stop()
        raise
    if progress:
        progress(f"server ready at {spec.base_url} after {seconds:.1f} s (pid {process.pid})")
    if proxy_spec is not None and target.proxy is not None:
        try:
            target.proxy.wait_ready(progress=progress)
        except BaseException:
            target.stop()
            raise
        target.base_url = proxy_spec.base_url
        if progress:
            progress(f"steering proxy ready at {proxy_spec.base_url}, forcing the oracles' answers on {spec.base_url}")
    return target


@dataclass(frozen=True)
class HealthProbe:
    """One ``GET /health`` without credentials: the HTTP status when the endpoint answered, else
    the transport's error (first line) and whether it was a timeout."""

    status: int | None = None
    error: str | None = None
    timed_out: bool = False


def probe_health(base_url: str, timeout_s: float) -> HealthProbe:
    """The plugin's one connection probe of an endpoint (is anything answering there at all?):
    attach mode's reachability check and the server watch's "refused or just slow?" both read
    it. (Readiness during a launch is ``lifecycle``'s own poll; liveness after a refusal asks
    through the client, with the API key, and also asks for a short answer.)"""
    import httpx

    from pytest_qualify.client.endpoint import tls_context

    try:
        resp = httpx.get(base_url.rstrip("/") + "/health", timeout=timeout_s, verify=tls_context())
    except httpx.HTTPError as exc:
        text = str(exc)
        return HealthProbe(error=f"{type(exc).__name__}: {text.splitlines()[0] if text else 'no answer'}",
                           timed_out=isinstance(exc, httpx.TimeoutException))
    return HealthProbe(status=resp.status_code)


def unreachable_reason(base_url: str, attempts: int = 3, timeout_s: float = 5.0, pause_s: float = 1.0) -> str | None:
    """Why an attached endpoint cannot be reached at all (no TCP connection, no HTTP answer), or
    None. Any HTTP answer to ``/health`` counts as reachable: a router may answer 404 there. A few
    tries, so a router that is restarting gets a moment."""
    import time

    why = None
    for attempt in range(attempts):
        probe = probe_health(base_url, timeout_s)
        if probe.status is not None:
            return None
        why = probe.error
        if attempt + 1 < attempts:
            time.sleep(pause_s)
    return why


def api_key_from_env(settings: Settings) -> str | None:
    return os.environ.get(settings.api_key_env) or None
