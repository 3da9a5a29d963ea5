"""Collection and repetition: the protocol suites, each protocol test parametrised ``--repeat``
times (ids ``rep1of3`` ...), modules outside the profile or the run's stage (and context lanes
outside the stage) deselected, and every protocol item
labelled (module, item, repetition, lane) in its user properties, which survive xdist."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pytest_qualify.hooks import state_of
from pytest_qualify.hooks.stage import stage_of
from pytest_qualify.hooks.xdist import send_to_controller
from pytest_qualify.profiles import Lane, module_registry
from pytest_qualify.repetition import repetition_id, without_repetition
from pytest_qualify.run import module_of
from pytest_qualify import properties

REPEAT_FIXTURE = "qualify_repetition"
PROFILE_DESELECTED = pytest.StashKey[bool]()
FIRST_MODULES = ("smoke",)


def suites_dir() -> Path:
    """The protocol suites: the checkout's ``suites/`` or the installed package's copy."""
    from importlib import resources

    return Path(str(resources.files("pytest_qualify.suites")))


def is_protocol_path(path: Path) -> bool:
    try:
        path.resolve().relative_to(suites_dir().resolve())
    except ValueError:
        return False
    return True


def item_label(item: pytest.Item) -> str:
    """The test id without the repetition: what the report and a waiver name."""
    return without_repetition(item.nodeid.split("::", 1)[-1])


def repetitions_of(item_or_def: Any, default: int) -> int:
    """The ``qualify_repeat`` marker's count (1 opts a test out of ``--repeat``), else ``default``."""
    marker = item_or_def.get_closest_marker("qualify_repeat")
    return int(marker.args[0]) if marker and marker.args else default


# Plugins that run an item more than once: a rerun turns a failure into a pass, a repetition of
# their own multiplies items outside --repeat (the gate counts each repetition as its own item).
# (plugin names as pytest registers them, the options that switch them on for every test, the
# marker that switches them on for one test)
RETRYING_PLUGINS = (
    ("rerunfailures", (("reruns", "--reruns"), ("force_reruns", "--force-reruns")), "reruns", "flaky"),
    ("repeat", (("count", "--count"),), None, "repeat"),
    ("flaky", (("force_flaky", "--force-flaky"),), None, "flaky"),
    ("pytest_retry", (("retries", "--retries"),), "retries", "flaky"),
)


def retrying_plugin(config: pytest.Config) -> str | None:
    """Why a loaded plugin would rerun or repeat every item (a usage error with --qualify), or None."""
    pm = config.pluginmanager
    for name, options, ini, _marker in RETRYING_PLUGINS:
        if not pm.hasplugin(name):
            continue
        for dest, flag in options:
            value = config.getoption(dest, None)
            if _more_than_once(dest, value):
                return _retry_reason(flag, f"{flag} {value}")
        if ini is not None:
            try:
                value = config.getini(ini)
            except (ValueError, KeyError):
                value = None
            if _more_than_once(ini, value):
                return _retry_reason(f"ini key {ini}", f"{ini} = {value}")
    return None


def _more_than_once(dest: str, value: Any) -> bool:
    if value is None or value is False or value == "":
        return False
    if value is True:
        return True
    try:
        number = int(value)
    except (TypeError, ValueError):
        return False
    return number > 1 if dest == "count" else number > 0


def _retry_reason(what: str, given: str) -> str:
    return (f"{what} cannot be combined with --qualify ({given}): a rerun would turn a failure into a pass and a "
            "repetition outside --repeat would count one answer as several (use --repeat N)")


# pytest's options that run no test body (config.option dest, the flag): under them every item
# would "pass" without an answer asked or graded, so a qualification refuses them.
NO_TEST_BODY_OPTIONS = (
    ("collectonly", "--collect-only"),
    ("setuponly", "--setup-only"),
    ("setupplan", "--setup-plan"),
    ("showfixtures", "--fixtures"),
    ("show_fixtures_per_test", "--fixtures-per-test"),
    ("markers", "--markers"),
)


