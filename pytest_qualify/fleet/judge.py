"""The fleet's one decision, pure: what was read of every replica in, one row per replica (each of
its checks with its result) and the fleet's verdict out. A replica passes only when it was ready,
served the router's round (where the router is part of the fleet), showed the promoted fingerprint,
answered its pinned probes itself, and answered its graded run, every graded answer attributed to
it. A check that could not be made is INCOMPLETE, never PASS; a replica the fleet's run never
reached fails on coverage."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_qualify.fleet.fingerprint import Expected, Fingerprint, FingerprintCheck
from pytest_qualify.fleet.graded import GradedRun
from pytest_qualify.fleet.probe import Probe, Readiness
from pytest_qualify.fleet.spec import FleetSpec, Replica

PASS, FAIL, INCOMPLETE = "PASS", "FAIL", "INCOMPLETE"
EXIT = {PASS: 0, FAIL: 1, INCOMPLETE: 2}
CHECKS = ("ready", "routed", "fingerprint", "probes", "graded", "coverage")


@dataclass(frozen=True)
class Routing:
    """The router's round, seen from outside: unpinned probes and which replica served each."""

    probes: int
    served_by: Mapping[str, int]  # replica id (expected or not) -> probes it served
    unattributed: int  # answered, but which replica served could not be told
    failed: int  # no 200
    how: str  # how a probe was attributed; "" when it could not be
    failed_by: Mapping[str, int] = field(default_factory=dict)  # replica id -> routed probes it failed (its error named it)

    def as_dict(self) -> dict[str, Any]:
        return {"probes": self.probes, "served_by": dict(self.served_by), "unattributed": self.unattributed,
                "failed": self.failed, "failed_by": dict(self.failed_by), "attributed_by": self.how or None}


@dataclass(frozen=True)
class ReplicaRecord:
    replica: Replica
    readiness: Readiness
    fingerprint: Fingerprint | None = None
    check: FingerprintCheck | None = None
    probes: tuple[Probe, ...] = ()
    probe_counted: float | None = None  # the replica's /metrics request count rose by this during its probes
    attributed_by: str = ""  # the channel that tied its answers to it
    graded: GradedRun | None = None
    graded_counted: float | None = None  # its /metrics request count rose by this during its graded run
    faults: tuple[Mapping[str, Any], ...] = ()  # the reference fleet's record of this replica's faults


