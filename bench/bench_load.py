"""Benchmark of the load module's own cost (not a timed test): client CPU per request at each
concurrency level, against the same requests sent one by one through the plain client.

The reference server runs in its own process with no simulated latency (prefill and decode rates
0), so the server's CPU is not counted and nearly every second in this process is the client's:
the load module's worker threads, one client (connection) each, the answers' parsing, the grading
of every mix answer by its module's grader, the comparison with concurrency 1 and the figures. The
baseline is the plain cost of asking: the same requests, one at a time, through one
``QualifyClient`` with no grading. CPU is ``time.process_time()`` of this process (all threads),
which, unlike wall time, does not grow when the machine is busy with something else.

Run from the repository root: ``python bench/bench_load.py [--profile 262k] [--rounds 3]``. Every
ratio printed is measured in this one invocation.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_harness import reference_server  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="262k")
    parser.add_argument("--rounds", type=int, default=3, help="repetitions of every level (the figures are medians)")
    args = parser.parse_args(argv)

    from pytest_qualify.graders.load import grade_item
    from pytest_qualify.hooks.server_session import make_client
    from pytest_qualify.profiles import load_profile
    from pytest_qualify.settings import Settings
    from pytest_qualify.tasks.load import Probe, level_plan, load_items, send_level, spread_probes

    profile = load_profile(args.profile)
    rules = profile.load
    if rules is None:
        raise SystemExit(f"profile {args.profile} has no [load] table")
    plan = level_plan(load_items(rules.mix), rules.requests_per_level)
    jobs = spread_probes(plan, Probe(rules.probe_tokens), rules.probes_per_level)
    budget = profile.limits.answer_budget_tokens
    with tempfile.TemporaryDirectory() as tmp, reference_server(args.profile, Path(tmp) / "server.log") as (base, _):
        run = SimpleNamespace(base_url=base, profile=profile,
                              settings=Settings(args.profile, 1, None, "QUALIFY_API_KEY", Path(tmp), None, None))
        plain = make_client(run)
        plain.warm_up()

        def baseline() -> float:
            t0 = time.process_time()
            for i, job in enumerate(jobs):
                request = {"max_tokens": budget, "temperature": 0, "seed": 1, "cache_salt": f"b-{i}", **job.params}
                stream = bool(request.pop("stream", False))
                plain.chat(list(job.messages), stream=stream, **request)
            return (time.process_time() - t0) / len(jobs)

        def level(c: int) -> tuple[float, float]:
            t0 = time.process_time()
            w0 = time.perf_counter()
            sent, _, _ = send_level(lambda: make_client(run), c, jobs, budget, f"bench-{c}")
            for one in sent:
                if one.error:
                    raise SystemExit(f"c={c}: {one.error}")
                if not isinstance(one.job, Probe) and not grade_item(one.job, one.answer):
                    raise SystemExit(f"c={c}: {one.job.key} graded wrong on the reference server")
            return (time.process_time() - t0) / len(sent), (time.perf_counter() - w0)

        base_cpu = sorted(baseline() for _ in range(args.rounds))[args.rounds // 2]
        rows = {}
        for c in rules.levels:
            runs = sorted(level(c) for _ in range(args.rounds))
            rows[c] = runs[args.rounds // 2]
        plain.close()
    result = {"profile": args.profile, "requests_per_level": len(jobs), "rounds": args.rounds,
              "plain_client_cpu_ms_per_request": round(base_cpu * 1000, 3),
              "levels": {c: {"cpu_ms_per_request": round(cpu * 1000, 3), "wall_s": round(wall, 3),
                             "cpu_over_plain": round(cpu / base_cpu, 2)} for c, (cpu, wall) in rows.items()}}
    print(json.dumps(result, indent=2))
    top = rules.levels[-1]
    print(f"load module at concurrency {top}: {rows[top][0] * 1000:.2f} ms of client CPU per request "
          f"({rows[top][0] / base_cpu:.2f}x the plain client's {base_cpu * 1000:.2f} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
