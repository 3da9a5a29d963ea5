"""pytest-facing part of pytest-qualify: options, collection, repetition, the session's server,
fixtures, and the gate's verdict and exit status.

Importing this module is cheap: openai, vllm, av and PIL load only when a test uses them.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from pytest_qualify import gate as gate_mod
from pytest_qualify.checks import REASON_KEY
from pytest_qualify.profiles import Lane, Profile, ProfileError, builtin_profiles, load_profile, module_registry
from pytest_qualify.settings import OPTIONS, REFERENCE, Settings, SettingsError, resolve

MODULE_KEY = "qualify_module"
REPETITION_KEY = "repetition"
REPEAT_FIXTURE = "qualify_repetition"


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
    client: Any = None


STATE_KEY = pytest.StashKey[RunState]()


def state_of(config: pytest.Config) -> RunState | None:
    return config.stash.get(STATE_KEY, None)


def suites_dir() -> Path:
    """The protocol suites: the checkout's ``suites/`` or the installed package's copy."""
    from importlib import resources

    return Path(str(resources.files("pytest_qualify.suites")))


# -- options -------------------------------------------------------------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("qualify", "protocol-v3 qualification of a vLLM deployment")
    for opt in OPTIONS:
        default_note = f" (default: {opt.default})" if opt.default else ""
        group.addoption(
            opt.flag, dest=opt.dest, default=None, metavar=opt.dest.split("_")[-1].upper(),
            help=f"{opt.help}{default_note}; env {opt.env}, ini {opt.ini}",
        )
        parser.addini(opt.ini, help=opt.help, default=None)
    group.addoption(
        "--qualify-reference-fault", dest="qualify_reference_fault", action="append", default=[],
        metavar="NAME[=ARG]", help="switch on a fault in the reference server (repeatable)",
    )
    group.addoption(
        "--qualify-profiles", dest="qualify_profiles", action="store_true", default=False,
        help="list the built-in profiles and exit",
    )


def pytest_cmdline_main(config: pytest.Config) -> int | None:
    if config.getoption("qualify_profiles"):
        # Runs before the terminal reporter exists: plain output.
        for name, path in builtin_profiles().items():
            try:
                profile = load_profile(name)
                print(f"{name:<12} {profile.description}  [{path}]")
            except ProfileError as exc:
                print(f"{name:<12} INVALID: {exc}")
        return 0
    return None


def _settings(config: pytest.Config) -> Settings:
    cli = {opt.dest: config.getoption(opt.dest) for opt in OPTIONS}
    return resolve(
        cli, os.environ, lambda key: config.getini(key), tuple(config.getoption("qualify_reference_fault"))
    )


# -- configuration ---------------------------------------------------------------------------------


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "qualify_repeat(count): pin this module's or test's repetition count (1 opts out of --repeat).",
    )
    config.addinivalue_line(
        "markers", "qualify_module(id): the protocol-v3 module this test belongs to (see modules.toml)."
    )
    try:
        settings = _settings(config)
    except SettingsError as exc:
        raise pytest.UsageError(str(exc)) from None
    if not settings.active:
        return
    if config.pluginmanager.hasplugin("rerunfailures") and (config.getoption("reruns", 0) or 0) > 0:
        raise pytest.UsageError(
            "--reruns cannot be combined with --qualify: a rerun would turn a failure into a pass"
        )
    try:
        profile = load_profile(settings.profile or "")
    except ProfileError as exc:
        raise pytest.UsageError(f"--qualify: {exc}") from None

    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        run_id = workerinput["qualify_run_id"]
    else:
        run_id = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + uuid.uuid4().hex[:6]
    run_dir = settings.evidence_dir / run_id
    state = RunState(settings, profile, run_id, run_dir, is_worker=workerinput is not None)
    if workerinput is not None:
        state.base_url = workerinput["qualify_base_url"]
        state.startup_error = workerinput.get("qualify_startup_error")
        state.server_info = dict(workerinput.get("qualify_server_info") or {})
    else:
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
            probe = run_dir / ".write-test"
            probe.write_text("")
            probe.unlink()
        except OSError as exc:
            raise pytest.UsageError(
                f"--qualify-evidence: cannot write the evidence directory {run_dir}: {exc.strerror or exc}"
            ) from None
    config.stash[STATE_KEY] = state

    # With --qualify and no test path, run the protocol suites themselves.
    if not config.option.file_or_dir:
        config.args[:] = [str(suites_dir())]
    if workerinput is None:
        _install_sigterm_handler()


def _install_sigterm_handler() -> None:
    # SIGTERM to pytest becomes an interruption, so teardown stops the server like Ctrl-C does.
    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"received signal {signum}")

    if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
        signal.signal(signal.SIGTERM, handler)


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    state = state_of(config)
    if state is None:
        return None
    s, p = state.settings, state.profile
    target = {"launch": "launch vLLM", REFERENCE: "reference server (SIMULATED, not vLLM)"}.get(
        s.mode, f"attach {s.endpoint}"
    )
    return [
        f"qualify: profile {p.name} ({p.source}); model {p.deployment.model}"
        + (f" @ {p.deployment.revision}" if p.deployment.revision else "")
        + f"; served name {p.deployment.served_name}",
        f"qualify: target {target}; repeat {s.repeat}; evidence {state.run_dir}",
    ]


# -- collection ------------------------------------------------------------------------------------


def _is_protocol_path(path: Path) -> bool:
    try:
        path.resolve().relative_to(suites_dir().resolve())
    except ValueError:
        return False
    return True


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    # Without --qualify the protocol suites are inert: plain pytest runs the project's own tests.
    if state_of(config) is None and _is_protocol_path(collection_path):
        return True
    return None


def _module_of(item_or_def: Any) -> str | None:
    marker = item_or_def.get_closest_marker(MODULE_KEY)
    return marker.args[0] if marker and marker.args else None


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    state = state_of(metafunc.config)
    if state is None or _module_of(metafunc.definition) is None:
        return
    marker = metafunc.definition.get_closest_marker("qualify_repeat")
    count = int(marker.args[0]) if marker and marker.args else state.settings.repeat
    if REPEAT_FIXTURE not in metafunc.fixturenames:
        metafunc.fixturenames.append(REPEAT_FIXTURE)
    metafunc.parametrize(
        REPEAT_FIXTURE,
        range(1, count + 1),
        ids=[f"rep{i}of{count}" for i in range(1, count + 1)],
        indirect=True,
        scope="session",
    )


def _item_label(item: pytest.Item) -> str:
    """The test id without the repetition: what the report and a waiver name."""
    name = item.nodeid.split("::", 1)[-1]
    rep = item.callspec.params.get(REPEAT_FIXTURE) if hasattr(item, "callspec") else None
    if rep is not None and "[" in name:
        base, params = name.split("[", 1)
        parts = [p for p in params.rstrip("]").split("-") if not p.startswith("rep")]
        return f"{base}[{'-'.join(parts)}]" if parts else base
    return name


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    state = state_of(config)
    if state is None:
        return
    registry = module_registry()
    keep, drop = [], []
    for item in items:
        module = _module_of(item)
        if module is None:
            keep.append(item)
            continue
        if module not in registry:
            raise pytest.UsageError(f"{item.nodeid}: unknown qualify_module {module!r}")
        if module not in state.profile.required_modules:
            state.deselected_modules.add(module)
            drop.append(item)
            continue
        params = item.callspec.params if hasattr(item, "callspec") else {}
        rep = params.get(REPEAT_FIXTURE, 1)
        marker = item.get_closest_marker("qualify_repeat")
        count = int(marker.args[0]) if marker and marker.args else state.settings.repeat
        item.user_properties.append((MODULE_KEY, module))
        item.user_properties.append(("item", _item_label(item)))
        item.user_properties.append((REPETITION_KEY, rep))
        item.user_properties.append(("repetitions", count))
        lane = params.get("lane")
        if lane is not None:
            item.user_properties.append(("lane", lane.name if isinstance(lane, Lane) else str(lane)))
        keep.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


# -- the session's server --------------------------------------------------------------------------


def pytest_sessionstart(session: pytest.Session) -> None:
    state = state_of(session.config)
    if state is None or state.is_worker or session.config.option.collectonly:
        return
    from pytest_qualify.lifecycle import StartupError
    from pytest_qualify.target import TargetError, api_key_from_env, start_target

    tr = session.config.pluginmanager.get_plugin("terminalreporter")

    def progress(line: str) -> None:
        if tr is not None:
            tr.write_line(f"qualify: {line}")

    try:
        state.target = start_target(
            state.profile, state.settings, state.run_dir, api_key_from_env(state.settings), progress
        )
        state.base_url = state.target.base_url
        state.server_info = _server_info(state)
    except (StartupError, TargetError) as exc:
        state.startup_error = str(exc)
        progress("server startup FAILED; every protocol test will fail with this report:")
        for line in str(exc).splitlines():
            progress(line)
    except KeyboardInterrupt:
        if state.target is not None:
            state.target.stop()
        raise


def _server_info(state: RunState) -> dict[str, Any]:
    """What the server says it is; recorded for the report, checked by the smoke module."""
    client = _make_client(state)
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
    client.close()
    return info


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """xdist: hand the controller's one server to each worker."""
    state = state_of(node.config)
    if state is None:
        return
    node.workerinput["qualify_run_id"] = state.run_id
    node.workerinput["qualify_base_url"] = state.base_url
    node.workerinput["qualify_startup_error"] = state.startup_error
    node.workerinput["qualify_server_info"] = state.server_info