@dataclass(frozen=True)
class FleetRecord:
    spec: FleetSpec
    profile: str
    stage: str
    expected: Expected
    replicas: tuple[ReplicaRecord, ...]
    routing: Routing | None = None
    simulated: bool = False
    reference_faults: Mapping[str, Sequence[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class Check:
    name: str
    result: str  # PASS | FAIL | INCOMPLETE
    detail: str

    def as_dict(self) -> dict[str, str]:
        return {"check": self.name, "result": self.result, "detail": self.detail}


@dataclass(frozen=True)
class ReplicaRow:
    replica: str
    result: str
    checks: tuple[Check, ...]
    fingerprint: str | None  # its digest
    hits: int  # graded answers attributed to it

    @property
    def reasons(self) -> list[str]:
        return [f"{c.name}: {c.detail}" for c in self.checks if c.result != PASS]

    def as_dict(self) -> dict[str, Any]:
        return {"replica": self.replica, "result": self.result, "fingerprint": self.fingerprint, "hits": self.hits,
                "checks": [c.as_dict() for c in self.checks], "reasons": self.reasons}


@dataclass(frozen=True)
class FleetDecision:
    result: str
    rows: tuple[ReplicaRow, ...]
    fleet_checks: tuple[Check, ...]

    @property
    def exit_code(self) -> int:
        return EXIT[self.result]

    @property
    def reasons(self) -> list[str]:
        out = [f"fleet: {c.name}: {c.detail}" for c in self.fleet_checks if c.result != PASS]
        out += [f"replica {r.replica}: {reason}" for r in self.rows for reason in r.reasons]
        return out

    def failing(self) -> list[str]:
        """The replicas that failed, by id."""
        return [r.replica for r in self.rows if r.result == FAIL]

    def as_dict(self) -> dict[str, Any]:
        return {"result": self.result, "exit_code": self.exit_code, "failing_replicas": self.failing(),
                "reasons": self.reasons, "fleet_checks": [c.as_dict() for c in self.fleet_checks],
                "replicas": [r.as_dict() for r in self.rows]}


def worst(results: Sequence[str]) -> str:
    return FAIL if FAIL in results else INCOMPLETE if INCOMPLETE in results else PASS


def _ready(r: ReplicaRecord) -> Check:
    if r.readiness.ready:
        return Check("ready", PASS, f"/health 200 after {r.readiness.waited_s:.1f} s")
    return Check("ready", FAIL, f"not ready after the bounded wait of {r.readiness.waited_s:.1f} s "
                                f"(/health's last answer: {r.readiness.last})")


def _routed(r: ReplicaRecord, routing: Routing | None) -> Check | None:
    if routing is None:
        return None
    if not routing.how:
        return Check("routed", INCOMPLETE, f"which replica served the router's {routing.probes} probes cannot be told "
                                           "(no served-by channel, no /metrics per replica)")
    got = routing.served_by.get(r.replica.id, 0)
    if got:
        return Check("routed", PASS, f"served {got} of the router's {routing.probes} probes ({routing.how})")
    others = ", ".join(f"{k} {v}" for k, v in sorted(routing.served_by.items())) or "none"
    failed = routing.failed_by.get(r.replica.id, 0)
    if failed:
        return Check("routed", FAIL, f"the router sent it {failed} of {routing.probes} probes and none was answered "
                                     f"(answered: {others}; {routing.how})")
    return Check("routed", FAIL, f"never served a request of the router's round: 0 of {routing.probes} probes "
                                 f"(served: {others}; {routing.how})")


def _fingerprint(r: ReplicaRecord, expected: Expected) -> Check:
    if r.fingerprint is None or r.check is None:
        return Check("fingerprint", INCOMPLETE, "not read (the replica was not ready)")
    if r.check.differences:
        return Check("fingerprint", FAIL, f"{r.fingerprint.digest} differs: " + "; ".join(r.check.differences))
    if r.fingerprint.identity.error:
        return Check("fingerprint", INCOMPLETE, f"identity not read: {r.fingerprint.identity.error}")
    seen = "" if r.fingerprint.cache_config is not None else " (vllm:cache_config_info not visible here)"
    return Check("fingerprint", PASS, f"{r.fingerprint.digest}, equal to {expected.source} and the fleet{seen}")


def _probes(r: ReplicaRecord, spec: FleetSpec) -> Check:
    if not r.probes:
        return Check("probes", INCOMPLETE, "no pinned probe was sent (the replica was not ready)")
    n = len(r.probes)
    failed = [p for p in r.probes if p.status != 200]
    if failed:
        what = failed[0].error or f"HTTP {failed[0].status}"
        health = " while /health answers 200" if r.readiness.ready else ""
        return Check("probes", FAIL, f"{len(failed)} of {n} pinned chat probes failed ({what}){health}")
    wrong = sorted({p.served_by for p in r.probes if p.served_by is not None and p.served_by != r.replica.id})
    if wrong:
        return Check("probes", FAIL, f"pinned to {r.replica.id}, answered by {', '.join(wrong)}")
    e2e = statistics.median(p.e2e_s for p in r.probes)
    if spec.e2e_limit_s is not None and e2e > spec.e2e_limit_s:
        return Check("probes", FAIL, f"slow: pinned probes' end to end p50 {e2e:.2f} s over the limit "
                                     f"{spec.e2e_limit_s:g} s ({n} probes)")
    if not r.attributed_by:
        return Check("probes", INCOMPLETE, f"{n} answered, but nothing shows that {r.replica.id} served them")
    return Check("probes", PASS, f"{n} of {n} answered by {r.replica.id} ({r.attributed_by}); end to end p50 {e2e:.2f} s")


def _graded(r: ReplicaRecord, stage: str) -> Check:
    g = r.graded
    if g is None:
        return Check("graded", INCOMPLETE, f"the {stage} stage did not run against it")
    summary = f"{stage} stage {g.verdict}: {g.items_graded} items graded, {g.items_failed} failed"
    if g.verdict == PASS and g.items_graded:
        return Check("graded", PASS, summary)
    if g.verdict == FAIL:
        return Check("graded", FAIL, summary + ("; " + "; ".join(g.reasons) if g.reasons else ""))
    return Check("graded", INCOMPLETE, summary + "; " + ("; ".join(g.reasons) or g.last_line or "no reason"))


def _coverage(r: ReplicaRecord) -> tuple[Check, int]:
    g = r.graded
    if g is not None and g.tally.chat_requests and not g.tally.answered:
        return Check("coverage", FAIL, f"no graded answer came from {r.replica.id}: none of its "
                                       f"{g.tally.chat_requests} graded requests was answered"), 0
    if g is None or g.tally.answered == 0:
        return Check("coverage", FAIL, f"no graded answer came from {r.replica.id}: the replica was never reached"), 0
    named = {k: v for k, v in g.tally.served_by.items() if k is not None}
    others = {k: v for k, v in named.items() if k != r.replica.id}
    mine = named.get(r.replica.id, 0)
    if others:
        shown = ", ".join(f"{k} {v}" for k, v in sorted(others.items()))
        return Check("coverage", FAIL, f"{sum(others.values())} of {g.tally.answered} graded answers were served by "
                                       f"another replica ({shown})"), mine
    if mine:
        return Check("coverage", PASS, f"{mine} graded answers, every one served by {r.replica.id} "
                                       f"({r.attributed_by or 'served-by'})"), mine
    if r.graded_counted is not None and r.graded_counted < g.tally.answered:
        return Check("coverage", FAIL, f"{g.tally.answered} graded answers came through, but {r.replica.id}'s /metrics "
                                       f"counted only {r.graded_counted:g} requests: the rest were served elsewhere"), 0
    if r.graded_counted is not None:
        return Check("coverage", PASS, f"{g.tally.answered} graded answers, asked only of {r.replica.id}, whose /metrics "
                                       f"request count rose by {r.graded_counted:g} during its run"), g.tally.answered
    if r.attributed_by:
        return Check("coverage", PASS, f"{g.tally.answered} graded answers, asked only of {r.replica.id} "
                                       f"({r.attributed_by})"), g.tally.answered
    return Check("coverage", INCOMPLETE, f"{g.tally.answered} graded answers, none attributed to a replica"), 0


def _faults(r: ReplicaRecord) -> Check | None:
    idle = [str(f.get("fault")) for f in r.faults if not f.get("engaged")]
    if idle:
        return Check("faults", INCOMPLETE, f"the reference fault {', '.join(idle)} never engaged: the run proves nothing of it")
    return None


def _learned(record: FleetRecord) -> Check:
    """Where the channel learned the ids from the router's answers: every expected replica must have
    shown up among them. One that never did was never reached, so never graded: a coverage FAIL."""
    spec, routing = record.spec, record.routing
    want, got = spec.expected_count, len(spec.replicas)
    what = spec.channel.served_by_header or spec.channel.served_by_field or "served-by"
    probes = routing.probes if routing is not None else 0
    seen = f"the router's {probes} unpinned probes came back with {got} distinct {what} values"
    if got < want:
        return Check("coverage", FAIL, f"{seen}, {want} replicas expected (--replica-count): {want - got} of {want} "
                                       "never reached, so never graded")
    if got > want:
        return Check("membership", FAIL, f"{seen}, {want} replicas expected (--replica-count): {got - want} more "
                                         "than the fleet names")
    return Check("coverage", PASS, f"{seen}, one for each of the {want} replicas expected")


def decide(record: FleetRecord) -> FleetDecision:
    rows = []
    for r in record.replicas:
        checks = [_ready(r)]
        routed = _routed(r, record.routing)
        if routed is not None:
            checks.append(routed)
        checks += [_fingerprint(r, record.expected), _probes(r, record.spec), _graded(r, record.stage)]
        coverage, hits = _coverage(r)
        checks.append(coverage)
        idle = _faults(r)
        if idle is not None:
            checks.append(idle)
        rows.append(ReplicaRow(r.replica.id, worst([c.result for c in checks]), tuple(checks),
                               r.fingerprint.digest if r.fingerprint else None, hits))
    fleet: list[Check] = []
    expected = set(record.spec.ids)
    routed = record.routing is not None and bool(record.routing.how)
    if record.spec.learns:
        fleet.append(_learned(record))  # the replicas are what the round found: membership is the count
    elif routed:
        extra = {k: v for k, v in record.routing.served_by.items() if k not in expected}
        if extra:
            fleet.append(Check("membership", FAIL, "the router sent requests to replicas the fleet does not name: "
                               + ", ".join(f"{k} ({v} probes)" for k, v in sorted(extra.items()))))
        else:
            fleet.append(Check("membership", PASS, f"every routed probe was served by a named replica "
                                                   f"({record.routing.probes} probes)"))
    if routed:
        if record.routing.unattributed:
            fleet.append(Check("attribution", INCOMPLETE, f"{record.routing.unattributed} of {record.routing.probes} "
                                                          "routed answers named no replica"))
        if record.routing.failed:
            named = ", ".join(f"{k} {v}" for k, v in sorted(record.routing.failed_by.items()))
            fleet.append(Check("router", FAIL, f"{record.routing.failed} of {record.routing.probes} routed probes got no "
                                               "answer" + (f" (from {named})" if named else "")))
    judged = {r.replica for r in rows}
    missing = [rid for rid in record.spec.ids if rid not in judged]
    kind = "learned" if record.spec.learns else "named"
    if missing:
        fleet.append(Check("replicas", INCOMPLETE, f"{len(rows)} of {len(expected)} {kind} replicas judged here; not judged: "
                                             f"{', '.join(missing)} (merge the other jobs' bundles: fleet-merge)"))
    else:
        fleet.append(Check("replicas", PASS, f"{len(rows)} of {len(expected)} {kind} replicas judged"))
    result = worst([*(r.result for r in rows), *(c.result for c in fleet)])
    return FleetDecision(result, tuple(rows), tuple(fleet))
