"""The reference server's record of its faults (reference/fault_log.py): every armed fault is on
record from the start, not engaged; a fault is recorded as engaged only where it changed what was
served, with the chat request that met it; a count that is never reached stays not engaged; the
record is on disk before a fault's effect, so a fault that ends the process is on record too; and
the plugin's reading names each fault that never engaged."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from pytest_qualify.profiles import load_profile
from pytest_qualify.reference.fault_effects import FaultEffects
from pytest_qualify.reference.fault_log import FAULT_LOG, read_record
from pytest_qualify.reference.faults import Faults, what_it_breaks
from pytest_qualify.reference.state import PrefixCache, ReferenceState

from ..helpers import wait_for_health
from pytest_qualify.tasks.fixture_data import smoke_questions
from .in_thread import serving

PROFILE = load_profile("small")


def _on_disk(path: Path) -> dict[str, dict]:
    return {row["name"]: row for row in json.loads(path.read_text())["faults"]}


@pytest.fixture
def served(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[str, Path]]:
    """A reference server in a thread with the test's faults, keeping its record in ``tmp_path``."""
    faults = Faults.parse(request.param)
    log = tmp_path / FAULT_LOG
    faults.log.keep(log)
    with serving(ReferenceState(PROFILE, faults, None, 0.0, 0.0)) as url:
        yield url, log


def _ask(url: str) -> httpx.Response:
    question = smoke_questions()[0]
    body = {"model": PROFILE.deployment.served_name, "messages": [{"role": "user", "content": question.prompt}],
            "max_tokens": 64, "temperature": 0}
    return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=30)


@pytest.mark.parametrize("served", [("drop_connection=3", "answer_swap_after=3", "pad_answer", "die_after=100000")],
                         indirect=True)
def test_each_fault_is_recorded_at_the_request_that_met_it_and_a_count_never_reached_never(served):
    url, log = served
    assert {name: row["engaged"] for name, row in _on_disk(log).items()} == {
        "drop_connection": False, "answer_swap_after": False, "pad_answer": False, "die_after": False}
    _ask(url)
    _ask(url)
    rows = _on_disk(log)
    assert rows["pad_answer"]["engaged"] is True and rows["pad_answer"]["chat_requests"] == 1
    assert not rows["drop_connection"]["engaged"] and not rows["answer_swap_after"]["engaged"]
    with pytest.raises(httpx.HTTPError):
        _ask(url)  # the third: closed without an answer
    rows = _on_disk(log)
    assert rows["drop_connection"]["engaged"] is True and rows["drop_connection"]["chat_requests"] == 3
    # The third request never reached an answer, so the swap (after 3) has not changed one yet.
    assert rows["answer_swap_after"]["engaged"] is False
    reply = _ask(url)
    assert reply.json()["choices"][0]["message"]["content"].isupper()
    rows = _on_disk(log)
    assert rows["answer_swap_after"]["engaged"] is True and rows["answer_swap_after"]["chat_requests"] == 4
    assert rows["die_after"]["engaged"] is False and rows["die_after"]["chat_requests"] is None
    assert rows["answer_swap_after"]["after_s"] >= rows["pad_answer"]["after_s"] >= 0


@pytest.mark.parametrize("served", [("health_500", "wrong_identity", "engine_version=0.26.0", "stream_no_done")],
                         indirect=True)
def test_faults_met_outside_chat_are_recorded_before_any_chat_request(served):
    url, log = served
    assert not any(row["engaged"] for row in _on_disk(log).values())
    httpx.get(f"{url}/health", timeout=10)
    httpx.get(f"{url}/v1/models", timeout=10)
    httpx.get(f"{url}/version", timeout=10)
    rows = _on_disk(log)
    for name in ("health_500", "wrong_identity", "engine_version"):
        assert rows[name]["engaged"] is True and rows[name]["chat_requests"] == 0, rows[name]
    # A plain answer has no stream to end without [DONE]: that fault has met nothing yet.
    _ask(url)
    assert _on_disk(log)["stream_no_done"]["engaged"] is False


