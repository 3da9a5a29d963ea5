"""``python -m pytest_qualify.reference.fleet --port P --profile NAME --replicas N [--replica-fault I:NAME[=ARG]]...``

A SIMULATED fleet in one process: N reference replicas (``handler.py``, each with its own state,
metrics and faults) behind a small round-robin router, as production serves one deployment from N
vLLM replicas behind vLLM's production-stack router, llm-d's endpoint picker or Dynamo.

- Every answer, from a replica or through the router, carries ``x-served-by: <replica id>``
  (:data:`SERVED_BY`), as AIBrix's ``target-pod`` or Dynamo's ``nvext.worker_id`` name the worker.
- A request to the router carrying ``x-qualify-replica: <replica id>`` (:data:`PIN`) goes to that
  replica, as vLLM's ``X-data-parallel-rank`` or Dynamo's ``x-dynamo-worker-instance-id`` pin one;
  any other request goes to the next replica in the round (the router's pool).
- ``--fleet-file PATH``: once everything listens, the router's and every replica's URL in JSON, so a
  caller can reach each replica directly.

Fault switches per replica (``--replica-fault 2:degenerate``: replica ``r2``): the reference
server's own (``faults.py``: ``slow=S``, ``engine_version=V``, ``kv_pool_shrink``, ...) and the
fleet's (:data:`REPLICA_FAULTS`): another revision, other flags, degenerate output, HTTP 500 on
generation with a healthy ``/health``, never routed to. Each replica keeps which of its faults
engaged in ``<fault-log-dir>/<id>-faults.json`` (``fault_log.py``'s format), written before the effect.
"""

from __future__ import annotations

import argparse
import dataclasses
import http.client
import itertools
import json
import re
import sys
import threading
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from pytest_qualify.profiles import Profile, ProfileError, load_profile
from pytest_qualify.reference import SIMULATED_LABEL, oracle
from pytest_qualify.reference.fault_effects import FaultEffects
from pytest_qualify.reference.fault_log import EngagementLog
from pytest_qualify.reference.faults import FaultError, Faults, what_it_breaks
from pytest_qualify.reference.handler import Handler
from pytest_qualify.reference.state import ReferenceState

SERVED_BY = "x-served-by"
PIN = "x-qualify-replica"
# --data-parallel: the router plays one vLLM API server over data-parallel ranks (rank i is replica
# r{i+1}): vLLM's own pin, and its /metrics with the engine label per rank.
DP_PIN = "X-data-parallel-rank"
# The Hugging Face snapshot another revision of the model lives in (a root that names a revision).
OTHER_SNAPSHOT = "snapshots/" + "0f" * 20
REPLICA_FAULTS = {
    "other_revision": "/v1/models shows the model from another revision's snapshot (a rolling update half done)",
    "other_flags": "the replica was started with other flags: --kv-cache-dtype fp8 --block-size 32 "
                   "(vllm:cache_config_info shows them)",
    "degenerate": "every answer is only '!' (no tool calls) while /health, /v1/models and /metrics look healthy",
    "generation_500": "every chat request gets HTTP 500 while /health answers 200 (a hung or broken engine)",
    "never_routed": "the router never sends this replica a request of its round (it is not in the router's pool); "
                    "a pinned request still reaches it",
}


def replica_id(index: int) -> str:
    """The id of the replica at 1-based ``index``."""
    return f"r{index}"


@dataclasses.dataclass(frozen=True)
class ReplicaFaults:
    """One replica's switches: the reference server's own (``server``) and the fleet's (``fleet``)."""

    server: tuple[str, ...] = ()
    fleet: dict[str, str] = dataclasses.field(default_factory=dict)

    def faults(self) -> Faults:
        """One :class:`Faults` holding both kinds, so one engagement log records them all."""
        parsed = Faults.parse(self.server)
        active = {**parsed.active, **self.fleet}
        armed = {r.name: (r.fault, r.what) for r in parsed.log.records()}
        armed.update({name: (f"{name}={arg}" if arg else name, what_it_breaks(REPLICA_FAULTS[name], arg))
                      for name, arg in self.fleet.items()})
        return Faults(active, EngagementLog(armed))


