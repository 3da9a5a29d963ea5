"""The fleet's one decision (fleet/judge.py), on records built by hand: a healthy fleet passes with
every replica attributed; each way a replica can fail names that replica only; a replica never
reached fails on coverage; what could not be checked is INCOMPLETE, never PASS."""

from __future__ import annotations

from dataclasses import replace

from pytest_qualify.fleet.attribution import Tally
from pytest_qualify.fleet.fingerprint import Fingerprint, FingerprintCheck, expected_from
from pytest_qualify.fleet.graded import GradedRun
from pytest_qualify.fleet.judge import FAIL, INCOMPLETE, PASS, Check, FleetRecord, ReplicaRecord, Routing, decide
from pytest_qualify.fleet.probe import Probe, Readiness
from pytest_qualify.fleet.spec import Replica, build_spec
from pytest_qualify.promotion.identity import Identity

IDS = ("r1", "r2", "r3", "r4")
SPEC = build_spec(router="http://gw", replica_ids=IDS, channel="reference")
EXPECTED = expected_from(served_name="m", model_root="org/m", window_tokens=4096, engine_declared=None,
                         kv_cache_dtype=None, source="profile p")


def healthy(rid: str) -> ReplicaRecord:
    replica = next(r for r in SPEC.replicas if r.id == rid)
    return ReplicaRecord(
        replica, Readiness(True, 0.1, "HTTP 200"), Fingerprint(Identity("m", "org/m", 4096, "v")),
        FingerprintCheck(rid), tuple(Probe(200, rid, 0.05) for _ in range(3)), None, "served-by x-served-by",
        GradedRun(0, PASS, "/b", 45, 0, tally=Tally(54, 54, {rid: 54})))


def record(**changed: ReplicaRecord) -> FleetRecord:
    replicas = tuple(changed.get(rid, healthy(rid)) for rid in IDS)
    served = {rid: 3 for rid in IDS}
    return FleetRecord(SPEC, "p", "post-promotion", EXPECTED, replicas,
                       Routing(12, served, 0, 0, "served-by x-served-by"))


def failing(decision) -> dict[str, list[str]]:
    return {row.replica: row.reasons for row in decision.rows if row.result != PASS}


def test_a_healthy_fleet_passes_with_every_replica_attributed():
    d = decide(record())
    assert d.result == PASS and d.exit_code == 0 and not d.reasons
    assert [(row.replica, row.hits) for row in d.rows] == [(rid, 54) for rid in IDS]


def test_a_replica_not_ready_fails_by_name_and_is_never_reached():
    r = replace(healthy("r2"), readiness=Readiness(False, 60.0, "HTTP 503"), fingerprint=None, check=None,
                probes=(), graded=None)
    d = decide(record(r2=r))
    assert d.result == FAIL and d.failing() == ["r2"]
    reasons = failing(d)["r2"]
    assert any("not ready after the bounded wait of 60.0 s" in x and "HTTP 503" in x for x in reasons)
    assert any(x.startswith("coverage: no graded answer came from r2") for x in reasons)


def test_a_replica_whose_answers_came_from_another_fails_on_coverage():
    r = replace(healthy("r3"), graded=GradedRun(0, PASS, "/b", 45, 0, tally=Tally(54, 54, {"r3": 50, "r1": 4})))
    d = decide(record(r3=r))
    assert d.failing() == ["r3"] and "4 of 54 graded answers were served by another replica (r1 4)" in failing(d)["r3"][0]


def test_answers_that_name_no_replica_are_not_a_pass():
    r = replace(healthy("r1"), attributed_by="", graded=GradedRun(0, PASS, "/b", 45, 0, tally=Tally(54, 54, {None: 54})))
    d = decide(record(r1=r))
    assert d.result == INCOMPLETE and d.exit_code == 2
    assert any("nothing shows that r1 served them" in x for x in failing(d)["r1"])


def test_a_metrics_count_below_the_answers_fails_coverage():
    r = replace(healthy("r2"), attributed_by="asked at its own URL", graded_counted=10.0,
                graded=GradedRun(0, PASS, "/b", 45, 0, tally=Tally(54, 54, {None: 54})))
    d = decide(record(r2=r))
    assert d.failing() == ["r2"] and "counted only 10 requests" in failing(d)["r2"][0]


def test_generation_errors_with_a_healthy_health_fail_the_replica():
    r = replace(healthy("r4"), probes=tuple(Probe(500, "r4", 0.01, "HTTP 500") for _ in range(3)))
    d = decide(record(r4=r))
    assert d.failing() == ["r4"] and failing(d)["r4"] == [
        "probes: 3 of 3 pinned chat probes failed (HTTP 500) while /health answers 200"]


def test_a_slow_replica_fails_against_the_named_limit_only():
    slow = replace(healthy("r1"), probes=tuple(Probe(200, "r1", 0.6) for _ in range(3)))
    assert decide(record(r1=slow)).result == PASS  # no limit named
    limited = replace(record(r1=slow), spec=replace(SPEC, e2e_limit_s=0.3))
    d = decide(limited)
    assert d.failing() == ["r1"] and "p50 0.60 s over the limit 0.3 s" in failing(d)["r1"][0]


