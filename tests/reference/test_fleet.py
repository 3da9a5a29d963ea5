"""The SIMULATED fleet (reference/fleet.py), in process: the router's round and its served-by header,
the pin, a stream passed through, and each replica fault's effect, on its replica only, recorded as
engaged."""

from __future__ import annotations

import json

import httpx
import pytest

from pytest_qualify.profiles import load_profile
from pytest_qualify.reference.faults import FaultError
from pytest_qualify.reference.fleet import PIN, SERVED_BY, fleet_map, parse_replica_faults, start_fleet

def _chat() -> dict:
    from pytest_qualify.tasks.fixture_data import smoke_questions

    question = next(q for q in smoke_questions() if q.answer == "Paris")
    return {"model": "small-chat-4k", "max_tokens": 16, "messages": [{"role": "user", "content": question.prompt}]}


CHAT = _chat()


@pytest.fixture
def fleet(tmp_path):
    """Start a fleet of 4 with the given replica faults; every server is shut down after the test."""
    started = []

    def start(*faults: str, replicas: int = 4):
        router, servers = start_fleet("127.0.0.1", 0, load_profile("small"), replicas,
                                      parse_replica_faults(faults, replicas), tmp_path)
        started.extend([router, *servers.values()])
        return fleet_map(router, servers)

    yield start
    for s in started:
        s.shutdown()
        s.server_close()


def engaged(tmp_path, rid: str) -> dict[str, bool]:
    data = json.loads((tmp_path / f"{rid}-faults.json").read_text())
    return {f["name"]: f["engaged"] for f in data["faults"]}


def test_the_router_serves_in_a_round_and_names_the_replica(fleet):
    where = fleet()
    with httpx.Client(base_url=where["router"]) as http:
        seen = [http.get("/v1/models").headers[SERVED_BY] for _ in range(8)]
        pinned = http.post("/v1/chat/completions", json=CHAT, headers={PIN: "r3"})
        unknown = http.get("/health", headers={PIN: "r9"})
    assert seen == ["r1", "r2", "r3", "r4"] * 2
    assert pinned.status_code == 200 and pinned.headers[SERVED_BY] == "r3"
    assert pinned.json()["choices"][0]["message"]["content"] == "Paris"
    assert unknown.status_code == 404 and "r9" in unknown.text
    direct = [httpx.get(r["url"] + "/health") for r in where["replicas"]]
    assert [d.headers[SERVED_BY] for d in direct] == ["r1", "r2", "r3", "r4"]


def test_a_stream_passes_the_router_piece_by_piece(fleet):
    where = fleet()
    with httpx.Client(base_url=where["router"]) as http, \
            http.stream("POST", "/v1/chat/completions", json={**CHAT, "stream": True}, headers={PIN: "r2"}) as r:
        lines = [line for line in r.iter_lines() if line.startswith("data: ")]
        served = r.headers[SERVED_BY]
    assert served == "r2" and lines[-1] == "data: [DONE]"
    text = "".join(json.loads(line[6:])["choices"][0]["delta"].get("content") or "" for line in lines[:-1])
    assert text == "Paris"


def test_each_replica_fault_changes_its_replica_only(fleet, tmp_path):
    where = fleet("1:other_revision", "2:other_flags", "3:degenerate", "4:generation_500")
    urls = {r["id"]: r["url"] for r in where["replicas"]}
    roots = {rid: httpx.get(u + "/v1/models").json()["data"][0]["root"] for rid, u in urls.items()}
    assert roots["r1"].startswith("pytest-qualify/small-chat/snapshots/") and \
        {roots["r2"], roots["r3"], roots["r4"]} == {"pytest-qualify/small-chat"}
    metrics = {rid: httpx.get(u + "/metrics").text for rid, u in urls.items()}
    assert 'cache_dtype="fp8"' in metrics["r2"] and 'block_size="32"' in metrics["r2"]
    assert 'cache_dtype="auto"' in metrics["r1"] and 'block_size="16"' in metrics["r1"]
    answers = {rid: httpx.post(u + "/v1/chat/completions", json=CHAT) for rid, u in urls.items()}
    assert answers["r3"].json()["choices"][0]["message"]["content"] == "!" * 16
    assert answers["r4"].status_code == 500 and httpx.get(urls["r4"] + "/health").status_code == 200
    assert answers["r1"].json()["choices"][0]["message"]["content"] == "Paris"
    assert engaged(tmp_path, "r1") == {"other_revision": True}
    assert engaged(tmp_path, "r2") == {"other_flags": True}
    assert engaged(tmp_path, "r3") == {"degenerate": True}
    assert engaged(tmp_path, "r4") == {"generation_500": True}


def test_a_replica_never_routed_to_still_answers_its_pin(fleet, tmp_path):
    where = fleet("2:never_routed", "3:slow=0.2")
    with httpx.Client(base_url=where["router"]) as http:
        seen = {http.get("/v1/models").headers[SERVED_BY] for _ in range(9)}
        pinned = http.get("/v1/models", headers={PIN: "r2"})
    assert seen == {"r1", "r3", "r4"} and pinned.headers[SERVED_BY] == "r2"
    assert engaged(tmp_path, "r2") == {"never_routed": True}
    assert engaged(tmp_path, "r3") == {"slow": False}  # no chat request yet: never engaged


@pytest.mark.parametrize("spec, message", [
    ("5:degenerate", "I from 1 to 4"),
    ("degenerate", "I:NAME"),
    ("2:no_such_fault", "unknown fault 'no_such_fault'"),
])
def test_a_bad_replica_fault_is_refused_by_name(spec, message):
    with pytest.raises(FaultError, match=message):
        parse_replica_faults([spec], 4)


def test_as_one_data_parallel_server_the_router_takes_vllms_rank_pin_and_labels_each_rank(tmp_path):
    from pytest_qualify.fleet.probe import success_counts
    from pytest_qualify.reference.fleet import DP_PIN

    router, servers = start_fleet("127.0.0.1", 0, load_profile("small"), 2, parse_replica_faults([], 2),
                                  data_parallel=True)
    try:
        url = fleet_map(router, servers)["router"]
        with httpx.Client(base_url=url) as http:
            pinned = [http.post("/v1/chat/completions", json=CHAT, headers={DP_PIN: "1"}) for _ in range(3)]
            http.post("/v1/chat/completions", json=CHAT, headers={DP_PIN: "0"})
            metrics = http.get("/metrics").text
    finally:
        for s in [router, *servers.values()]:
            s.shutdown()
            s.server_close()
    assert {p.headers[SERVED_BY] for p in pinned} == {"r2"}
    assert success_counts(metrics, "engine") == {"0": 1.0, "1": 3.0}
    assert "vllm:cache_config_info" in metrics
