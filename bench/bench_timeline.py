"""A pytest plugin for the bench (``-p bench_timeline``, ``bench/`` on the path): each test's start and
end in epoch seconds, one JSON line each, in ``$BENCH_TIMELINE``; ``bench_wall_vs_engine.py`` lays the
engine's busy intervals over them (per module: the items' time, the engine's share of it, the rest)."""

from __future__ import annotations

import json
import os
import time

import pytest


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):  # type: ignore[no-untyped-def]
    started = time.time()
    try:
        return (yield)
    finally:
        path = os.environ.get("BENCH_TIMELINE")
        if path:
            with open(path, "a", encoding="utf-8") as fh:
                fh.write(json.dumps({"nodeid": item.nodeid, "start": started, "end": time.time()}) + "\n")