def test_the_router_round_names_the_replica_it_skips_and_the_one_it_should_not_reach():
    rec = replace(record(), routing=Routing(12, {"r1": 4, "r2": 4, "r4": 3, "r9": 1}, 0, 0, "served-by x-served-by"))
    d = decide(rec)
    assert d.failing() == ["r3"] and "0 of 12 probes" in failing(d)["r3"][0]
    assert [c.detail for c in d.fleet_checks if c.result == FAIL] == [
        "the router sent requests to replicas the fleet does not name: r9 (1 probes)"]


def test_a_fingerprint_difference_and_a_failed_graded_run_fail_their_replica():
    r = replace(healthy("r2"), check=FingerprintCheck("r2", ("cache.block_size: 3 of 4 replicas show '16', this one '32'",)))
    g = replace(healthy("r3"), graded=GradedRun(1, FAIL, "/b", 5, 2, ("smoke: format: empty answer in '!!!!'",),
                                                 tally=Tally(5, 5, {"r3": 5})))
    d = decide(record(r2=r, r3=g))
    assert d.failing() == ["r2", "r3"]
    assert "block_size" in failing(d)["r2"][0] and "empty answer" in failing(d)["r3"][0]


def test_a_fault_that_never_engaged_proves_nothing():
    r = replace(healthy("r1"), faults=({"fault": "slow=2", "engaged": False},))
    d = decide(record(r1=r))
    assert d.result == INCOMPLETE and "slow=2 never engaged" in failing(d)["r1"][0]


def test_a_partial_bundle_is_not_the_fleet():
    rec = replace(record(), replicas=(healthy("r1"),))
    d = decide(rec)
    assert d.result == INCOMPLETE and "not judged: r2, r3, r4" in d.reasons[0]


def test_a_replica_that_answered_none_of_its_graded_requests_fails_coverage_saying_so():
    r = replace(healthy("r4"), graded=GradedRun(1, FAIL, "/b", 5, 5, tally=Tally(7, 0, {})))
    d = decide(record(r4=r))
    assert d.failing() == ["r4"]
    assert "coverage: no graded answer came from r4: none of its 7 graded requests was answered" in failing(d)["r4"]


LEARNED = build_spec(router="http://gw", replica_count=4, channel="llm-d")


def learned(tokens: tuple[str, ...]) -> FleetRecord:
    """The fleet whose ids were learned: one healthy row for each token the router's 12 probes showed."""
    spec = replace(LEARNED, replicas=tuple(Replica(t, pin=t) for t in tokens))
    rows = tuple(replace(healthy("r1"), replica=r, probes=tuple(Probe(200, r.id, 0.05) for _ in range(3)),
                         graded=GradedRun(0, PASS, "/b", 45, 0, tally=Tally(54, 54, {r.id: 54}))) for r in spec.replicas)
    return FleetRecord(spec, "p", "post-promotion", EXPECTED, rows,
                       Routing(12, {t: 12 // len(tokens) for t in tokens}, 0, 0, "served-by x-session-token"))


def test_learned_ids_pass_when_every_expected_replica_showed_its_token():
    d = decide(learned(("ta", "tb", "tc", "td")))
    assert d.result == PASS and [row.replica for row in d.rows] == ["ta", "tb", "tc", "td"]
    assert d.fleet_checks[0] == Check("coverage", PASS, "the router's 12 unpinned probes came back with 4 distinct "
                                                        "x-session-token values, one for each of the 4 replicas expected")
    assert d.fleet_checks[-1].detail == "4 of 4 learned replicas judged"


def test_fewer_learned_tokens_than_expected_replicas_fail_the_fleet_on_coverage_naming_the_shortfall():
    d = decide(learned(("ta", "tb", "tc")))
    assert d.result == FAIL and d.failing() == [] and all(row.result == PASS for row in d.rows)
    assert d.reasons == [("fleet: coverage: the router's 12 unpinned probes came back with 3 distinct x-session-token "
                          "values, 4 replicas expected (--replica-count): 1 of 4 never reached, so never graded")]


def test_no_token_at_all_is_every_replica_never_reached():
    rec = replace(learned(("ta",)), replicas=(), spec=LEARNED, routing=Routing(12, {}, 0, 12, ""))
    d = decide(rec)
    assert d.result == FAIL and "came back with 0 distinct x-session-token values" in d.reasons[0]
    assert "4 of 4 never reached" in d.reasons[0]


def test_more_learned_tokens_than_expected_replicas_fail_membership():
    d = decide(learned(("ta", "tb", "tc", "td", "te")))
    assert d.result == FAIL and d.failing() == []
    assert [c.name for c in d.fleet_checks if c.result == FAIL] == ["membership"]
    assert "5 distinct x-session-token values, 4 replicas expected (--replica-count): 1 more" in d.reasons[0]