def no_test_body(config: pytest.Config) -> str | None:
    """Why the options given would run no test body (a usage error with --qualify), or None."""
    given = [flag for dest, flag in NO_TEST_BODY_OPTIONS if config.getoption(dest, None)]
    if "--setup-plan" in given:  # pytest turns --setup-only on for it
        given.remove("--setup-only")
    if not given:
        return None
    return (f"{' and '.join(given)} cannot be combined with --qualify: it runs no test body, so no item would be "
            "asked or graded (a qualification runs every item; use --qualify-profiles to list the profiles)")


def retried_items(config: pytest.Config, items: list[pytest.Item]) -> str | None:
    """A protocol item that a loaded rerun or repetition plugin's marker would run more than once."""
    pm = config.pluginmanager
    for name, _options, _ini, marker in RETRYING_PLUGINS:
        if not pm.hasplugin(name):
            continue
        for item in items:
            if module_of(item) is not None and item.get_closest_marker(marker) is not None:
                return _retry_reason(f"marker {marker} (plugin {name})", item.nodeid)
    return None


class Collection:
    """Registered in every run: without ``--qualify`` it keeps the suites inert."""

    def pytest_ignore_collect(self, collection_path: Path, config: pytest.Config) -> bool | None:
        # Without --qualify the protocol suites are inert: plain pytest runs the project's own tests.
        if state_of(config) is None and is_protocol_path(collection_path):
            return True
        return None

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        state = state_of(metafunc.config)
        if state is None or module_of(metafunc.definition) is None:
            return
        count = repetitions_of(metafunc.definition, state.settings.repeat)
        if REPEAT_FIXTURE not in metafunc.fixturenames:
            metafunc.fixturenames.append(REPEAT_FIXTURE)
        metafunc.parametrize(
            REPEAT_FIXTURE,
            range(1, count + 1),
            ids=[repetition_id(i, count) for i in range(1, count + 1)],
            indirect=True,
            scope="session",
        )

    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
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
            params = item.callspec.params if hasattr(item, "callspec") else {}
            lane = params.get("lane")
            lane_name = None if lane is None else lane.name if isinstance(lane, Lane) else str(lane)
            stage = stage_of(state).stage
            # An item that holds another module's answers is generated only where that module runs:
            # dropped with the profile's selection, not a deselection of the user's.
            reads = item.get_closest_marker("qualify_reads")
            if not all(stage.selects(m, lane_name) for m in (module, *(reads.args if reads else ()))):
                if module not in state.profile.required_modules:
                    state.deselected_modules.add(module)
                drop.append(item)
                continue
            item.user_properties.append((properties.MODULE, module))
            item.user_properties.append((properties.ITEM, item_label(item)))
            item.user_properties.append((properties.REPETITION, params.get(REPEAT_FIXTURE, 1)))
            item.user_properties.append((properties.REPETITIONS, repetitions_of(item, state.settings.repeat)))
            if lane_name is not None:
                item.user_properties.append((properties.LANE, lane_name))
            if is_protocol_path(item.path):
                item.user_properties.append((properties.JOURNALED, True))
            keep.append(item)
        # First the modules that say whether the deployment can be judged at all (smoke: health,
        # identity, engine version), so a deployment that cannot be identified costs seconds, not
        # the whole protocol. Last: an item that holds another module's answers finds them already
        # asked (under xdist as well, since items are handed out in this order).
        keep.sort(key=lambda item: (item.get_closest_marker("qualify_reads") is not None,
                                    module_of(item) not in FIRST_MODULES))
        if drop:
            for item in drop:
                item.stash[PROFILE_DESELECTED] = True
            config.hook.pytest_deselected(items=drop)
        items[:] = keep

    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        if not items:
            return
        state = state_of(items[0].config)
        if state is None:
            return
        state.user_deselected += sum(
            1 for item in items if module_of(item) is not None and not item.stash.get(PROFILE_DESELECTED, False)
        )
        if state.is_worker:
            send_to_controller(items[0].config, "qualify_user_deselected", state.user_deselected)
