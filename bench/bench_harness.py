"""Benchmarks of the harness itself (not timed tests): what pytest-qualify costs on top of the
deployment it qualifies.

1. Harness overhead: the full protocol (default ``--qualify=262k --repeat 3``) against the
   reference server with no simulated latency (prefill and decode rates 0), so nearly every
   second is the harness's own: pytest, the client, haystack building, /tokenize sizing, grading,
   the evidence bundle. Reported as harness time / wall time, where the server's share is its own
   ``vllm:e2e_request_latency_seconds`` sum from the run's /metrics snapshots.
2. Sizing cost: wall time and ``/tokenize`` calls to build each context lane's prompt
   (``pytest_qualify.tasks.haystack.size_to_tokens``), 240K included, against the reference server's
   tokenizer.

Run from anywhere: ``python bench/bench_harness.py [--profile 262k] [--repeat 3] [--only sizing|protocol]``.
Every ratio printed is measured in this one invocation.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

ZERO_LATENCY = {"QUALIFY_REFERENCE_PREFILL_TOK_S": "0", "QUALIFY_REFERENCE_DECODE_TOK_S": "0"}


@contextlib.contextmanager
def reference_server(profile: str, log_path: Path, rates: dict[str, str] | None = None,
                     busy_log: Path | None = None) -> Iterator[tuple[str, int]]:
    """The reference server, started here so its CPU time can be read: with zero added latency, or at
    ``rates`` (``QUALIFY_REFERENCE_PREFILL_TOK_S`` / ``QUALIFY_REFERENCE_DECODE_TOK_S``). ``busy_log``:
    keep each answered request's time on the engine there (``busy_reference.py``)."""
    from pytest_qualify.server.lifecycle import free_port

    port = free_port()
    run = ([str(Path(__file__).resolve().parent / "busy_reference.py"), str(busy_log)] if busy_log is not None
           else ["-m", "pytest_qualify.reference"])
    with open(log_path, "wb") as log:
        server = subprocess.Popen([sys.executable, *run, "--port", str(port), "--profile", profile],
                                  env={**os.environ, **(ZERO_LATENCY if rates is None else rates)}, stdout=log, stderr=subprocess.STDOUT)
        try:
            base = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 60
            while True:
                try:
                    with urllib.request.urlopen(base + "/health", timeout=1) as resp:
                        if resp.status == 200:
                            break
                except OSError:
                    if time.monotonic() > deadline or server.poll() is not None:
                        raise SystemExit(f"reference server did not start; see {log_path}")
                    time.sleep(0.1)
            yield base, server.pid
        finally:
            server.terminate()
            server.wait(timeout=10)


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a live process (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def bench_protocol(profile: str, repeat: int, workdir: Path, workers: int) -> dict:
    evidence = workdir / "evidence"
    with reference_server(profile, workdir / "protocol-server.log") as (base, pid):
        argv = [sys.executable, "-m", "pytest", f"--qualify={profile}", "--repeat", str(repeat),
                "--qualify-endpoint", base, "--qualify-evidence", str(evidence), "-p", "no:cacheprovider", "-q"]
        if workers:
            argv += ["-n", str(workers)]
        cpu0 = cpu_seconds(pid)
        # The pytest process tree's CPU (its xdist workers included; the server is not its child):
        # unlike wall time, this does not grow when the machine is busy with something else.
        kids0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        proc = subprocess.run(argv, cwd=workdir, capture_output=True, text=True)
        wall_s = time.perf_counter() - t0
        kids1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        server_cpu_s = cpu_seconds(pid) - cpu0
    harness_cpu_s = (kids1.ru_utime - kids0.ru_utime) + (kids1.ru_stime - kids0.ru_stime)
    runs = sorted(evidence.iterdir())
    if not runs or not (runs[-1] / "summary.json").exists():
        raise SystemExit(f"the protocol run wrote no summary.json (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    summary = json.loads((runs[-1] / "summary.json").read_text())
    server = summary["server_metrics"]["run"] or {}
    items = summary["items"]
    return {
        "exit_status": proc.returncode,
        "verdict": summary["verdict"]["result"],
        "reasons": summary["verdict"]["reasons"] + [f"{f['module']}: {f['item']}: {f['reason']}" for f in summary["verdict"]["failures"]],
        "wall_s": wall_s,
        "session_s": summary["run"]["duration_s"],
        "items": len(items),
        "item_time_s": sum(i["duration_s"] or 0.0 for i in items),
        "chat_requests": server.get("e2e_count") or 0,
        "server_metrics_s": server.get("e2e_sum_s") or 0.0,
        "server_cpu_s": server_cpu_s,
        "harness_cpu_s": harness_cpu_s,
        "client_recorded_request_s": sum(float(i["properties"].get("requests_e2e_s") or 0.0) for i in items),
    }


def bench_sizing(profile_name: str, workdir: Path) -> list[dict]:
    from pytest_qualify.client.endpoint import QualifyClient
    from pytest_qualify.tasks.haystack import Haystack, depth_for, haystack_seed, needle_spec, plan_haystack, size_to_tokens
    from pytest_qualify.profiles import load_profile

    profile = load_profile(profile_name)
    with reference_server(profile_name, workdir / "sizing-server.log") as (base, _pid):
        client = QualifyClient(base, None, profile.deployment.served_name, 600.0)
        rows = []
        for index, lane in enumerate(profile.limits.lanes):
            plan = plan_haystack(haystack_seed("bench", lane.name), depth_for(index, 1, needle_spec().depths))
            spent = {"tokenize_s": 0.0, "build_s": 0.0}

            def count(messages: list, spent: dict = spent) -> int:
                t = time.perf_counter()
                n = client.count_chat_tokens(messages)
                spent["tokenize_s"] += time.perf_counter() - t
                return n

            haystack = Haystack(plan)

            def build(units: int, spent: dict = spent, haystack: Haystack = haystack) -> list:
                t = time.perf_counter()
                messages = haystack.build(units)
                spent["build_s"] += time.perf_counter() - t
                return messages

            t0 = time.perf_counter()
            sized = size_to_tokens(build, count, lane.prompt_tokens, tolerance=profile.limits.lane_tolerance_tokens // 2, max_calls=6)
            total = time.perf_counter() - t0
            rows.append({"lane": lane.name, "target": lane.prompt_tokens, "tokens": sized.tokens, "calls": sized.calls,
                         "total_s": total, **spent,
                         "chars": sum(len(m["content"]) for m in sized.messages if isinstance(m.get("content"), str))})
        client.close()
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", default="262k")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("-n", "--workers", type=int, default=0, help="pytest-xdist workers for the protocol run")
    parser.add_argument("--only", choices=("protocol", "sizing"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="qualify-bench-") as tmp:
        workdir = Path(tmp)
        if args.only != "sizing":
            r = bench_protocol(args.profile, args.repeat, workdir, args.workers)
            harness = r["wall_s"] - r["server_cpu_s"]
            print(f"== harness overhead: --qualify={args.profile} --repeat {args.repeat}"
                  f"{f' -n {args.workers}' if args.workers else ''}, reference server, zero added latency ==")
            print(f"verdict {r['verdict']} (exit {r['exit_status']}); {r['items']} protocol items, "
                  f"{r['chat_requests']:.0f} chat requests")
            for reason in r["reasons"][:5]:
                print(f"  - {reason[:160]}")
            print(f"wall time (pytest process)       {r['wall_s']:8.2f} s")
            print(f"  pytest session (to verdict)    {r['session_s']:8.2f} s")
            print(f"  test items (setup+call+td)     {r['item_time_s']:8.2f} s")
            print(f"  client-recorded requests       {r['client_recorded_request_s']:8.2f} s")
            print(f"server CPU time (whole run)      {r['server_cpu_s']:8.2f} s")
            print(f"  of which its metrics' e2e sum  {r['server_metrics_s']:8.2f} s")
            print(f"harness time = wall - server CPU {harness:8.2f} s")
            print(f"harness time / wall time         {harness / r['wall_s']:8.3f}")
            print(f"harness CPU time (pytest tree)   {r['harness_cpu_s']:8.2f} s")
            print(f"harness seconds per item         {harness / max(1, r['items']):8.3f} s")
            print(f"harness seconds per chat request {harness / max(1, r['chat_requests']):8.3f} s")
            print()
        if args.only != "protocol":
            rows = bench_sizing(args.profile, workdir)
            print(f"== sizing cost: context-lane prompts in server tokens ({args.profile}, reference tokenizer) ==")
            print(f"{'lane':>6} {'target':>8} {'tokens':>8} {'/tokenize':>9} {'total s':>8} {'tokenize s':>10} "
                  f"{'build s':>8} {'tokenize/total':>14}")
            for row in rows:
                print(f"{row['lane']:>6} {row['target']:>8} {row['tokens']:>8} {row['calls']:>9} {row['total_s']:>8.2f} "
                      f"{row['tokenize_s']:>10.2f} {row['build_s']:>8.2f} {row['tokenize_s'] / row['total_s']:>14.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