def pytest_unconfigure(config: pytest.Config) -> None:
    state = state_of(config)
    if state is not None and state.target is not None:
        state.target.stop()


def _make_client(state: RunState) -> Any:
    from pytest_qualify.client import QualifyClient
    from pytest_qualify.target import api_key_from_env

    return QualifyClient(
        state.base_url or "", api_key_from_env(state.settings),
        state.profile.deployment.served_name, state.profile.timeouts.request_s,
    )


# -- fixtures --------------------------------------------------------------------------------------


def _state(request: pytest.FixtureRequest) -> RunState:
    state = state_of(request.config)
    if state is None:
        pytest.fail("this is a protocol test: run it with --qualify=PROFILE", pytrace=False)
    return state


@pytest.fixture(scope="session")
def qualify_repetition(request: pytest.FixtureRequest) -> int:
    """The repetition this item belongs to (1-based)."""
    return getattr(request, "param", 1)


@pytest.fixture(scope="session")
def qualify_profile(request: pytest.FixtureRequest) -> Profile:
    return _state(request).profile


@pytest.fixture(scope="session")
def qualify_run(request: pytest.FixtureRequest) -> RunState:
    return _state(request)


@pytest.fixture(scope="session")
def _qualify_session_client(request: pytest.FixtureRequest) -> Any:
    state = _state(request)
    client = _make_client(state)
    state.client = client
    yield client
    client.close()


