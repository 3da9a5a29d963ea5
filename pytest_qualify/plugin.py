"""pytest-qualify's entry point: options, configuration, and one plugin object per concern.

Each concern lives in ``pytest_qualify/hooks/``, in a module named for it:

- ``collection`` — the protocol suites, repetition, modules outside the profile deselected
- ``xdist``      — handing the controller's one server to xdist workers
- ``server_session`` — the session's one server: start, identity, stop
- ``watch``      — a dead, hung or refusing server, seen from each protocol test
- ``qualify_fixtures`` — ``qualify_ask`` and the other fixtures a protocol test uses
- ``results``    — reports folded into item results, run-level problems, exit status, the table
- ``evidence``   — waivers and baseline, /metrics scrapes, JUnit properties
- ``stage``      — the promotion stage: its modules and lanes, the served identity at both ends
- ``steps``      — the order of the run's start and end steps, written once
- ``hookspec``   — hooks for user plugins (target started, summary fields, summary written, verdict)

Importing this module is cheap: openai, vllm, av and PIL load only when a test uses them.
"""

from __future__ import annotations

import os
import time
import uuid

import pytest

from pytest_qualify.hooks import STATE_KEY, state_of
from pytest_qualify.hooks import (collection, evidence, hookspec, qualify_fixtures, results, server_session, stage, steps,
                                  watch, xdist)
from pytest_qualify.hooks.collection import suites_dir
from pytest_qualify.profiles import ProfileError, builtin_profiles, load_profile
from pytest_qualify.run import RunState
from pytest_qualify.settings import OPTIONS, Mode, Settings, SettingsError, resolve


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hookspec)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("qualify", "protocol-v3 qualification of a vLLM deployment")
    for opt in OPTIONS:
        default_note = f" (default: {opt.default})" if opt.default else ""
        # argparse formats help with %: a literal percent sign is written twice for it only.
        text = f"{opt.help}{default_note}; env {opt.env}, ini {opt.ini}".replace("%", "%%")
        if opt.switch:
            group.addoption(opt.flag, dest=opt.dest, default=None, action="store_const", const="1", help=text)
        else:
            group.addoption(opt.flag, dest=opt.dest, default=None, metavar=opt.metavar, help=text)
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
    settings = _settings(config)
    if settings.active and settings.selftest:
        from pytest_qualify.hooks.selftest_mode import run_selftest

        return run_selftest(config, settings)
    if settings.active and settings.fleet:
        from pytest_qualify.hooks.fleet_mode import run_fleet

        return run_fleet(config, settings)
    return None


def _settings(config: pytest.Config) -> Settings:
    cli = {opt.dest: config.getoption(opt.dest) for opt in OPTIONS}
    try:
        return resolve(cli, os.environ, lambda key: config.getini(key),
                       tuple(config.getoption("qualify_reference_fault")))
    except SettingsError as exc:
        raise pytest.UsageError(str(exc)) from None


def _run_state(config: pytest.Config, settings: Settings) -> RunState:
    """The run's state: a new run id on the controller, the controller's on an xdist worker."""
    try:
        profile = load_profile(settings.profile or "")
    except ProfileError as exc:
        raise pytest.UsageError(f"--qualify: {exc}") from None
    workerinput = xdist.worker_input(config)
    if workerinput is not None:
        run_id = workerinput["qualify_run_id"]
    else:
        run_id = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + uuid.uuid4().hex[:6]
    run_dir = settings.evidence_dir / run_id
    state = RunState(settings, profile, run_id, run_dir, is_worker=workerinput is not None)
    if workerinput is not None:
        return state  # the server's facts come with the controller's hand-over (hooks/xdist.py)
    state.made_evidence_dir = not settings.evidence_dir.exists()
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        probe = run_dir / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise pytest.UsageError(
            f"--qualify-evidence: cannot write the evidence directory {run_dir}: {exc.strerror or exc}"
        ) from None
    return state


def _check_before_start(config: pytest.Config, state: RunState) -> evidence.EvidenceState:
    """Every usage error configure can find (the stage, the target, the faults, a required
    self-test, the waiver and baseline files), before anything is started or written."""
    stage.configure(state)
    if not state.is_worker:
        server_session.preflight(state, collect_only=bool(config.option.collectonly))
    if state.settings.require_selftest and not state.is_worker:
        from pytest_qualify.hooks.selftest_mode import RequiredSelftest

        config.pluginmanager.register(RequiredSelftest.find(state), "qualify-required-selftest")
    config.stash[STATE_KEY] = state
    return evidence.load_evidence_state(config, state)


