"""pytest-facing part of pytest-qualify: options, collection, repetition, the session's server,
fixtures, and the gate's verdict and exit status.

Importing this module is cheap: openai, vllm, av and PIL load only when a test uses them.
"""

from __future__ import annotations

import os
import re
import signal
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from pytest_qualify import gate as gate_mod
from pytest_qualify.checks import REASON_KEY
from pytest_qualify.profiles import Lane, Profile, ProfileError, builtin_profiles, load_profile, module_registry
from pytest_qualify.run import MODULE_KEY, STATE_KEY, RunState, module_of, secrets_of, state_of
from pytest_qualify.settings import OPTIONS, REFERENCE, Settings, SettingsError, resolve
from pytest_qualify.watch import WATCH_KEY, ServerWatch, fail_if_server_gone

REPETITION_KEY = "repetition"
REPEAT_FIXTURE = "qualify_repetition"
PROFILE_DESELECTED = pytest.StashKey[bool]()
REP_ID_RE = re.compile(r"(?:(?<=\[)|(-))rep\d+of\d+(?:(?=\])|(-))")


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

    node_ids = [arg for arg in config.option.file_or_dir or [] if "::" in arg]
    if node_ids:
        state.partial_selection = f"test ids selected on the command line ({', '.join(node_ids[:3])})"
    # With --qualify and no test path, run the protocol suites themselves.
    if not config.option.file_or_dir:
        config.args[:] = [str(suites_dir())]
    if workerinput is None:
        _install_sigterm_handler()
    _configure_evidence(config, state)


def _install_sigterm_handler() -> None:
    # SIGTERM (a cancelled CI job) and SIGHUP (a closed terminal or SSH session) to pytest become an
    # interruption, so teardown stops the server's whole process group as Ctrl-C does. A signal
    # someone chose to ignore or handle stays as it is.
    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"received {signal.Signals(signum).name}")

    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) in (signal.SIG_DFL, None):
            signal.signal(sig, handler)


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


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    state = state_of(metafunc.config)
    if state is None or module_of(metafunc.definition) is None:
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
    return strip_repetition_id(item.nodeid.split("::", 1)[-1])


def strip_repetition_id(name: str) -> str:
    """Remove exactly the repetition id pytest joined in ("rep2of3"), wherever it stands."""
    if "[" not in name:
        return name
    label = REP_ID_RE.sub(lambda m: "-" if m.group(1) and m.group(2) else "", name)
    return label.replace("[]", "")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    state = state_of(config)
    if state is None:
        return
    registry = module_registry()
    keep, drop = [], []
    for item in items:
        module = module_of(item)
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
        for item in drop:
            item.stash[PROFILE_DESELECTED] = True
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_deselected(items: list[pytest.Item]) -> None:
    if not items:
        return
    state = state_of(items[0].config)
    if state is None:
        return
    state.user_deselected += sum(
        1 for item in items if module_of(item) is not None and not item.stash.get(PROFILE_DESELECTED, False)
    )
    if state.is_worker:
        _workeroutput(items[0].config)["qualify_user_deselected"] = state.user_deselected


def _workeroutput(config: pytest.Config) -> dict[str, Any]:
    return getattr(config, "workeroutput", {})


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """xdist: a worker's selection counts come back with its output; every worker collected
    the same items, so the largest count is the run's."""
    state = state_of(node.config)
    output = getattr(node, "workeroutput", None) or {}
    if state is not None and "qualify_user_deselected" in output:
        state.user_deselected = max(state.user_deselected, int(output["qualify_user_deselected"]))


# -- the session's server --------------------------------------------------------------------------


