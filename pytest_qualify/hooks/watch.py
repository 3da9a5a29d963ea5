"""A dead, hung or refusing server, seen from pytest.

A request that fails because the server is gone marks the run's server dead: every later protocol
test fails at once with the same reason (exit code and log tail), and the gate names the death.
Each xdist worker finds out on its own (its requests are refused, or the server's pid is gone);
the controller adopts the first worker's finding. Timeouts and a rejected API key become one
readable line instead of a traceback.
"""

from __future__ import annotations

import time
from typing import Any, NoReturn

import pytest

from pytest_qualify.hooks import state_of
from pytest_qualify.redaction import redact
from pytest_qualify.run import RunState, module_of
# The death is confirmed and accounted for in server/death.py; DEATH_FILE and split_death are named here too.
from pytest_qualify.server.death import (  # noqa: F401
    DEATH_FILE, DEATH_LOG_LINES, WatchedServer, read_account, split_death, write_account,
)
from pytest_qualify.settings import Mode
from pytest_qualify import properties


DEAD_PROPERTY = "server_dead"
WORKER_ACCOUNT_WAIT_S = 1.5
# The log tail travels as a section of the failure's report, not in its message.
LOG_SECTION = f"server log (last {DEATH_LOG_LINES} lines)"
STARTUP_LOG_SECTION = "server log at the failed startup"
STARTUP_FAILED = "server startup failed"
UNREACHABLE = "endpoint could not be reached"  # attach mode: nothing was started, so nothing failed to start


def not_started_words(state: RunState) -> str:
    """What a run whose server never answered says: a startup that failed, or (attach mode, where
    the plugin starts nothing) an endpoint that could not be reached."""
    return UNREACHABLE if state.settings.mode == Mode.ATTACH else STARTUP_FAILED


class ServerWatch:
    """Per process, registered at session start: fails protocol items at once when the server is
    gone, turns server-state failures into one readable line, scrubs secrets from reports; on the
    controller, adopts workers' findings. (A plugin object, so its hooks do not collide with the
    plugin module's own.)"""

    def __init__(self, state: RunState) -> None:
        self.state = state
        self.last_nodeid = ""  # the protocol item whose body ran last in this process

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> bool | None:
        """A protocol item of a run its first step stopped is not run at all (no report, no line):
        the one reason is the verdict's. An xdist worker first adopts the controller's server."""
        state = _protocol_state(item)
        if state is None:
            return None
        if state.is_worker:
            from pytest_qualify.hooks.xdist import adopt_handover

            adopt_handover(state)
        if state.stop is not None and module_of(item) not in state.stop.keeps:
            return True
        if state.credentials_stop and module_of(item) is not None:
            return True
        return None

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Any:
        state = _protocol_state(item)
        if state is None:
            return (yield)
        # The gone-server check itself runs inside setup, in the qualify_client fixture: failing
        # out here, before pytest's own setup, would leave its teardown bookkeeping unbalanced.
        try:
            return (yield)
        except Exception as exc:
            _reraise_readably(state, item, exc)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Any:
        state = _protocol_state(item)
        if state is None:
            return (yield)
        # For a protocol test that does not use qualify_client: still fail at once, not after
        # its request timeout.
        fail_if_server_gone(item.config, state, item.nodeid)
        try:
            return (yield)
        except Exception as exc:
            _reraise_readably(state, item, exc)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
        report = yield
        state = self.state
        if call.when == "call" and module_of(item) is not None:
            self.last_nodeid = item.nodeid
        if state.dead and report.failed and module_of(item) is not None:
            if state.dead.splitlines()[0] in str(report.longrepr):
                # Tells the xdist controller, which sees only reports, that the server is gone.
                report.user_properties.append((DEAD_PROPERTY, state.dead.splitlines()[0]))
                _attach_log_tail(report, split_death(state.dead)[1])
        if state.startup_error and report.failed and module_of(item) is not None:
            if STARTUP_FAILED in str(report.longrepr):
                _attach_log_tail(report, _split_startup(state.startup_error)[1], STARTUP_LOG_SECTION)
        if report.failed and module_of(item) is not None and call.when in ("setup", "call"):
            _not_judged_when_refused(item, report)
        _redact_report(report, state.secrets)
        return report

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        state = self.state
        if state.dead is not None or state.is_worker:
            return
        first = dict(report.user_properties).get(DEAD_PROPERTY)
        if first is not None:
            state.dead = _adopt_death(state) or str(first)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtestloop(self, session: pytest.Session) -> Any:
        try:
            return (yield)
        finally:
            state = self.state
            how = state.target.died() if state.target is not None and state.dead is None else None
            if how is not None:
                _declare_dead(state, f"the run, after {self.last_nodeid or 'startup'}", how)