# hypothesis's pytest plugin, by its entry-point name (``pytest11``).
HYPOTHESIS_PLUGIN = "hypothesispytest"


# First, so the run state exists before any other plugin's configure looks for it.
@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "qualify_repeat(count): pin this module's or test's repetition count (1 opts out of --repeat).",
    )
    config.addinivalue_line(
        "markers", "qualify_module(id): the protocol-v3 module this test belongs to (see modules.toml)."
    )
    config.addinivalue_line(
        "markers", "qualify_reads(id): the test holds another module's answers: it runs only where that module "
                   "runs (in the profile and the stage, at the test's lane).",
    )
    settings = _settings(config)
    pm = config.pluginmanager
    # Without --qualify these two still serve: the suites stay inert, a protocol fixture explains itself.
    pm.register(collection.Collection(), "qualify-collection")
    pm.register(qualify_fixtures, "qualify-fixtures")
    if not settings.active or config.getoption("help", False) or config.getoption("version", 0):
        return  # --help and --version only print: nothing is started, written or judged
    retry = collection.retrying_plugin(config)
    if retry:
        raise pytest.UsageError(retry)
    state = _run_state(config, settings)
    try:
        ev = _check_before_start(config, state)
        no_body = collection.no_test_body(config)
        if no_body:
            raise pytest.UsageError(no_body)
    except pytest.UsageError:
        # A usage error leaves no evidence behind: the run folder made a moment ago goes again.
        steps.discard_run_dir(state)
        raise
    node_ids = [arg for arg in config.option.file_or_dir or [] if "::" in arg]
    if node_ids:
        state.partial_selection = f"test ids selected on the command line ({', '.join(node_ids[:3])})"
    # With --qualify and no test path, run the protocol suites themselves.
    if not config.option.file_or_dir:
        config.args[:] = [str(suites_dir())]

    # One object per concern. The order of registration is the order of their wrappers: the
    # server watch, registered last, wraps the evidence hooks, so a test meets a dead server's
    # failure before a /metrics scrape is tried on it.
    evidence_hooks = evidence.EvidenceHooks(state, ev)
    pm.register(evidence_hooks, "qualify-evidence")
    if not state.is_worker:
        pm.register(results.GateCollector(state), "qualify-gate")
        pm.register(xdist.XdistHandover(), "qualify-xdist")
        session = server_session.ServerSession(config, state)
        pm.register(steps.RunSteps(config, state, ev, session, evidence_hooks), "qualify-steps")
        server_session.install_sigterm_handler()
    else:
        pm.register(steps.WorkerSteps(config, state, evidence_hooks), "qualify-worker-steps")
    server_watch = watch.ServerWatch(state)
    config.stash[watch.WATCH_KEY] = server_watch
    pm.register(server_watch, "qualify-server-watch")
    # The protocol's suites draw nothing with hypothesis at run time (its corpora are stored), yet
    # hypothesis's pytest plugin imports hypothesis in every run's terminal summary: 0.3 s at the end.
    pm.set_blocked(HYPOTHESIS_PLUGIN)


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    state = state_of(config)
    if state is None:
        return None
    s, p = state.settings, state.profile
    target = {Mode.LAUNCH: "launch vLLM", Mode.REFERENCE: "reference server (SIMULATED, not vLLM)"}.get(
        s.mode, f"attach {s.endpoint}"
    )
    if state.simulated and s.mode != Mode.REFERENCE:
        target += " (SIMULATED: the endpoint says so; it can never back a promotion)"
    return [
        f"qualify: profile {p.name} ({p.source}); model {p.deployment.model}"
        + (f" @ {p.deployment.revision}" if p.deployment.revision else "")
        + f"; served name {p.deployment.served_name}",
        f"qualify: target {target}; repeat {s.repeat}; evidence {state.run_dir}",
        stage.header_line(stage.stage_of(state)),
    ] + [plugin.header_line() for plugin in [config.pluginmanager.get_plugin("qualify-required-selftest")] if plugin]