@pytest.fixture
def qualify_client(request: pytest.FixtureRequest, _qualify_session_client: Any) -> Any:
    """The endpoint's client; fails at once when the server never started or has died."""
    state = _state(request)
    if state.startup_error:
        pytest.fail(f"server startup failed:\n{state.startup_error}", pytrace=False)
    if state.dead:
        pytest.fail(state.dead, pytrace=False)
    return _qualify_session_client


@pytest.fixture
def qualify_openai(qualify_client: Any) -> Any:
    """An ``openai.OpenAI`` client (max_retries=0, the profile's request timeout)."""
    return qualify_client.openai


@pytest.fixture
def qualify_http(qualify_client: Any) -> Any:
    """A raw ``httpx.Client`` on the endpoint, for /health, /tokenize, /metrics, /version."""
    return qualify_client.http


@pytest.fixture
def qualify_salt(request: pytest.FixtureRequest) -> str:
    """A cache salt unique to this item in this run: no request is served from another's cache."""
    return f"{_state(request).run_id}-{uuid.uuid4().hex}"


class Recorder:
    """Adds evidence to the current item's JUnit properties (they survive xdist)."""

    def __init__(self, item: pytest.Item) -> None:
        self._item = item

    def props(self, **values: Any) -> None:
        for key, value in values.items():
            self._item.user_properties.append((key, value))

    def answer(self, answer: Any, tool_turn: bool = False) -> None:
        """Record an answer's client-observed timing and token counts."""
        from pytest_qualify.timing import request_metrics

        metrics = request_metrics(answer.timeline, answer.prompt_tokens, answer.completion_tokens)
        self.props(**{k: round(v, 6) if isinstance(v, float) else v for k, v in metrics.as_properties().items()})
        self.finish(answer, tool_turn)

    def finish(self, answer: Any, tool_turn: bool = False) -> None:
        """The shared visible-answer / finish-state check (graders/finish.py), run on every recorded
        answer: records ``finish_reason`` and ``finish_check`` ("ok" or why it failed) and fails the
        test on a bad finish. ``tool_turn``: the turn offered tools, so ``tool_calls`` may end it."""
        from pytest_qualify.graders.finish import check_finish

        verdict = check_finish(answer, expect_tool=tool_turn)
        self.props(finish_reason=answer.finish_reason, finish_check="ok" if verdict.ok else verdict.reason)
        if not verdict.ok:
            pytest.fail(f"finish state: {verdict.reason}", pytrace=False)