def parse_replica_faults(specs: Sequence[str], replicas: int) -> dict[str, ReplicaFaults]:
    """``I:NAME[=ARG]`` (I: 1..replicas, or the id ``rI``) → each replica's switches. A bad index or
    an unknown name is a :class:`FaultError` naming the spec."""
    server: dict[str, list[str]] = {}
    fleet: dict[str, dict[str, str]] = {}
    for spec in specs:
        where, sep, fault = spec.partition(":")
        index = where[1:] if where.startswith("r") else where
        if not sep or not index.isdigit() or not 1 <= int(index) <= replicas:
            raise FaultError(f"replica fault {spec!r}: expected I:NAME[=ARG] with I from 1 to {replicas}")
        rid = replica_id(int(index))
        name, _, arg = fault.partition("=")
        if name in REPLICA_FAULTS:
            fleet.setdefault(rid, {})[name] = arg
        else:
            Faults.parse([fault])  # an unknown name raises, naming the known ones
            server.setdefault(rid, []).append(fault)
    return {replica_id(i): ReplicaFaults(tuple(server.get(replica_id(i), ())), fleet.get(replica_id(i), {}))
            for i in range(1, replicas + 1)}


class ReplicaEffects(FaultEffects):
    """The reference server's effects plus the fleet's answer fault (``degenerate``)."""

    def reply(self, reply: oracle.Reply, n: int) -> oracle.Reply:
        reply = super().reply(reply, n)
        if "degenerate" in self.faults and self.faults.engage("degenerate"):
            return dataclasses.replace(reply, content="!" * 16, tool_calls=[], reasoning=None)
        return reply


class ReplicaHandler(Handler):
    """One replica: the reference server's handler, every answer signed with its id."""

    replica: str  # set on the bound subclass

    def end_headers(self) -> None:
        self.send_header(SERVED_BY, self.replica)
        super().end_headers()

    def _send_json(self, status: int, payload: Any) -> None:
        faults = self.state.faults
        if self.path == "/v1/models" and status == 200 and "other_revision" in faults and faults.engage("other_revision"):
            for card in payload.get("data", []):
                card["root"] = f"{card['root']}/{OTHER_SNAPSHOT}"
        super()._send_json(status, payload)

    def do_GET(self) -> None:  # noqa: N802
        faults = self.state.faults
        if self.path == "/metrics" and "other_flags" in faults and faults.engage("other_flags"):
            text = self.state.metrics.text().decode()
            text = re.sub(r'cache_dtype="[^"]*"', 'cache_dtype="fp8"', text)
            text = re.sub(r'block_size="[^"]*"', 'block_size="32"', text).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(text)))
            self.end_headers()
            self.wfile.write(text)
            return
        super().do_GET()

    def _chat(self, body: Any) -> None:
        faults = self.state.faults
        if "generation_500" in faults and faults.engage("generation_500"):
            raise oracle.Rejection(500, "Internal Server Error", "InternalServerError")
        super()._chat(body)


@dataclasses.dataclass
class Pool:
    """The router's view: every replica's address, and the round it sends unpinned requests in."""

    replicas: dict[str, tuple[str, int]]  # id -> (host, port)
    routed: tuple[str, ...]  # the ids in the round
    skipped: dict[str, Faults]  # never_routed replicas -> their faults (engaged when the round passes them)
    data_parallel: bool = False
    counter: Any = dataclasses.field(default_factory=itertools.count)
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)

    def next(self) -> str:
        with self.lock:
            n = next(self.counter)
        for faults in self.skipped.values():
            faults.engage("never_routed")  # the round went on without it
        return self.routed[n % len(self.routed)]


HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "proxy-connection", "upgrade"}


class RouterHandler(BaseHTTPRequestHandler):
    """Forwards each request whole to one replica and its answer back piece by piece (a stream
    stays a stream). ``/health`` answers 200 while any replica in the round does."""

    pool: Pool  # set on the bound subclass
    server_version = "pytest-qualify-reference-router"

    def log_message(self, fmt: str, *args: Any) -> None:
        print(f"router {self.address_string()} {fmt % args}", flush=True)

    def do_GET(self) -> None:  # noqa: N802
        self._forward("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._forward("POST")

    def _forward(self, method: str) -> None:
        pinned = self.headers.get(PIN)
        rank = self.headers.get(DP_PIN) if self.pool.data_parallel else None
        if rank is not None:
            pinned = replica_id(int(rank) + 1) if rank.isdigit() else rank
        if self.pool.data_parallel and pinned is None and self.path == "/metrics":
            self._ranked_metrics()
            return
        if pinned is not None and pinned not in self.pool.replicas:
            data = json.dumps({"error": {"message": f"no replica {pinned!r} behind this router", "code": 404}}).encode()
            self.send_response(404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        target = pinned or self.pool.next()
        host, port = self.pool.replicas[target]
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP | {"host", PIN, DP_PIN.lower()}}
        conn = http.client.HTTPConnection(host, port, timeout=3600)
        try:
            conn.request(method, self.path, body=body, headers=headers)
            upstream = conn.getresponse()
            self.send_response(upstream.status)
            for key, value in upstream.getheaders():
                if key.lower() not in HOP_BY_HOP:
                    self.send_header(key, value)
            known = upstream.getheader("Content-Length")
            if known is not None:
                self.send_header("Content-Length", known)
            self.end_headers()
            while True:
                piece = upstream.read1(65536)
                if not piece:
                    break
                self.wfile.write(piece)
                self.wfile.flush()
        except (ConnectionError, OSError) as exc:
            print(f"router: replica {target} at {host}:{port}: {type(exc).__name__}: {exc}", flush=True)
            self.close_connection = True
        finally:
            conn.close()


    def _ranked_metrics(self) -> None:
        """One API server's /metrics over its ranks, as vLLM shows them: every rank's
        ``vllm:request_success`` with its ``engine`` label, and the first rank's other lines."""
        from prometheus_client.parser import text_string_to_metric_families

        lines: list[str] = []
        for rank, (rid, (host, port)) in enumerate(self.pool.replicas.items()):
            conn = http.client.HTTPConnection(host, port, timeout=30)
            try:
                conn.request("GET", "/metrics")
                text = conn.getresponse().read().decode()
            finally:
                conn.close()
            for family in text_string_to_metric_families(text):
                for sample in family.samples:
                    if sample.name == "vllm:request_success_total":
                        labels = {**sample.labels, "engine": str(rank)}
                        shown = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
                        lines.append(f"{sample.name}{{{shown}}} {sample.value}")
            if rank == 0:
                lines += [line for line in text.splitlines() if line.startswith("vllm:cache_config_info")]
        data = ("# TYPE vllm:request_success counter\n" + "\n".join(lines) + "\n").encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def _bound(handler: type[BaseHTTPRequestHandler], **attrs: Any) -> type[BaseHTTPRequestHandler]:
    return type(f"Bound{handler.__name__}", (handler,), attrs)


def start_fleet(host: str, port: int, profile: Profile, replicas: int, faults: dict[str, ReplicaFaults],
                fault_log_dir: Path | None = None, decode_tok_s: float = 0.0, data_parallel: bool = False,
                ) -> tuple[ThreadingHTTPServer, dict[str, ThreadingHTTPServer]]:
    """The replicas and the router, each serving on its own daemon thread; the router on ``port``
    (0: any free port), each replica on a free port. Returns the servers (``server_address`` says where)."""
    servers: dict[str, ThreadingHTTPServer] = {}
    replica_faults: dict[str, Faults] = {}
    for i in range(1, replicas + 1):
        rid = replica_id(i)
        f = faults.get(rid, ReplicaFaults()).faults()
        if fault_log_dir is not None:
            f.log.keep(fault_log_dir / f"{rid}-faults.json")
        state = ReferenceState(profile, f, None, 0.0, decode_tok_s)
        state.effects = ReplicaEffects(f)
        httpd = ThreadingHTTPServer((host, 0), _bound(ReplicaHandler, state=state, replica=rid))
        httpd.daemon_threads = True
        servers[rid] = httpd
        replica_faults[rid] = f
    addresses = {rid: (host, s.server_address[1]) for rid, s in servers.items()}
    routed = tuple(rid for rid in servers if "never_routed" not in replica_faults[rid])
    skipped = {rid: f for rid, f in replica_faults.items() if "never_routed" in f}
    pool = Pool(addresses, routed or tuple(servers), skipped, data_parallel=data_parallel)
    router = ThreadingHTTPServer((host, port), _bound(RouterHandler, pool=pool))
    router.daemon_threads = True
    for httpd in [*servers.values(), router]:
        threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True).start()
    return router, servers


