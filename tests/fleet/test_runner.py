"""The run's own small rules (fleet/runner.py): the replicas a learning channel finds in the router's
round, and the folder each replica's run writes in."""

from __future__ import annotations

from pytest_qualify.fleet.judge import Routing
from pytest_qualify.fleet.runner import _learned, folder_name
from pytest_qualify.fleet.spec import build_spec


def test_the_learned_replicas_are_the_distinct_tokens_of_the_round_each_pinned_with_its_own():
    spec = build_spec(router="http://gw", replica_count=3, channel="llm-d")
    routing = Routing(9, {"tb": 4, "ta": 4}, 0, 1, "served-by x-session-token", failed_by={"tc": 1, "ta": 0})
    found = _learned(spec, routing)
    assert [(r.id, r.pin, r.url) for r in found.replicas] == [("tb", "tb", None), ("ta", "ta", None), ("tc", "tc", None)]
    assert found.learns and found.expected_count == 3 and found.router == "http://gw"
    assert _learned(spec, Routing(9, {}, 0, 9, "")).replicas == ()


def test_a_replicas_folder_is_its_id_where_that_is_a_plain_name_and_never_a_path_otherwise():
    assert folder_name("r1") == "r1" and folder_name("7") == "7" and folder_name("pod-a.ns_1") == "pod-a.ns_1"
    token = "ZGVmYXVsdC9wb2QvYQ+/=="
    shown = folder_name(token)
    assert "/" not in shown and "=" not in shown and shown.startswith("ZGVmYXVsdC9wb2QvYQ____-")
    assert folder_name("..") != ".." and "/" not in folder_name("../x")
    assert folder_name("a/b") != folder_name("a_b") and folder_name("a_b") == "a_b"
