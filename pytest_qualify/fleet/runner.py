"""The fleet's run, in its order: readiness (one bounded wait for all), the router's round
(membership; it comes first where the channel learns the replicas' ids from it), the fingerprints,
pinned probes (attribution), then every replica's graded run at once (``jobs`` at a time), each
through its attribution proxy. Returns the record ``judge.decide`` judges. ``start_reference``
starts the SIMULATED fleet (``reference/fleet.py``) for tests and demos."""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pytest_qualify.fleet import graded as graded_run
from pytest_qualify.fleet.attribution import AttributionProxy
from pytest_qualify.fleet.fingerprint import Expected, expected_from, hold
from pytest_qualify.fleet.judge import FleetRecord, ReplicaRecord, Routing
from pytest_qualify.fleet.probe import Asker, Probe, chat_probe, delta, metrics_text, read_fingerprint, success_counts, \
    wait_ready
from pytest_qualify.fleet.spec import FleetSpec, Replica
from pytest_qualify.profiles import Profile
from pytest_qualify.server.lifecycle import LaunchSpec, ServerProcess, free_port

FLEET_FILE = "reference-fleet.json"


@dataclass
class ReferenceFleet:
    """The SIMULATED fleet's process and where its router and replicas listen."""

    process: ServerProcess
    router: str
    replicas: dict[str, str]  # id -> URL
    fault_dir: Path
    faults: dict[str, list[str]]

    def stop(self) -> None:
        self.process.stop()

    def fault_records(self, rid: str) -> tuple[Mapping[str, Any], ...]:
        path = self.fault_dir / f"{rid}-faults.json"
        if not path.is_file():
            return ()
        return tuple(json.loads(path.read_text(encoding="utf-8")).get("faults") or ())


def start_reference(profile_arg: str, replicas: int, faults: Sequence[str], folder: Path,
                    startup_timeout_s: float = 60.0) -> ReferenceFleet:
    """Start ``python -m pytest_qualify.reference.fleet`` and wait until its router answers ``/health``
    and its fleet file is written (a failure raises ``StartupError`` with the command and log tail)."""
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    fleet_file = folder / FLEET_FILE
    argv = [sys.executable, "-m", "pytest_qualify.reference.fleet", "--port", str(port), "--profile", profile_arg,
            "--replicas", str(replicas), "--fault-log-dir", str(folder / "reference-faults"),
            "--fleet-file", str(fleet_file)]
    for spec in faults:
        argv += ["--replica-fault", spec]
    process = ServerProcess(LaunchSpec(tuple(argv), "127.0.0.1", port, folder / "reference-fleet.log", startup_timeout_s))
    process.start()
    process.wait_ready()
    where = json.loads(fleet_file.read_text(encoding="utf-8"))
    armed: dict[str, list[str]] = {}
    for spec in faults:
        index, _, fault = spec.partition(":")
        armed.setdefault(f"r{index.lstrip('r')}", []).append(fault)
    return ReferenceFleet(process, where["router"], {r["id"]: r["url"] for r in where["replicas"]},
                          folder / "reference-faults", armed)


def expected_of(profile: Profile, promoted: Any | None) -> Expected:
    """The promoted run's identity when there is one, else the profile's declaration."""
    from pytest_qualify.promotion.identity import engine_version_of

    d = profile.deployment
    if promoted is not None:
        ident = promoted.identity
        shown = {"served_name": ident.served_name, "model_root": ident.model_root, "revision": ident.revision,
                 "window_tokens": ident.window_tokens, "engine_version": ident.engine_version}
        return Expected({k: v for k, v in shown.items() if v is not None}, f"the promoted run {promoted.run_id}")
    return expected_from(served_name=d.served_name, model_root=d.model, window_tokens=profile.limits.window_tokens,
                         engine_declared=engine_version_of(profile), kv_cache_dtype=d.kv_cache_dtype,
                         source=f"profile {profile.name}")


def folder_name(rid: str) -> str:
    """A replica's folder under ``replicas/``: its id where that is a plain name, else the id with
    every other character as ``_`` and a digest of the id (a learned token may hold ``/`` or ``=``)."""
    plain = re.sub(r"[^A-Za-z0-9_.-]", "_", rid).strip(".") or "_"
    if plain == rid:
        return rid
    return f"{plain[:48]}-{hashlib.sha256(rid.encode()).hexdigest()[:8]}"