WATCH_KEY = pytest.StashKey[ServerWatch]()


def _not_judged_when_refused(item: pytest.Item, report: pytest.TestReport) -> None:
    """An item whose request the endpoint refused our key for was not judged: it is reported skipped
    with that reason, not as a FAILED line of its own (under ``-n N`` each worker meets one refusal
    before it stops asking). The gate counts it as not judged (``gate.proof_of_grading``) and the
    verdict's one "credentials refused" reason, an error in JUnit, says why the run is INCOMPLETE."""
    status = dict(report.user_properties).get(properties.CREDENTIALS_REFUSED)
    if status is None:
        return
    crash = getattr(report.longrepr, "reprcrash", None)
    message = (crash.message if crash is not None else str(report.longrepr or "")).strip().removeprefix("Failed: ")
    path, lineno, _ = item.location
    report.outcome = "skipped"
    report.longrepr = (str(path), (lineno or 0) + 1, f"not judged: {message.splitlines()[0] if message else status}")


def _reraise_readably(state: RunState, item: pytest.Item, exc: Exception) -> NoReturn:
    """A failure that is the server's state (gone, hung, refusing the key) becomes one readable
    line; anything else propagates unchanged."""
    reason = _harness_reason(state, item, exc)
    if reason is None:
        raise exc
    raise pytest.fail.Exception(reason, pytrace=False) from None


def _watched(state: RunState) -> WatchedServer:
    """The run's server as ``server/death.py`` checks it (an xdist worker: what the controller
    handed over)."""
    info = state.server_info
    pid = info.server_pid if info is not None else None
    return WatchedServer(state.base_url or "", state.target, int(pid) if pid else None,
                         info.server_log if info is not None else None, state.secrets)


def _process_gone(state: RunState) -> str | None:
    return _watched(state).process_gone()


def _confirm_death(state: RunState) -> str | None:
    return _watched(state).confirm_death()


def _declare_dead(state: RunState, during: str, how: str) -> str:
    """Record the server's death; the first finder's account wins, in every process."""
    state.dead = write_account(state.run_dir, _watched(state).death_account(during, how))
    return state.dead


def _adopt_death(state: RunState) -> str | None:
    """Another process's account of the death, if one was written."""
    return read_account(state.run_dir)


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and cur not in seen:
        seen.append(cur)
        cur = cur.__cause__ or cur.__context__
    return seen


def _connection_failure(chain: list[BaseException]) -> str | None:
    """The refused, reset or unanswered connection in an exception chain, if there is one."""
    import sys

    from pytest_qualify.client.errors import ServerGone

    httpx = sys.modules.get("httpx")
    openai = sys.modules.get("openai")
    for e in chain:
        if isinstance(e, ServerGone):
            return str(e)
        if httpx is not None and isinstance(
            e, (httpx.ConnectError, httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError)
        ):
            return f"{type(e).__name__}: {e}"
        if openai is not None and isinstance(e, openai.APIConnectionError) and not isinstance(e, openai.APITimeoutError):
            return f"{type(e).__name__}: {e}"
        if isinstance(e, (ConnectionRefusedError, ConnectionResetError, BrokenPipeError)):
            return f"{type(e).__name__}: {e}"
    return None


def _lane_of(item: pytest.Item) -> str | None:
    params = item.callspec.params if hasattr(item, "callspec") else {}
    lane = params.get("lane")
    return str(lane) if lane is not None else None