def pytest_sessionstart(session: pytest.Session) -> None:
    state = state_of(session.config)
    if state is None:
        return
    pm = session.config.pluginmanager
    if not pm.has_plugin("qualify-server-watch"):
        watch = ServerWatch(state)
        session.config.stash[WATCH_KEY] = watch
        pm.register(watch, "qualify-server-watch")
    if state.is_worker or session.config.option.collectonly:
        return
    from pytest_qualify.lifecycle import StartupError
    from pytest_qualify.target import TargetError, api_key_from_env, preflight, start_target

    # Local problems (a taken port, a serve command that does not exist) are usage errors,
    # reported before anything is started.
    try:
        preflight(state.profile, state.settings)
    except TargetError as exc:
        raise pytest.UsageError(str(exc)) from None

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
        return
    # start_target stops its own process when interrupted (Ctrl-C or SIGTERM during startup).
    rejected = state.server_info.get("models_error", "")
    if "rejected the API key" in rejected:
        progress(f"WARNING: {rejected}")


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
        if state.target.process is not None:
            # xdist workers use these to tell a dead server from a failing request on their own.
            info["server_pid"] = state.target.process.pid
            info["server_log"] = str(state.target.process.spec.log_path)
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
        try:
            state.target.stop()
        except KeyboardInterrupt:
            # A second Ctrl-C during teardown: stop() killed the whole group before re-raising;
            # the run is already recorded as interrupted.
            pass
    _finalize_evidence(config)


