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
            item.user_properties.append(("item", item_label(item)))
            item.user_properties.append((properties.REPETITION, params.get(REPEAT_FIXTURE, 1)))
            item.user_properties.append(("repetitions", repetitions_of(item, state.settings.repeat)))
            if lane_name is not None:
                item.user_properties.append(("lane", lane_name))
            keep.append(item)
        # Last: an item that holds another module's answers finds them already asked (under xdist
        # as well, since items are handed out in this order), so it rarely asks for them itself.
        keep.sort(key=lambda item: item.get_closest_marker("qualify_reads") is not None)
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