def fleet_map(router: ThreadingHTTPServer, servers: dict[str, ThreadingHTTPServer]) -> dict[str, Any]:
    """The router's and the replicas' URLs (``--fleet-file``)."""
    def url(s: ThreadingHTTPServer) -> str:
        host, port = s.server_address[:2]
        return f"http://{host}:{port}"

    return {"router": url(router), "served_by_header": SERVED_BY, "pin_header": PIN,
            "replicas": [{"id": rid, "url": url(s)} for rid, s in servers.items()]}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pytest_qualify.reference.fleet", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True, help="the router's port")
    parser.add_argument("--profile", required=True, help="built-in profile name or path")
    parser.add_argument("--replicas", type=int, required=True, metavar="N")
    parser.add_argument("--replica-fault", action="append", default=[], metavar="I:NAME[=ARG]",
                        help="a fault on replica I: " + ", ".join(REPLICA_FAULTS) + ", or one of the server's")
    parser.add_argument("--fault-log-dir", default=None, metavar="DIR", help="each replica's <id>-faults.json here")
    parser.add_argument("--fleet-file", default=None, metavar="PATH", help="the router's and replicas' URLs, as JSON")
    parser.add_argument("--data-parallel", action="store_true",
                        help=f"the router plays one vLLM API server over data-parallel ranks ({DP_PIN}, engine label)")
    args = parser.parse_args(argv)
    try:
        if args.replicas < 1:
            raise FaultError(f"--replicas {args.replicas}: expected at least 1")
        profile = load_profile(args.profile)
        faults = parse_replica_faults(args.replica_fault, args.replicas)
    except (ProfileError, FaultError) as exc:
        print(f"reference fleet: {exc}", file=sys.stderr)
        return 2
    log_dir = Path(args.fault_log_dir) if args.fault_log_dir else None
    if log_dir is not None:
        log_dir.mkdir(parents=True, exist_ok=True)
    router, servers = start_fleet(args.host, args.port, profile, args.replicas, faults, log_dir,
                                  data_parallel=args.data_parallel)
    where = fleet_map(router, servers)
    if args.fleet_file:
        path = Path(args.fleet_file)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(json.dumps(where, indent=2) + "\n", encoding="utf-8")
        tmp.replace(path)
    armed = {rid: [*f.server, *f.fleet] for rid, f in faults.items() if f.server or f.fleet}
    print(f"{SIMULATED_LABEL}: fleet of {args.replicas} replicas of {profile.deployment.served_name} behind the "
          f"router on {where['router']}; faults: {json.dumps(armed) if armed else 'none'}", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
