"""``python -m pytest_qualify fleet`` end to end on the SIMULATED fleet: each replica graded by its own
run of the post-promotion stage (an inner pytest each), on a profile cut to the smoke module so a
fleet of 4 costs four short runs. A healthy fleet passes with every replica attributed; each replica
fault fails the fleet naming exactly its replica; a replica missing, not ready or extra is named; one
CI job per replica merges into the same verdict; each channel the fleet can be tested on here (the
reference's served-by header, vLLM's data-parallel ranks, Dynamo's worker id, llm-d's session tokens
learned from its picker's answers, AIBrix pods at their own URLs, /metrics deltas) pins and
attributes."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from pytest_qualify.__main__ import main
from pytest_qualify.profiles import load_profile
from pytest_qualify.reference.fleet import fleet_map, parse_replica_faults, start_fleet
from pytest_qualify.server.lifecycle import free_port

from ..helpers import write_profile

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def profile(tmp_path_factory) -> str:
    return str(write_profile(tmp_path_factory.mktemp("profile"), ("smoke",), name="fleet-smoke"))


@pytest.fixture
def live_fleet():
    """A SIMULATED fleet in this process, for a fleet named by hand (router, URLs)."""
    started = []

    def start(replicas: int, *faults: str, data_parallel: bool = False) -> dict:
        router, servers = start_fleet("127.0.0.1", 0, load_profile("small"), replicas, parse_replica_faults(faults, replicas),
                                      data_parallel=data_parallel)
        started.extend([router, *servers.values()])
        return fleet_map(router, servers)

    yield start
    for s in started:
        s.shutdown()
        s.server_close()


def run(out: Path, *args: str) -> tuple[int, dict]:
    code = main(["fleet", "--out", str(out), *args])
    return code, json.loads((out / "fleet.json").read_text())


def rows(doc: dict) -> dict[str, dict]:
    return {r["replica"]: r for r in doc["decision"]["replicas"]}


def test_a_healthy_fleet_of_4_passes_with_every_replica_attributed(profile, tmp_path):
    code, doc = run(tmp_path, "--qualify", profile, "--endpoint", "reference", "--replica-count", "4")
    assert code == 0 and doc["decision"]["result"] == "PASS", doc["decision"]["reasons"]
    for rid, row in rows(doc).items():
        checks = {c["check"]: c for c in row["checks"]}
        assert row["hits"] > 0 and checks["coverage"]["result"] == "PASS"
        assert f"every one served by {rid} (served-by x-served-by)" in checks["coverage"]["detail"]
        assert checks["routed"]["result"] == "PASS" and checks["graded"]["result"] == "PASS"
    assert len({r["fingerprint"] for r in rows(doc).values()}) == 1
    cases = ET.parse(tmp_path / "junit.xml").getroot().findall(".//testcase[@classname='qualify.fleet.replica']")
    assert [c.get("name") for c in cases] == ["r1", "r2", "r3", "r4"]
    assert all(c.find("failure") is None and c.find("error") is None for c in cases)
    assert all(Path(r["graded"]["bundle"], "summary.json").is_file() for r in doc["replicas"])


@pytest.mark.parametrize("fault, replica, reason", [
    ("2:other_revision", "r2", "fingerprint: "),
    ("3:other_flags", "r3", "replica 'fp8'; cache.block_size: 3 of 4 replicas show '16', this one '32'"),
    ("2:degenerate", "r2", "graded: post-promotion stage FAIL"),
    ("4:generation_500", "r4", "probes: 3 of 3 pinned chat probes failed (HTTP 500) while /health answers 200"),
    ("3:never_routed", "r3", "routed: never served a request of the router's round: 0 of 12 probes"),
    ("1:slow=1.2", "r1", "probes: slow: pinned probes' end to end p50"),
])
def test_each_replica_fault_fails_the_fleet_naming_exactly_its_replica(profile, tmp_path, fault, replica, reason):
    # The limit only where the fault is latency, and far from both sides: a loaded machine slows the
    # healthy replicas' probes (about 0.01 s) too.
    limit = ["--replica-e2e-limit", "0.6"] if fault.startswith("1:slow") else []
    code, doc = run(tmp_path, "--qualify", profile, "--endpoint", "reference", "--replica-count", "4",
                    "--replica-fault", fault, *limit)
    assert code == 1 and doc["decision"]["failing_replicas"] == [replica], doc["decision"]["reasons"]
    assert any(reason in r for r in rows(doc)[replica]["reasons"]), rows(doc)[replica]["reasons"]
    assert all(row["result"] == "PASS" for rid, row in rows(doc).items() if rid != replica)
    engaged = [f for f in next(r for r in doc["replicas"] if r["id"] == replica)["reference_faults"]]
    assert engaged and all(f["engaged"] for f in engaged)
    red = [c.get("name") for c in ET.parse(tmp_path / "junit.xml").getroot().findall(".//testcase")
           if c.find("failure") is not None]
    assert replica in red and not {"r1", "r2", "r3", "r4"} - {replica} & set(red)


def test_a_replica_that_never_gets_ready_is_named_after_a_bounded_wait(profile, tmp_path, live_fleet):
    where = live_fleet(1)
    dead = f"http://127.0.0.1:{free_port()}"
    code, doc = run(tmp_path, "--qualify", profile, "--replicas", f"r1={where['replicas'][0]['url']}", f"r2={dead}",
                    "--ready-timeout", "1.5")
    assert code == 1 and doc["decision"]["failing_replicas"] == ["r2"]
    reasons = rows(doc)["r2"]["reasons"]
    assert reasons[0].startswith("ready: not ready after the bounded wait of 1.") and "ConnectError" in reasons[0]
    assert "coverage: no graded answer came from r2: the replica was never reached" in reasons
    assert doc["replicas"][1]["readiness"]["waited_s"] < 10
    assert rows(doc)["r1"]["result"] == "PASS"


def test_a_replica_behind_the_router_that_the_fleet_does_not_name_is_extra(profile, tmp_path, live_fleet):
    where = live_fleet(3)
    code, doc = run(tmp_path, "--qualify", profile, "--router", where["router"], "--replica-ids", "r1,r2",
                    "--channel", "reference")
    assert code == 1 and doc["decision"]["failing_replicas"] == []
    assert doc["decision"]["reasons"] == [
        "fleet: membership: the router sent requests to replicas the fleet does not name: r3 (2 probes)"]


def test_with_no_served_by_the_round_is_read_from_each_replicas_metrics(profile, tmp_path, live_fleet):
    where = live_fleet(2, "2:never_routed")
    urls = [f"{r['id']}={r['url']}" for r in where["replicas"]]
    code, doc = run(tmp_path, "--qualify", profile, "--router", where["router"], "--replicas", *urls)
    assert doc["routing"]["attributed_by"] == "each replica's /metrics request count, unique-prefix probes one at a time"
    assert doc["routing"]["served_by"] == {"r1": 6}
    assert code == 1 and doc["decision"]["failing_replicas"] == ["r2"]
    coverage = {c["check"]: c for c in rows(doc)["r1"]["checks"]}["coverage"]["detail"]
    assert "asked only of r1, whose /metrics request count rose by" in coverage


def test_one_ci_job_per_replica_merges_into_one_fleet_verdict(profile, tmp_path, live_fleet):
    where = live_fleet(2)
    args = ["--qualify", profile, "--router", where["router"], "--replica-ids", "r1,r2", "--channel", "reference"]
    first, part = run(tmp_path / "job-r1", *args, "--only", "r1")
    assert first == 2 and [r["replica"] for r in part["decision"]["replicas"]] == ["r1"]
    assert main(["fleet-merge", str(tmp_path / "job-r1"), "--out", str(tmp_path / "short")]) == 1
    run(tmp_path / "job-r2", *args, "--only", "r2")
    assert main(["fleet-merge", str(tmp_path / "job-r1"), str(tmp_path / "job-r2"), "--out", str(tmp_path / "merged")]) == 0
    merged = json.loads((tmp_path / "merged" / "fleet.json").read_text())
    assert merged["decision"]["result"] == "PASS" and [r["replica"] for r in merged["decision"]["replicas"]] == ["r1", "r2"]


def test_data_parallel_ranks_are_pinned_and_attributed_by_the_engine_label(profile, tmp_path, live_fleet):
    where = live_fleet(2, data_parallel=True)
    code, doc = run(tmp_path, "--qualify", profile, "--router", where["router"], "--replica-count", "2",
                    "--channel", "vllm-dp")
    assert code == 0, doc["decision"]["reasons"]
    assert doc["routing"]["attributed_by"] == "/metrics engine label" and doc["routing"]["served_by"] == {"0": 3, "1": 3}
    for rank, row in rows(doc).items():
        checks = {c["check"]: c for c in row["checks"]}
        assert f"/metrics engine={rank} rose by 3 for 3 answers" in checks["probes"]["detail"]
        assert f"asked only of {rank}, whose /metrics request count rose by" in checks["coverage"]["detail"]


def test_dynamo_workers_are_pinned_and_attributed_by_the_worker_their_answers_name(profile, tmp_path, live_fleet):
    from . import dynamo_frontend

    where = live_fleet(2, "2:degenerate")
    with dynamo_frontend.frontend({"7": where["replicas"][0]["url"], "8": where["replicas"][1]["url"]}) as url:
        code, doc = run(tmp_path, "--qualify", profile, "--router", url, "--replica-ids", "7,8", "--channel", "dynamo")
    assert doc["routing"]["served_by"] == {"7": 3, "8": 3}
    assert doc["routing"]["attributed_by"] == "served-by nvext.worker_id.decode_worker_id"
    assert code == 1 and doc["decision"]["failing_replicas"] == ["8"], doc["decision"]["reasons"]
    checks = {rid: {c["check"]: c for c in row["checks"]} for rid, row in rows(doc).items()}
    assert "every one served by 7 (served-by nvext.worker_id.decode_worker_id)" in checks["7"]["coverage"]["detail"]
    assert rows(doc)["7"]["result"] == "PASS" and checks["8"]["graded"]["result"] == "FAIL"


def test_pytest_qualify_fleet_judges_the_profiles_fleet_with_the_runs_settings(tmp_path):
    from ..helpers import run_pytest

    profile = write_profile(tmp_path, ("smoke",), name="fleet-of-2")
    profile.write_text(profile.read_text() + '\n[fleet]\nreplica_count = 2\nreplica_e2e_limit_s = 5\n')
    done = run_pytest(f"--qualify={profile}", "--qualify-fleet", "--qualify-endpoint", "reference",
                      "--qualify-stage", "post-promotion", "--qualify-evidence", str(tmp_path / "ev"), cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    last = done.stdout.strip().splitlines()[-1]
    assert last.startswith("FLEET POST-PROMOTION CHECK: PASS (2 replicas)")
    (bundle,) = (tmp_path / "ev").glob("fleet-*")
    doc = json.loads((bundle / "fleet.json").read_text())
    assert [r["replica"] for r in doc["decision"]["replicas"]] == ["r1", "r2"] and doc["fleet"]["e2e_limit_s"] == 5.0


def test_llm_d_replicas_are_learned_from_the_pickers_tokens_and_each_is_pinned_and_attributed_by_its_own(
        profile, tmp_path, live_fleet):
    from . import llmd_picker

    pods = {r["id"]: r["url"] for r in live_fleet(4)["replicas"]}
    with llmd_picker.picker(pods) as url:
        code, doc = run(tmp_path, "--qualify", profile, "--router", url, "--replica-count", "4", "--channel", "llm-d")
    tokens = {llmd_picker.token(pod) for pod in pods}
    assert code == 0, doc["decision"]["reasons"]
    assert set(rows(doc)) == tokens and doc["routing"]["served_by"] == {t: 3 for t in tokens}
    assert all(r["pin"] == r["id"] and r["url"] is None for r in doc["replicas"])
    assert doc["fleet"]["ids_learned"] is True and doc["fleet"]["replica_count"] == 4
    for token, row in rows(doc).items():
        checks = {c["check"]: c for c in row["checks"]}
        assert checks["probes"]["detail"].startswith(f"3 of 3 answered by {token} (served-by x-session-token)")
        assert f"every one served by {token} (served-by x-session-token)" in checks["coverage"]["detail"]
        assert row["hits"] > 0
    fleet = {c["check"]: c for c in doc["decision"]["fleet_checks"]}
    assert fleet["coverage"] == {"check": "coverage", "result": "PASS", "detail": (
        "the router's 12 unpinned probes came back with 4 distinct x-session-token values, one for each of the "
        "4 replicas expected")}


def test_a_degenerate_llm_d_replica_fails_by_its_token(profile, tmp_path, live_fleet):
    from . import llmd_picker

    pods = {r["id"]: r["url"] for r in live_fleet(2, "2:degenerate")["replicas"]}
    with llmd_picker.picker(pods) as url:
        code, doc = run(tmp_path, "--qualify", profile, "--router", url, "--replica-count", "2", "--channel", "llm-d")
    bad = llmd_picker.token("r2")
    assert code == 1 and doc["decision"]["failing_replicas"] == [bad], doc["decision"]["reasons"]
    assert any(r.startswith("graded: post-promotion stage FAIL") for r in rows(doc)[bad]["reasons"])
    assert rows(doc)[llmd_picker.token("r1")]["result"] == "PASS"


def test_an_llm_d_replica_the_picker_never_routes_to_fails_the_fleet_on_coverage_naming_the_count(
        profile, tmp_path, live_fleet):
    from . import llmd_picker

    pods = {r["id"]: r["url"] for r in live_fleet(3)["replicas"]}
    with llmd_picker.picker(pods, unrouted={"r3"}) as url:
        code, doc = run(tmp_path, "--qualify", profile, "--router", url, "--replica-count", "3", "--channel", "llm-d")
    assert code == 1 and doc["decision"]["result"] == "FAIL"
    assert doc["decision"]["reasons"] == [(
        "fleet: coverage: the router's 9 unpinned probes came back with 2 distinct x-session-token values, "
        "3 replicas expected (--replica-count): 1 of 3 never reached, so never graded")]
    assert set(rows(doc)) == {llmd_picker.token("r1"), llmd_picker.token("r2")}
    assert all(row["result"] == "PASS" for row in rows(doc).values())


def test_aibrix_pods_graded_at_their_own_urls_are_covered_by_their_metrics_count_over_the_graded_run(
        profile, tmp_path, live_fleet):
    # A pod's own URL carries no target-pod (AIBrix's gateway adds it); the reference replicas'
    # x-served-by is not the channel's header, so nothing in an answer names its pod.
    urls = [f"{r['id']}={r['url']}" for r in live_fleet(2)["replicas"]]
    code, doc = run(tmp_path, "--qualify", profile, "--replicas", *urls, "--channel", "aibrix")
    assert code == 0, doc["decision"]["reasons"]
    for rep in doc["replicas"]:
        assert rep["graded"]["answers"]["served_by"] == {"(not named)": rep["graded"]["answers"]["answered"]}
        assert rep["graded_requests_counted"] >= rep["graded"]["answers"]["answered"] > 0
        coverage = {c["check"]: c for c in rows(doc)[rep["id"]]["checks"]}["coverage"]["detail"]
        assert f"asked only of {rep['id']}, whose /metrics request count rose by" in coverage
        assert coverage.endswith("during its run")


def test_an_aibrix_pod_url_whose_graded_answers_another_pod_served_fails_on_coverage(profile, tmp_path, live_fleet):
    from . import service_url

    a, b = (r["url"] for r in live_fleet(2)["replicas"])
    # r1's URL is a Service: its pinned probes reach pod a, its graded run pod b.
    with service_url.service(a, b, first=3) as url:
        code, doc = run(tmp_path, "--qualify", profile, "--replicas", f"r1={url}", f"r2={b}", "--channel", "aibrix")
    assert code == 1 and doc["decision"]["failing_replicas"] == ["r1"], doc["decision"]["reasons"]
    checks = {c["check"]: c for c in rows(doc)["r1"]["checks"]}
    assert checks["probes"]["result"] == "PASS"
    assert checks["coverage"]["result"] == "FAIL"
    assert "but r1's /metrics counted only 0 requests: the rest were served elsewhere" in checks["coverage"]["detail"]
    assert rows(doc)["r2"]["result"] == "PASS"