def test_the_record_is_on_disk_before_the_fault_ends_the_process(tmp_path):
    # die_after exits the process on the request that meets it: the record must already say so.
    faults = Faults.parse(["die_after=2"])
    faults.log.keep(tmp_path / FAULT_LOG)
    count = [0]
    faults.log.count_chat(lambda: count[0])
    effects = FaultEffects(faults)
    for n in (1, 2):
        count[0] = n
        assert effects.arrival(n).exit is False
    assert _on_disk(tmp_path / FAULT_LOG)["die_after"]["engaged"] is False
    count[0] = 3
    assert effects.arrival(3).exit is True
    assert _on_disk(tmp_path / FAULT_LOG)["die_after"] | {"after_s": None} == {
        "fault": "die_after=2", "name": "die_after", "what": "the process exits after 2 chat requests",
        "engaged": True, "chat_requests": 3, "after_s": None}


def test_the_server_process_keeps_its_record_where_it_is_told_and_dies_on_record(tmp_path):
    from pytest_qualify.server.lifecycle import free_port

    port = free_port()
    log = tmp_path / FAULT_LOG
    proc = subprocess.Popen([sys.executable, "-m", "pytest_qualify.reference", "--port", str(port), "--profile",
                             "small", "--fault", "die_after=1", "--fault-log", str(log)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for_health(url, 30)
        assert _on_disk(log)["die_after"]["engaged"] is False
        assert _ask(url).status_code == 200
        with pytest.raises(httpx.HTTPError):
            _ask(url)
        assert proc.wait(timeout=10) == 3
    finally:
        proc.kill()
        proc.wait()
    row = _on_disk(log)["die_after"]
    assert row["engaged"] is True and row["chat_requests"] == 2
    assert not list(tmp_path.glob(".*"))  # no half-written file left beside it


def test_a_cache_hit_is_the_salt_fault_only_where_another_salt_cached_it():
    hits: list[bool] = []
    cache = PrefixCache(True, lambda: hits.append(True))
    ids = list(range(64))
    assert cache.lookup_and_insert(ids, "a") == 0
    assert cache.lookup_and_insert(ids, "a") == 64 and hits == []  # the same salt hits on any server
    assert cache.lookup_and_insert(ids, "b") == 64 and hits == [True]
    honest = PrefixCache(False, lambda: hits.append(False))
    honest.lookup_and_insert(ids, "a")
    assert honest.lookup_and_insert(ids, "b") == 0 and hits == [True]


def test_the_reading_names_each_fault_that_never_engaged(tmp_path):
    faults = Faults.parse(["die_after=100000", "pad_answer"])
    faults.log.keep(tmp_path / FAULT_LOG)
    faults.engage("pad_answer")
    record = read_record(tmp_path, ["die_after=100000", "pad_answer"])
    assert [(f.fault, f.engaged) for f in record.faults] == [("die_after=100000", False), ("pad_answer", True)]
    assert record.never_engaged() == [
        "fault die_after=100000 never engaged: the process exits after 100000 chat requests, and no request of this "
        "run met it; the run cannot show that the fault is caught"]
    assert record.as_dict()["recorded_in"] == FAULT_LOG


def test_no_record_leaves_every_fault_unproven(tmp_path):
    record = read_record(tmp_path, ["pad_answer", "drop_connection=5"])
    assert not any(f.engaged for f in record.faults) and record.recorded_in is None
    assert record.never_engaged() == [
        f"fault pad_answer, drop_connection=5 not shown to engage: the reference server kept no record of its "
        f"faults ({FAULT_LOG})"]
    (tmp_path / FAULT_LOG).write_text("{not json")
    assert "cannot be read" in read_record(tmp_path, ["pad_answer"]).never_engaged()[0]


def test_a_fault_not_switched_on_is_never_recorded(tmp_path):
    faults = Faults.parse(["pad_answer"])
    faults.log.keep(tmp_path / FAULT_LOG)
    assert faults.engage("smoke_empty") is True  # reads inside a condition, records nothing
    assert list(_on_disk(tmp_path / FAULT_LOG)) == ["pad_answer"]


@pytest.mark.parametrize("description, arg, expected", [
    ("=N: the process exits after N chat requests", "7", "the process exits after 7 chat requests"),
    ("=N: the process exits after N chat requests", "", "the process exits after N chat requests"),
    ("[=S]: the server waits S seconds (default 5)", "2", "the server waits 2 seconds (default 5)"),
    ("=N: the Nth chat request's connection is closed", "100000", "the 100000th chat request's connection is closed"),
    ("=N: the Nth chat request's connection is closed", "2", "the 2nd chat request's connection is closed"),
    ("a plain switch", "", "a plain switch"),
])
def test_what_a_fault_breaks_reads_with_its_argument(description, arg, expected):
    assert what_it_breaks(description, arg) == expected
