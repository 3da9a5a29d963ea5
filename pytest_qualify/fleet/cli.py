"""``python -m pytest_qualify fleet``: the fleet named, its run, its bundle and one last line out;
the exit status (0 PASS, 1 FAIL, 2 INCOMPLETE, 4 usage: before anything is asked).
``python -m pytest_qualify fleet-merge``: the bundles of one CI job per replica merged into one."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from pytest_qualify.fleet.spec import FleetUsageError, build_spec, channels

USAGE = 4
REFERENCE_ROUTER_STANDIN = "http://127.0.0.1:0"


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("fleet", help="qualify every replica of a fleet behind a router, and the fleet")
    p.add_argument("--qualify", required=True, metavar="PROFILE", help="the profile every replica must serve")
    p.add_argument("--stage", default="post-promotion", help="the stage each replica's graded run runs (default post-promotion)")
    p.add_argument("--replicas", nargs="+", default=[], metavar="[ID=]URL",
                   help="each replica's own URL (default: the profile's [fleet] table, when it has one)")
    p.add_argument("--router", default=None, metavar="URL", help="the route production traffic takes")
    p.add_argument("--replica-count", type=int, default=None, metavar="N",
                   help="how many replicas serve behind the router (llm-d: how many distinct tokens its answers must show)")
    p.add_argument("--replica-ids", default="", metavar="ID,...", help="the replicas' ids (the values their pin takes)")
    p.add_argument("--channel", default=None, choices=sorted(channels()),
                   help="how a replica is pinned and named (channels.toml); default: direct with --replicas, "
                        "reference with --endpoint reference")
    p.add_argument("--only", default="", metavar="ID,...",
                   help="judge only these replicas (one CI job per replica; merge the bundles with fleet-merge)")
    p.add_argument("--ready-timeout", type=float, default=None, metavar="S",
                   help="the bounded wait for every replica's /health (default: the profile's [fleet], else 60)")
    p.add_argument("--probes", type=int, default=3, metavar="N", help="pinned probes a replica (and N a replica through the router)")
    p.add_argument("--replica-e2e-limit", type=float, default=None, metavar="S",
                   help="a replica whose pinned probes' end to end p50 is over S seconds fails as slow")
    p.add_argument("--promoted", default=None, metavar="SUMMARY", help="the promoted run's summary.json every replica is held to")
    p.add_argument("--api-key-env", default="", metavar="NAME", help="environment variable holding the API key")
    p.add_argument("--jobs", type=int, default=0, metavar="N", help="replicas graded at once (default: all)")
    p.add_argument("--pytest-arg", action="append", default=[], metavar="ARG", help="passed to every replica's run")
    p.add_argument("--endpoint", default=None, metavar="reference",
                   help="'reference': start the SIMULATED fleet (--replica-count replicas; tests and demos)")
    p.add_argument("--replica-fault", action="append", default=[], metavar="I:NAME[=ARG]",
                   help="with --endpoint reference: a fault on replica I (reference/fleet.py)")
    p.add_argument("--out", required=True, metavar="DIR", help="the fleet's bundle")
    m = sub.add_parser("fleet-merge", help="merge the fleet bundles of one CI job per replica into one")
    m.add_argument("bundles", nargs="+", metavar="FLEET_BUNDLE")
    m.add_argument("--out", required=True, metavar="DIR")


def fleet_main(args: argparse.Namespace) -> int:
    from pytest_qualify.fleet import render
    from pytest_qualify.fleet.judge import decide
    from pytest_qualify.fleet.runner import run_fleet, start_reference
    from pytest_qualify.profiles import ProfileError, load_profile
    from pytest_qualify.server.lifecycle import StartupError

    started = time.monotonic()
    try:
        profile = load_profile(args.qualify)
        if args.endpoint not in (None, "reference"):
            raise FleetUsageError(f"--endpoint {args.endpoint!r}: only 'reference' (name a real fleet with --replicas "
                                  "or --router)")
        if args.endpoint != "reference" and args.replica_fault:
            raise FleetUsageError("--replica-fault needs --endpoint reference")
        ids = [i for i in args.replica_ids.split(",") if i]
        declared = profile.fleet
        if declared is not None:
            # The profile names the fleet; each field the command line gives wins. The reference
            # fleet takes only the count: it starts its own router and replicas.
            if args.endpoint is None:
                args.replicas = args.replicas or list(declared.replicas)
                args.router = args.router or declared.router
                ids = ids or list(declared.replica_ids)
                args.channel = args.channel or declared.channel
            args.replica_count = args.replica_count if args.replica_count is not None else declared.replica_count
            args.ready_timeout = args.ready_timeout if args.ready_timeout is not None else declared.ready_timeout_s
            args.replica_e2e_limit = args.replica_e2e_limit if args.replica_e2e_limit is not None \
                else declared.replica_e2e_limit_s
        if args.ready_timeout is None:
            args.ready_timeout = 60.0
        reference = None
        if args.endpoint == "reference":
            if args.replicas or args.router:
                raise FleetUsageError("--endpoint reference starts its own fleet: leave out --replicas and --router")
            count = args.replica_count or 0
            if count < 1:
                raise FleetUsageError("--endpoint reference needs --replica-count N (N at least 1)")
            from pytest_qualify.reference.faults import FaultError
            from pytest_qualify.reference.fleet import parse_replica_faults

            try:
                parse_replica_faults(args.replica_fault, count)
            except FaultError as exc:
                raise FleetUsageError(str(exc)) from None
            ids = ids or [f"r{i}" for i in range(1, count + 1)]
        # The reference fleet's router is known once it listens; the spec is checked now (usage errors
        # come before any server starts) with a stand-in address, replaced after the start.
        router = args.router if args.endpoint is None else REFERENCE_ROUTER_STANDIN
        spec = build_spec(replicas=args.replicas, router=router,
                          replica_count=args.replica_count, replica_ids=ids,
                          channel=args.channel or ("reference" if args.endpoint else "direct"),
                          ready_timeout_s=args.ready_timeout, probes_per_replica=args.probes,
                          e2e_limit_s=args.replica_e2e_limit, api_key_env=args.api_key_env)
        only = [i for i in args.only.split(",") if i]
        if only and spec.learns:
            raise FleetUsageError(f"--only needs the replicas named: --channel {spec.channel.name} learns their ids "
                                  "during the run (name them with --replica-ids ID,...)")
        unknown = [i for i in only if i not in spec.ids]
        if unknown:
            raise FleetUsageError(f"--only {','.join(unknown)}: not a named replica ({', '.join(spec.ids)})")
        promoted = None
        if args.promoted:
            from pytest_qualify.promotion.promoted import PromotedError, load_promoted

            try:
                promoted = load_promoted(args.promoted)
            except PromotedError as exc:
                raise FleetUsageError(str(exc)) from None
    except (FleetUsageError, ProfileError) as exc:
        print(f"fleet: {exc}", file=sys.stderr)
        return USAGE
    out = Path(args.out)
    try:
        if args.endpoint == "reference":
            try:
                reference = start_reference(args.qualify, len(spec.replicas), args.replica_fault, out / "reference-fleet")
            except StartupError as exc:
                print(f"fleet: the reference fleet did not start: {exc}", file=sys.stderr)
                return 2
            from dataclasses import replace

            spec = replace(spec, router=reference.router)
        record = run_fleet(spec, profile, args.qualify, out, stage=args.stage, promoted=promoted,
                           promoted_path=args.promoted, jobs=args.jobs, pytest_args=args.pytest_arg, reference=reference,
                           only=only)
    finally:
        if reference is not None:
            reference.stop()
    decision = decide(record)
    doc = render.fleet_document(record, decision, wall_s=time.monotonic() - started)
    secret = os.environ.get(args.api_key_env) if args.api_key_env else None
    render.write(doc, out, [secret] if secret else [])
    for reason in decision.reasons:
        print(f"  {reason}")
    print(f"{render.verdict_line(doc)} · evidence {out}")
    return decision.exit_code


def run_argv(argv: list[str]) -> int:
    """``fleet`` from an argument list (the pytest side's ``--qualify-fleet``): its exit status."""
    parser = argparse.ArgumentParser(prog="python -m pytest_qualify")
    add_parsers(parser.add_subparsers(dest="command", required=True))
    return fleet_main(parser.parse_args(["fleet", *argv]))


def merge_main(args: argparse.Namespace) -> int:
    from pytest_qualify.fleet import merge

    try:
        doc = merge.merge([Path(b) for b in args.bundles], Path(args.out))
    except merge.MergeError as exc:
        print(f"fleet-merge: {exc}", file=sys.stderr)
        return USAGE
    from pytest_qualify.fleet.render import verdict_line

    for reason in doc["decision"]["reasons"]:
        print(f"  {reason}")
    print(f"{verdict_line(doc)} · evidence {args.out}")
    return int(doc["decision"]["exit_code"])