def _route(spec: FleetSpec, served_name: str, api_key: str | None) -> Routing | None:
    """Unpinned probes through the router (``--probes`` rounds of the expected count), each attributed
    by the channel's served-by, by the ``engine`` label's counts, or (one at a time) by which replica's
    own ``/metrics`` count rose."""
    if spec.router is None:
        return None
    chan = spec.channel
    n = spec.probes_per_replica * spec.expected_count
    router = Asker(spec.router, api_key=api_key)
    served: dict[str, int] = {}
    failed_by: dict[str, int] = {}
    unattributed = failed = 0
    try:
        if chan.names_server:
            for _ in range(n):
                p = chat_probe(router, served_name, chan)
                if p.status != 200:
                    failed += 1
                    if p.served_by is not None:
                        failed_by[p.served_by] = failed_by.get(p.served_by, 0) + 1
                elif p.served_by is None:
                    unattributed += 1
                else:
                    served[p.served_by] = served.get(p.served_by, 0) + 1
            how = f"served-by {chan.served_by_header or chan.served_by_field}"
            return Routing(n, served, unattributed, failed, how if served or failed_by else "", failed_by)
        if chan.metrics_label:
            before = success_counts(metrics_text(router), chan.metrics_label)
            results = [chat_probe(router, served_name, chan) for _ in range(n)]
            moved = delta(before, success_counts(metrics_text(router), chan.metrics_label))
            failed = sum(1 for p in results if p.status != 200)
            if moved is None:
                return Routing(n, {}, n - failed, failed, "")
            served = {k: int(v) for k, v in moved.items() if v > 0}
            return Routing(n, served, max(0, n - failed - sum(served.values())), failed,
                           f"/metrics {chan.metrics_label} label" if served else "")
        if all(r.url for r in spec.replicas):
            askers = {r.id: Asker(r.url or "", api_key=api_key) for r in spec.replicas}
            try:
                counts = {rid: success_counts(metrics_text(a)) for rid, a in askers.items()}
                if any(c is None for c in counts.values()):
                    return Routing(n, {}, n, 0, "")
                for _ in range(n):
                    p = chat_probe(router, served_name, chan)
                    now = {rid: success_counts(metrics_text(a)) for rid, a in askers.items()}
                    rose = [rid for rid in askers if (delta(counts[rid], now[rid]) or {}).get("", 0) > 0]
                    counts = now
                    if p.status != 200:
                        failed += 1
                    elif len(rose) == 1:
                        served[rose[0]] = served.get(rose[0], 0) + 1
                    else:
                        unattributed += 1
            finally:
                for a in askers.values():
                    a.close()
            return Routing(n, served, unattributed, failed,
                           "each replica's /metrics request count, unique-prefix probes one at a time" if served else "")
        return Routing(n, {}, n, 0, "")
    finally:
        router.close()


def _learned(spec: FleetSpec, routing: Routing) -> FleetSpec:
    """The fleet whose ids its channel learns (llm-d's ``x-session-token``): one replica for each
    distinct value the router's unpinned probes came back with, in the order they came (an answered
    probe's first, then one only a failed probe named), each pinned with its value. Fewer values than
    the expected count is judged a coverage FAIL (``judge.decide``): a replica never reached."""
    seen = [*routing.served_by, *(k for k in routing.failed_by if k not in routing.served_by)]
    return replace(spec, replicas=tuple(Replica(value, pin=value) for value in seen))


def _counted(spec: FleetSpec, replica: Replica, api_key: str | None) -> float | None:
    """The replica's request count as ``/metrics`` shows it: at its own URL, or its ``engine`` label's."""
    chan = spec.channel
    if replica.url:
        asker = Asker(replica.url, api_key=api_key)
        label = None
    elif chan.metrics_label and spec.router:
        asker = Asker(spec.router, api_key=api_key)
        label = chan.metrics_label
    else:
        return None
    try:
        counts = success_counts(metrics_text(asker), label)
    finally:
        asker.close()
    if not counts:
        return None  # no counter to read (yet): the count proves nothing either way
    return counts.get(replica.pin or "", 0.0) if label else counts.get("", 0.0)


def _probe_replica(spec: FleetSpec, replica: Replica, served_name: str, api_key: str | None) -> tuple[tuple[Probe, ...], float | None, str]:
    chan = spec.channel
    asker = Asker.of(replica, chan, spec.router, api_key)
    try:
        before = _counted(spec, replica, api_key)
        probes = tuple(chat_probe(asker, served_name, chan) for _ in range(spec.probes_per_replica))
        after = _counted(spec, replica, api_key)
    finally:
        asker.close()
    counted = after - before if before is not None and after is not None else None
    ok = [p for p in probes if p.status == 200]
    if chan.names_server and ok and all(p.served_by == replica.id for p in ok):
        how = f"served-by {chan.served_by_header or chan.served_by_field}"
    elif counted is not None and ok and counted >= len(ok):
        how = ("its /metrics request count" if replica.url else f"/metrics {chan.metrics_label}={replica.pin}") \
            + f" rose by {counted:g} for {len(ok)} answers"
    elif replica.url and not any(p.served_by for p in ok):
        # A pod's own URL (AIBrix's gateway adds target-pod only on the way through it): a request sent
        # there is served by that pod.
        how = "asked at its own URL"
    else:
        how = ""
    return probes, counted, how