def _harness_reason(state: RunState, item: pytest.Item, exc: BaseException) -> str | None:
    """One readable line for failures that are the server's state, not the test's assertion."""
    import sys

    from pytest_qualify.client.errors import AuthRejected, RequestTimeout

    chain = _chain(exc)
    lane = _lane_of(item)
    in_lane = f"{lane} lane: " if lane else ""
    for e in chain:
        status = getattr(e, "status", None) or getattr(e, "status_code", None)
        response = getattr(e, "response", None)
        if status is None and response is not None:
            status = getattr(response, "status_code", None)
        if status in (401, 403):
            if hasattr(item, "user_properties"):
                item.user_properties.append((properties.CREDENTIALS_REFUSED, status))
            state.credentials_stop = True
            if isinstance(e, AuthRejected):  # the client's own account: which key, which request
                return str(e)
            return (
                f"the endpoint rejected the API key (the key is read from ${state.settings.api_key_env}): "
                f"HTTP {status} ({type(e).__name__})"
            )
    httpx = sys.modules.get("httpx")
    openai = sys.modules.get("openai")
    for e in chain:
        if isinstance(e, RequestTimeout):
            return f"{in_lane}request timed out: {e}"
        if (httpx is not None and isinstance(e, httpx.TimeoutException)) or (
            openai is not None and isinstance(e, openai.APITimeoutError)
        ):
            return f"{in_lane}request timed out ({type(e).__name__}) in a test that used the raw client"
    failure = _connection_failure(chain)
    if failure is None:
        return None
    if state.dead is None:
        how = _confirm_death(state)
        if how is None:
            return f"{in_lane}connection to the server failed, but it still answers /health: {failure}"
        _declare_dead(state, item.nodeid, how)
    return split_death(state.dead or "")[0]


def fail_if_server_gone(config: pytest.Config, state: RunState, nodeid: str) -> None:
    """Fail the current test at once when the server never started or is known to be gone."""
    if state.startup_error:
        pytest.fail(f"{not_started_words(state)}:\n{_split_startup(state.startup_error)[0]}", pytrace=False)
    if state.dead is None:
        state.dead = _adopt_death(state)
    if state.dead is None:
        how = _process_gone(state)
        if how is not None:
            if state.is_worker:
                # The worker whose request met the death names the exact test: give it a moment.
                deadline = time.monotonic() + WORKER_ACCOUNT_WAIT_S
                while state.dead is None and time.monotonic() < deadline:
                    time.sleep(0.05)
                    state.dead = _adopt_death(state)
        if how is not None and state.dead is None:
            watch = config.stash.get(WATCH_KEY, None)
            last = watch.last_nodeid if watch is not None else ""
            if state.is_worker:
                during = f"a test on another worker or {last}" if last else "a test on another worker"
            else:
                during = f"{last} or right after it" if last else "startup"
            _declare_dead(state, f"{during} (found gone before {nodeid})", how)
    if state.dead:
        pytest.fail(split_death(state.dead)[0], pytrace=False)


def _protocol_state(item: pytest.Item) -> RunState | None:
    state = state_of(item.config)
    return state if state is not None and module_of(item) is not None else None


def _split_startup(startup_error: str) -> tuple[str, str]:
    from pytest_qualify.server.lifecycle import split_startup_error  # subprocess machinery: only when startup failed

    return split_startup_error(startup_error)


def _attach_log_tail(report: pytest.TestReport, tail: str, title: str = LOG_SECTION) -> None:
    """The server log's last lines as a section of the failure (terminal, JUnit and evidence show it)."""
    if not tail.strip():
        return
    if hasattr(report.longrepr, "addsection"):
        report.longrepr.addsection(title, tail)
    elif isinstance(report.longrepr, str):
        report.longrepr += f"\n{title}\n{tail}"


def _redact_report(report: pytest.TestReport, secrets: tuple[str, ...]) -> None:
    """No secret reaches the terminal, JUnit or the evidence through a report."""
    if not secrets:
        return
    if report.longrepr is not None:
        text = str(report.longrepr)
        if any(secret in text for secret in secrets):
            report.longrepr = redact(text, secrets)
    report.sections = [(title, redact(content, secrets)) for title, content in report.sections]
    report.user_properties = [
        (key, redact(value, secrets) if isinstance(value, str) else value) for key, value in report.user_properties
    ]
