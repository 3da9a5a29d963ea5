"""The attribution proxy (fleet/attribution.py) in front of the SIMULATED fleet's router: it adds the
replica's pin, passes plain answers and streams back unchanged, and counts who served each chat answer.
Through a Dynamo-shaped frontend (``dynamo_frontend.py``) it asks for the worker and reads it."""

from __future__ import annotations

import json

import httpx
import pytest

from pytest_qualify.fleet.attribution import AttributionProxy
from pytest_qualify.fleet.probe import Asker, chat_probe
from pytest_qualify.fleet.spec import channels
from pytest_qualify.profiles import load_profile
from pytest_qualify.reference.fleet import PIN, fleet_map, parse_replica_faults, start_fleet

from . import dynamo_frontend


@pytest.fixture
def fleet():
    started, servers = start_fleet("127.0.0.1", 0, load_profile("small"), 3, parse_replica_faults([], 3))
    yield fleet_map(started, servers)
    for s in [started, *servers.values()]:
        s.shutdown()
        s.server_close()


@pytest.fixture
def router(fleet):
    return fleet["router"]


@pytest.fixture
def dynamo(fleet):
    """Dynamo workers 7 and 8 over the reference replicas r1 and r2."""
    with dynamo_frontend.frontend({"7": fleet["replicas"][0]["url"], "8": fleet["replicas"][1]["url"]}) as url:
        yield url


def ask(url: str, stream: bool) -> httpx.Response:
    body = {"model": "small-chat-4k", "max_tokens": 8, "stream": stream, "messages": [{"role": "user", "content": "hi"}]}
    return httpx.post(url + "/v1/chat/completions", json=body)


def test_every_answer_is_pinned_and_counted(router):
    with AttributionProxy(router, channels()["reference"], (PIN, "r2")) as proxy:
        plain = [ask(proxy.url, False) for _ in range(3)]
        streamed = ask(proxy.url, True)
        models = httpx.get(proxy.url + "/v1/models")
        tally = proxy.tally()
    assert all(r.status_code == 200 for r in plain) and models.status_code == 200
    assert streamed.text.rstrip().endswith("data: [DONE]")
    assert json.loads(streamed.text.split("\n")[0][6:])["object"] == "chat.completion.chunk"
    assert (tally.chat_requests, tally.answered, tally.served_by) == (4, 4, {"r2": 4})


def test_without_a_pin_the_round_shows_in_the_tally(router):
    with AttributionProxy(router, channels()["reference"], None) as proxy:
        for _ in range(6):
            ask(proxy.url, False)
        tally = proxy.tally()
    assert tally.served_by == {"r1": 2, "r2": 2, "r3": 2}


def test_a_channel_that_names_no_replica_counts_answers_unnamed(router):
    with AttributionProxy(router, channels()["direct"], (PIN, "r1")) as proxy:
        ask(proxy.url, False)
        assert proxy.tally().served_by == {None: 1}


def test_through_dynamo_every_answer_asks_for_its_worker_and_is_counted_by_it(dynamo):
    with AttributionProxy(dynamo, channels()["dynamo"], (dynamo_frontend.PIN, "8")) as proxy:
        plain = ask(proxy.url, False)
        streamed = ask(proxy.url, True)
        tally = proxy.tally()
    assert plain.json()["nvext"]["worker_id"] == {"prefill_worker_id": 8, "decode_worker_id": 8}
    assert '"decode_worker_id": 8' in streamed.text.rstrip().split("\n")[-3]  # only the stream's last chunk names it
    assert (tally.answered, tally.served_by) == (2, {"8": 2})


def test_a_dynamo_probe_names_its_worker_pinned_or_routed(dynamo):
    chan = channels()["dynamo"]
    pinned = Asker(dynamo, api_key=None, pin=(chan.pin_header or "", "7"))
    routed = Asker(dynamo, api_key=None)
    try:
        assert [chat_probe(pinned, "small-chat-4k", chan).served_by for _ in range(2)] == ["7", "7"]
        assert sorted(chat_probe(routed, "small-chat-4k", chan).served_by or "-" for _ in range(2)) == ["7", "8"]
    finally:
        pinned.close()
        routed.close()