def run_fleet(spec: FleetSpec, profile: Profile, profile_arg: str, out_dir: Path, *, stage: str = "post-promotion",
              promoted: Any | None = None, promoted_path: str | None = None, jobs: int = 0,
              pytest_args: Sequence[str] = (), reference: ReferenceFleet | None = None, only: Sequence[str] = (),
              say: Callable[[str], None] = print) -> FleetRecord:
    """The whole fleet is waited for, routed and fingerprinted (the majority needs every replica);
    ``only`` (one CI job per replica) narrows the probes, the graded runs and the rows to those named."""
    api_key = os.environ.get(spec.api_key_env) if spec.api_key_env else None
    served_name = profile.deployment.served_name
    deadline = time.monotonic() + spec.ready_timeout_s
    routing = None
    if spec.learns:
        # The ids are what the router's answers say: its round comes first, then every replica it named.
        router = Asker(spec.router or "", api_key=api_key, timeout_s=10.0)
        try:
            up_router = wait_ready(router, deadline)
        finally:
            router.close()
        say(f"fleet: learning {spec.expected_count} replicas' {spec.channel.pin_header} from the router {spec.router} "
            + (f"(ready after {up_router.waited_s:.1f} s)" if up_router.ready else f"(NOT READY: {up_router.last})"))
        routing = _route(spec, served_name, api_key)
        assert routing is not None  # a learning channel is always asked through its router
        spec = _learned(spec, routing)
    n = len(spec.replicas)
    say(f"fleet: waiting (at most {spec.ready_timeout_s:g} s) for {n} replicas: {', '.join(spec.ids)}")

    def ready(r: Replica):  # noqa: ANN202
        asker = Asker.of(r, spec.channel, spec.router, api_key, timeout_s=10.0)
        try:
            return wait_ready(asker, deadline)
        finally:
            asker.close()

    with ThreadPoolExecutor(max_workers=max(1, n)) as pool:
        readiness = dict(zip(spec.ids, pool.map(ready, spec.replicas)))
    for rid, r in readiness.items():
        say(f"  {rid}: " + (f"ready after {r.waited_s:.1f} s" if r.ready else f"NOT READY after {r.waited_s:.1f} s ({r.last})"))
    if routing is None:
        routing = _route(spec, served_name, api_key)
    if routing is not None:
        say(f"fleet: router {spec.router}: {routing.probes} probes served by "
            + (", ".join(f"{k} {v}" for k, v in sorted(routing.served_by.items())) or "no named replica"))
    up = [r for r in spec.replicas if readiness[r.id].ready]
    prints = {}
    for r in up:
        asker = Asker.of(r, spec.channel, spec.router, api_key)
        try:
            prints[r.id] = read_fingerprint(asker, served_name)
        finally:
            asker.close()
    expected = expected_of(profile, promoted)
    checks = {c.replica: c for c in hold(prints, expected)}
    up = [r for r in up if not only or r.id in only]
    probed = {r.id: _probe_replica(spec, r, served_name, api_key) for r in up}
    say("fleet: fingerprints " + ", ".join(f"{rid} {fp.digest}" for rid, fp in prints.items()))

    def grade(r: Replica) -> tuple[graded_run.GradedRun, float | None]:
        upstream = r.url or spec.router or ""
        pin = None if r.url else (spec.channel.pin_header or "", r.pin or "")
        folder = out_dir / "replicas" / folder_name(r.id)
        with AttributionProxy(upstream, spec.channel, pin) as proxy:
            cmd = graded_run.command(profile_arg, stage, proxy.url, folder / "evidence", api_key_env=spec.api_key_env,
                                     promoted=promoted_path, extra=pytest_args)
            before = _counted(spec, r, api_key)
            result = graded_run.run_graded(cmd, folder, proxy.tally)
            after = _counted(spec, r, api_key)
        counted = after - before if before is not None and after is not None else None
        say(f"  {r.id}: {stage} stage {result.verdict} (exit {result.exit_code}) in {result.wall_s:.1f} s; "
            f"{result.tally.answered} answers through its proxy")
        return result, counted

    say(f"fleet: the {stage} stage against {len(up)} replicas, {jobs or len(up)} at a time")
    graded: dict[str, tuple[graded_run.GradedRun, float | None]] = {}
    if up:
        with ThreadPoolExecutor(max_workers=jobs or len(up)) as pool:
            graded = dict(zip([r.id for r in up], pool.map(grade, up)))
    records = []
    for r in spec.replicas:
        if only and r.id not in only:
            continue
        probes, counted, how = probed.get(r.id, ((), None, ""))
        g, g_counted = graded.get(r.id, (None, None))
        # Where the answers name their replica, the proxy's count is the proof; where none did (a channel
        # with no served-by, or a pod's own URL, where AIBrix's gateway adds no target-pod), the
        # replica's own /metrics count over its graded run is.
        named = g is not None and any(k is not None for k in g.tally.served_by)
        records.append(ReplicaRecord(r, readiness[r.id], prints.get(r.id), checks.get(r.id), probes, counted, how, g,
                                     None if named else g_counted, reference.fault_records(r.id) if reference else ()))
    return FleetRecord(spec, profile.name, stage, expected, tuple(records), routing, simulated=reference is not None,
                       reference_faults=dict(reference.faults) if reference else {})
