"""The fleet named on the command line (fleet/spec.py): its forms, and each mistake refused with
what to change."""

from __future__ import annotations

import pytest

from pytest_qualify.fleet.spec import FleetUsageError, build_spec, channels


def test_direct_urls_with_and_without_ids():
    spec = build_spec(replicas=["a=http://10.0.0.1:8000", "http://10.0.0.2:8000/"])
    assert [(r.id, r.url, r.pin) for r in spec.replicas] == [
        ("a", "http://10.0.0.1:8000", None), ("replica-2", "http://10.0.0.2:8000", None)]
    assert spec.channel.name == "direct" and spec.router is None


def test_a_router_with_data_parallel_ranks_pins_each_rank():
    spec = build_spec(router="http://gw:8000", replica_count=2, channel="vllm-dp")
    assert [(r.id, r.pin, r.url) for r in spec.replicas] == [("0", "0", None), ("1", "1", None)]
    assert spec.channel.pin_header == "X-data-parallel-rank" and spec.channel.metrics_label == "engine"


def test_a_channel_that_learns_its_ids_takes_the_router_and_the_count_alone():
    spec = build_spec(router="http://gw:8000", replica_count=4, channel="llm-d")
    assert spec.replicas == () and spec.learns and spec.expected_count == 4
    assert spec.as_dict()["replica_count"] == 4 and spec.as_dict()["ids_learned"] is True
    named = build_spec(router="http://gw:8000", replica_ids=["dG9rLWE=", "dG9rLWI="], channel="llm-d")
    assert not named.learns and [(r.id, r.pin) for r in named.replicas] == [("dG9rLWE=", "dG9rLWE="), ("dG9rLWI=", "dG9rLWI=")]
    assert not build_spec(router="http://gw:8000", replica_count=2, channel="vllm-dp").learns


def test_every_channel_row_is_read_from_the_data_file():
    known = channels()
    assert {"direct", "reference", "vllm-dp", "dynamo", "aibrix", "llm-d"} <= set(known)
    assert known["dynamo"].pin_header == "x-dynamo-worker-instance-id"
    assert known["dynamo"].served_by({}, {"nvext": {"worker_id": {"prefill_worker_id": 6, "decode_worker_id": 7}}}) == "7"
    assert known["dynamo"].served_by({}, {"nvext": {}}) is None
    assert known["aibrix"].served_by({"Target-Pod": "pod-a"}) == "pod-a"
    assert known["reference"].served_by({}) is None


def test_a_channel_merges_the_fields_it_asks_for_into_a_request_keeping_the_callers():
    dynamo, direct = channels()["dynamo"], channels()["direct"]
    body = {"model": "m", "nvext": {"extra_fields": ["timing"], "greed_sampling": True}}
    assert dynamo.asks(body) == {"model": "m", "nvext": {"extra_fields": ["timing", "worker_id"], "greed_sampling": True}}
    assert dynamo.asks({"model": "m"}) == {"model": "m", "nvext": {"extra_fields": ["worker_id"]}}
    assert body["nvext"]["extra_fields"] == ["timing"]  # the caller's body is left as it was
    assert direct.asks(body) == body


@pytest.mark.parametrize("kwargs, message", [
    ({}, "name the fleet"),
    ({"replicas": ["ftp://x"]}, "expected an http"),
    ({"router": "http://gw", "replica_count": 3}, "has no pin"),
    ({"router": "http://gw", "replica_count": 3, "channel": "dynamo"}, "--replica-ids"),
    ({"router": "http://gw", "channel": "llm-d"}, "--replica-count N \\(their x-session-token values are learned"),
    ({"router": "http://gw", "replica_count": 0, "channel": "llm-d"}, "--replica-count 0: expected at least 1"),
    ({"replicas": ["http://x"], "replica_count": 2, "channel": "llm-d"}, "--replica-count 2 but 1 replicas"),
    ({"router": "http://gw", "replica_count": 3, "replica_ids": ["a", "b"], "channel": "reference"}, "but 2 replicas"),
    ({"replicas": ["a=http://x", "a=http://y"]}, "unique"),
    ({"replicas": ["http://x"], "channel": "nope"}, "expected one of"),
    ({"replicas": ["http://x"], "ready_timeout_s": 0}, "--ready-timeout"),
    ({"replicas": ["http://x"], "probes_per_replica": 0}, "--probes"),
])
def test_a_fleet_that_cannot_be_asked_as_named_is_a_usage_error(kwargs, message):
    with pytest.raises(FleetUsageError, match=message):
        build_spec(**kwargs)