@pytest.fixture
def qualify_record(request: pytest.FixtureRequest) -> Recorder:
    return Recorder(request.node)


# -- the gate --------------------------------------------------------------------------------------


def _reason(report: pytest.TestReport) -> str:
    for key, value in report.user_properties:
        if key == REASON_KEY:
            return str(value)
    if report.skipped and isinstance(report.longrepr, tuple):
        return f"skipped: {report.longrepr[2]}"
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        message = crash.message.strip().removeprefix("Failed: ")
        return message.splitlines()[0] if message else "failed"
    text = str(report.longrepr or "").strip()
    return text.splitlines()[0] if text else report.outcome


class _GateCollector:
    """Folds every protocol report into the run's item results (on the controller)."""

    def __init__(self, state: RunState) -> None:
        self.state = state

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        props = dict(report.user_properties)
        module = props.get(MODULE_KEY)
        if module is None:
            return
        results = self.state.results
        result = results.get(report.nodeid)
        if result is None:
            result = results[report.nodeid] = gate_mod.ItemResult(
                nodeid=report.nodeid,
                module=module,
                item=str(props.get("item", report.nodeid)),
                repetition=int(props.get(REPETITION_KEY, 1)),
                repetitions=int(props.get("repetitions", 1)),
                lane=props.get("lane"),
            )
        result.properties.update(props)
        outcome = report.outcome
        if outcome == "skipped" and report.when == "call" and hasattr(report, "wasxfail"):
            outcome = "failed"
        result.record(report.when, outcome, "" if outcome == "passed" else _reason(report))


@pytest.hookimpl(tryfirst=True)
def pytest_collection(session: pytest.Session) -> None:
    state = state_of(session.config)
    if state is not None and not state.is_worker:
        pm = session.config.pluginmanager
        if not pm.has_plugin("qualify-gate"):
            pm.register(_GateCollector(state), "qualify-gate")


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    state = state_of(session.config)
    if state is None or state.is_worker or session.config.option.collectonly:
        return
    problems = []
    if state.startup_error:
        problems.append("server startup failed: " + state.startup_error.splitlines()[0])
    if state.dead:
        problems.append(state.dead.splitlines()[0])
    if exitstatus == pytest.ExitCode.INTERRUPTED:
        problems.append("run interrupted before the protocol finished")
    if session.shouldfail:
        problems.append(f"run stopped early: {session.shouldfail}")
    state.verdict = gate_mod.evaluate(
        state.results.values(), module_registry(), state.profile.required_modules, run_problems=problems
    )
    if not state.verdict.passed and session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    state = state_of(config)
    if state is None or state.verdict is None:
        return
    tr = terminalreporter
    title = f"qualification gate: profile {state.profile.name}"
    if state.settings.mode == REFERENCE:
        title += " (SIMULATED reference server, not vLLM)"
    tr.write_sep("=", title)
    for line in gate_mod.render_table(state.verdict):
        tr.write_line(line)
    if state.deselected_modules:
        tr.write_line(f"not in this profile: {', '.join(sorted(state.deselected_modules))}")
    tr.write_line("")
    verdict_lines = state.verdict.summary_lines()
    tr.write_line(verdict_lines[0], bold=True, green=state.verdict.passed, red=not state.verdict.passed)
    for line in verdict_lines[1:]:
        tr.write_line(line)