def _make_client(state: RunState) -> Any:
    from pytest_qualify.client import QualifyClient
    from pytest_qualify.target import api_key_from_env

    return QualifyClient(
        state.base_url or "", api_key_from_env(state.settings),
        state.profile.deployment.served_name, state.profile.timeouts.request_s,
        timeouts=state.profile.timeouts, api_key_env=state.settings.api_key_env,
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
    if state.base_url and not state.startup_error:
        client.warm_up()
    yield client
    client.close()


@pytest.fixture
def qualify_client(request: pytest.FixtureRequest, _qualify_session_client: Any) -> Any:
    """The endpoint's client; fails at once when the server never started or has died."""
    fail_if_server_gone(request.config, _state(request), request.node.nodeid)
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
        """Record an answer's client-observed timing and token counts. An item that makes several
        requests keeps the timing of its first streamed one (see evidence/junit.py)."""
        from pytest_qualify.evidence.junit import merge_answer_properties
        from pytest_qualify.timing import request_metrics

        metrics = request_metrics(answer.timeline, answer.prompt_tokens, answer.completion_tokens)
        merge_answer_properties(self._item.user_properties, metrics, bool(answer.streamed), answer.cached_tokens)
        # vLLM's own count of the prompt tokens each kind of media cost (--enable-prompt-tokens-details).
        media = (answer.usage.get("prompt_tokens_details") or {}).get("multimodal_tokens") or {}
        self.props(**{f"{kind}_prompt_tokens": int(n) for kind, n in sorted(media.items()) if n is not None})
        self.finish(answer, tool_turn)

    def finish(self, answer: Any, tool_turn: bool = False) -> None:
        """The shared visible-answer / finish-state check (graders/finish.py), run on every recorded
        answer: records ``finish_reason`` and ``finish_check`` ("ok" or why it failed) and fails the
        test on a bad finish. ``tool_turn``: the turn offered tools, so ``tool_calls`` may end it."""
        from pytest_qualify.graders.finish import check_finish

        verdict = check_finish(answer, expect_tool=tool_turn)
        # One pair per item: a failing check fails the test at once, so "ok" means every answer so far.
        props = self._item.user_properties
        props[:] = [(k, v) for k, v in props if k not in ("finish_reason", "finish_check")]
        self.props(finish_reason=answer.finish_reason, finish_check="ok" if verdict.ok else verdict.reason)
        if not verdict.ok:
            pytest.fail(f"finish state: {verdict.reason}", pytrace=False)


@pytest.fixture
def qualify_record(request: pytest.FixtureRequest) -> Recorder:
    return Recorder(request.node)


@pytest.fixture
def qualify_ask(qualify_client: Any, qualify_profile: Profile, qualify_record: Recorder, qualify_salt: str) -> Any:
    """One protocol question, asked the protocol's way: the profile's answer budget, temperature 0,
    a fixed seed, this item's cache salt; the answer is recorded (and its finish state checked).

    ``ask(prompt_or_messages, *, tool_turn=False, salt_suffix="", **params) -> Answer``
    """

    def ask(prompt: str | list[dict[str, Any]], *, tool_turn: bool = False, salt_suffix: str = "",
            **params: Any) -> Any:
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
        answer = qualify_client.chat(
            messages, max_tokens=qualify_profile.limits.answer_tokens, temperature=0, seed=1,
            cache_salt=qualify_salt + salt_suffix, **params,
        )
        qualify_record.answer(answer, tool_turn=tool_turn)
        return answer

    return ask


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
    if state.user_deselected:
        problems.append(
            f"partial run: {state.user_deselected} protocol items deselected (-k, -m, --deselect, --lf, ...); "
            "a promotion needs the whole protocol"
        )
    if state.partial_selection:
        problems.append(f"partial run: {state.partial_selection}; a promotion needs the whole protocol")
    state.verdict = _conclude(session, state, problems)
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
    _write_corpus_table(tr, state)
    tr.write_line("")
    verdict_lines = state.verdict.summary_lines()
    tr.write_line(verdict_lines[0], bold=True, green=state.verdict.passed, red=not state.verdict.passed)
    for line in verdict_lines[1:]:
        tr.write_line(line)
    ev = evidence_of(config)
    if ev is not None:
        from pytest_qualify.evidence.finish import terminal_lines

        tr.write_line("")
        for line in terminal_lines(ev):
            tr.write_line(line)


def _write_corpus_table(tr: Any, state: RunState) -> None:
    """The multimodal corpus per kind (x/12 images, x/4 mixed, x/14 videos), when it ran."""
    rows = [
        (str(r.properties["corpus_kind"]), r.item, r.passed)
        for r in state.results.values()
        if r.module == "multimodal" and "corpus_kind" in r.properties
    ]
    if rows:
        from pytest_qualify.corpus import kind_table

        tr.write_line("")
        for line in kind_table(rows):
            tr.write_line(line)


# -- evidence --------------------------------------------------------------------------------------
# Timing, the /metrics cross-check, JUnit properties, waivers, the baseline and the bundle. The
# writers live in pytest_qualify/evidence/ (no pytest there); these are the hooks that feed them.

EVIDENCE_KEY = pytest.StashKey[Any]()


def evidence_of(config: pytest.Config) -> Any:
    """The run's ``evidence.session.EvidenceState``, or None without --qualify."""
    return config.stash.get(EVIDENCE_KEY, None)


def _configure_evidence(config: pytest.Config, state: RunState) -> None:
    """Load waivers and the baseline now, so a bad file is a usage error before any server starts."""
    from pytest_qualify.evidence.baseline import DEFAULT_THRESHOLD_PCT, BaselineError, load_baseline
    from pytest_qualify.evidence.session import EvidenceState
    from pytest_qualify.evidence.waivers import WaiverError, WaiverSet, load_waivers

    ev = EvidenceState()
    waivers_path = state.settings.waivers
    if waivers_path:
        try:
            ev.waivers = WaiverSet(load_waivers(Path(waivers_path)), state.profile.waivable_modules, str(waivers_path))
        except WaiverError as exc:
            raise pytest.UsageError(f"--qualify-waivers: {exc}") from None
    fail_pct = state.settings.fail_on_regression_pct
    baseline_path = state.settings.baseline
    if fail_pct is not None:
        try:
            ev.regression_threshold_pct = float(fail_pct)
        except ValueError:
            raise pytest.UsageError(f"--qualify-fail-on-regression: expected a percentage, got {fail_pct!r}") from None
        if ev.regression_threshold_pct < 0:
            raise pytest.UsageError(f"--qualify-fail-on-regression: expected a percentage >= 0, got {fail_pct!r}")
        if not baseline_path:
            raise pytest.UsageError("--qualify-fail-on-regression needs --qualify-baseline")
        ev.fail_on_regression = True
    else:
        ev.regression_threshold_pct = DEFAULT_THRESHOLD_PCT
    if baseline_path and not state.is_worker:
        try:
            ev.baseline = load_baseline(Path(baseline_path))
        except BaselineError as exc:
            raise pytest.UsageError(f"--qualify-baseline: {exc}") from None
        ev.baseline_path = str(baseline_path)
    try:
        ev.workers = int(getattr(config.option, "numprocesses", 0) or 0)
    except (TypeError, ValueError):
        ev.workers = 0
    config.stash[EVIDENCE_KEY] = ev
    if not state.is_worker and not config.pluginmanager.has_plugin("qualify-evidence"):
        config.pluginmanager.register(_EvidenceHooks(state, ev), "qualify-evidence")


def _scrape(state: RunState, name: str, client: Any = None) -> Any:
    """GET /metrics, keep it as ``metrics-<name>.prom`` and return the parsed snapshot, or the
    error text: a missing /metrics (a router in front of vLLM) costs the cross-check, not the run.
    Without ``client`` a short-lived one is used (the session's is closed by the end of the run)."""
    from pytest_qualify.evidence.bundle import save_snapshot

    own = client is None
    try:
        if own:
            client = _make_client(state)
        try:
            text = client.http.get("/metrics", timeout=10.0).raise_for_status().text
        finally:
            if own:
                client.close()
        return save_snapshot(state.run_dir, name, text, secrets_of(state))
    except Exception as exc:  # noqa: BLE001 - any failure is recorded as the reason
        return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


class _EvidenceHooks:
    """Controller-side evidence hooks (they see xdist workers' reports too)."""

    def __init__(self, state: RunState, ev: Any) -> None:
        from pytest_qualify.evidence.session import EvidenceCollector

        self.state = state
        self.ev = ev
        self.collector = EvidenceCollector(ev)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.collector.pytest_runtest_logreport(report)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        # After the plugin's own sessionstart has started the server: the run's first scrape.
        state = self.state
        if session.config.option.collectonly or state.startup_error or not state.base_url:
            return
        self._keep("start", _scrape(state, "start"))

    def scrape_end(self) -> None:
        state = self.state
        if state.startup_error or not state.base_url:
            return
        if state.target is not None and state.target.died():
            self.ev.metrics_errors["end"] = "server died before the end of the run"
            return
        self._keep("end", _scrape(state, "end"))

    def _keep(self, name: str, result: Any) -> None:
        if isinstance(result, str):
            self.ev.metrics_errors[name] = result
        else:
            self.ev.snapshots[name] = result


def _conclude(session: pytest.Session, state: RunState, problems: list[str]) -> gate_mod.GateVerdict:
    """The verdict (waivers and baseline applied) and the bundle, written whatever happened."""
    from functools import partial

    from pytest_qualify.evidence.finish import WAIVER_USAGE_ERROR, conclude, death_of

    evaluate = partial(gate_mod.evaluate, modules=module_registry(), required=state.profile.required_modules)
    ev = evidence_of(session.config)
    died = None
    if not state.dead:
        died = death_of(state)
        if died:
            problems.append(f"server died during the run: {died}")
    if ev is None:
        return evaluate(state.results.values(), run_problems=problems)
    hooks = session.config.pluginmanager.get_plugin("qualify-evidence")
    if hooks is not None:
        hooks.scrape_end()
    verdict = conclude(state, ev, problems=problems, evaluate=evaluate, secrets=secrets_of(state), died=died)
    _add_junit_suite_properties(session.config, ev)
    if any(p.startswith(WAIVER_USAGE_ERROR) for p in problems):
        session.exitstatus = pytest.ExitCode.USAGE_ERROR
    elif verdict.passed and verdict.waived and session.exitstatus == pytest.ExitCode.TESTS_FAILED:
        # A PASS whose only failures are waived corpus items exits 0 (they stay listed as failed);
        # any other failed test in the session keeps the failing status.
        waived_reports = sum(ev.cases[r.nodeid].failed_reports for r in verdict.waived if r.nodeid in ev.cases)
        if session.testsfailed == waived_reports:
            session.exitstatus = pytest.ExitCode.OK
    return verdict


def _add_junit_suite_properties(config: pytest.Config, ev: Any) -> None:
    """Suite properties into pytest's own --junitxml file too (its writer runs after this hook)."""
    if ev.summary is None:
        return
    try:
        from _pytest.junitxml import xml_key
    except ImportError:  # pytest moved it: the bundle's junit.xml still has them
        return
    xml = config.stash.get(xml_key, None)
    if xml is None:
        return
    from pytest_qualify.evidence.bundle import redact
    from pytest_qualify.evidence.junit import suite_properties

    state = state_of(config)
    secrets = secrets_of(state) if state is not None else ()
    for name, value in suite_properties(ev.summary):
        xml.add_global_property(name, redact(value, secrets))


def _finalize_evidence(config: pytest.Config) -> None:
    state, ev = state_of(config), evidence_of(config)
    if state is None or ev is None or state.is_worker or config.option.collectonly:
        return
    from pytest_qualify.evidence.finish import finalize

    error = finalize(state, ev, secrets_of(state))
    if error:
        tr = config.pluginmanager.get_plugin("terminalreporter")
        if tr is not None:
            tr.write_line(f"qualify: {error}", red=True)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    """Scrape /metrics around each context-lane item: the server's own TTFT for the lane and any
    prefix-cache hit during it land in the item's properties."""
    state = state_of(item.config)
    props = dict(item.user_properties)
    lane = props.get("lane")
    if state is None or lane is None or state.client is None or state.startup_error or state.dead:
        return (yield)
    from pytest_qualify.evidence.finish import lane_metrics_name

    label, rep = str(props.get("item", item.name)), props.get(REPETITION_KEY, 1)
    before = _scrape(state, lane_metrics_name(label, str(lane), rep, "before"), state.client)
    try:
        return (yield)
    finally:
        after = _scrape(state, lane_metrics_name(label, str(lane), rep, "after"), state.client)
        if isinstance(before, str) or isinstance(after, str):
            item.user_properties.append(("metrics_error", before if isinstance(before, str) else after))
        else:
            from pytest_qualify.evidence.metrics import delta, lane_properties

            requests = dict(item.user_properties).get("requests")
            item.user_properties.extend(lane_properties(delta(before, after), requests).items())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Protocol names for pytest's own --junitxml too: ``module``, and ``reason`` on failure
    (user properties reach the file from the teardown report, also under xdist)."""
    report = yield
    props = item.user_properties
    keys = {k for k, _ in props}
    if MODULE_KEY in keys:
        if "module" not in keys:
            props.append(("module", dict(props)[MODULE_KEY]))
        if report.failed and REASON_KEY not in keys:
            props.append((REASON_KEY, ("" if report.when == "call" else f"[{report.when}] ") + _reason(report)))
        if report.when == "teardown":
            # Every protocol name on every test case, empty where the item has no such value.
            from pytest_qualify.evidence.junit import PROTOCOL_PROPERTIES

            missing = [(k, "") for k in PROTOCOL_PROPERTIES if k not in keys and k != "module"]
            props.extend(missing)
            report.user_properties.extend(missing)
    return report


def pytest_collection_finish(session: pytest.Session) -> None:
    """A waiver that names a hard serving-contract test is a usage error, found at collection.
    (An xdist worker cannot raise one cleanly: there the controller finds it at the end of the
    run, from the results, and exits with the usage-error status and the reason.)"""
    state, ev = state_of(session.config), evidence_of(session.config)
    if state is None or ev is None or ev.waivers is None or state.is_worker:
        return
    from pytest_qualify.evidence.waivers import Candidate, hard_module_conflicts, item_ids

    candidates = [
        Candidate(item.nodeid, module, item_ids(item.nodeid, _item_label(item)))
        for item in session.items
        if (module := module_of(item)) is not None
    ]
    conflicts = hard_module_conflicts(ev.waivers.waivers, candidates, ev.waivers.waivable_modules)
    if conflicts:
        raise pytest.UsageError("--qualify-waivers: " + "; ".join(conflicts))
