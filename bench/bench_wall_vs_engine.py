"""What the harness adds to the engine's time: one qualification run's wall time against the time the
engine was busy answering it, measured in the same run: the union of the intervals in which the engine
had a request running (``busy.py``: a second with several requests running counts once, a queued
request's wait is not busy time of its own). The old figure, the sum of the requests' end-to-end
latencies (``vllm:e2e_request_latency_seconds`` between the run's first and last ``/metrics`` scrape),
is printed beside it for one release.

Two ways to run it:

- ``python bench/bench_wall_vs_engine.py`` (CPU): the 262k protocol (``--profile 262k``) against the
  reference server simulating a GPU's speeds (``--prefill-tok-s`` / ``--decode-tok-s``, default the
  rates measured for tiny-qwen3 on one H200 with vLLM 0.26.0, docs/real-vllm.md). The reference
  server is started here, before the clock starts.
- ``python bench/bench_wall_vs_engine.py --launch 262k-gpu-steered`` (on a GPU machine): launch mode,
  the plugin starts vLLM; the start-up (the "server ready ... after N s" line) is reported apart and
  left out of the ratio.

Prints the run's wall time, the engine's busy time on both measures and their ratios (goal: <= 1.2 on
the union; the intervals come from the reference server's scheduler, ``busy_reference.py``, or from the
steering proxy's log in a steered launch; an unsteered launch has only the old measure), the run's
phases (start, the items, the end: from the bundle's files' times), the API server's
CPU seconds in the run (its ``process_cpu_seconds_total`` between the run's first and last scrape),
per module the items, seconds (JUnit item durations: where the rest of the time goes) and the
``/tokenize`` calls its items made, the time outside the items, per lane the client's and the
server's time to first token and end to end, how many streamed answers arrived whole in one chunk,
and per load level TTFT, TPOT and ITL per chunk and per token with the tokens per chunk.
``--evidence DIR`` keeps the bundle.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench_harness and busy beside it
import busy  # noqa: E402
# tiny-qwen3 v2 on one H200, vLLM 0.26.0 (docs/real-vllm.md, "Qualifying on a GPU"): prefill from the
# lanes' server TTFT (245,760 tokens in 1.36 s, 32,736 in 0.18 s), decode the steered run's client p50.
GPU_PREFILL_TOK_S = 180_000.0
GPU_DECODE_TOK_S = 370.0
GOAL = 1.2
TIMELINE = "timeline.jsonl"  # each test's span, by bench_timeline.py
READY_RE = re.compile(r"server ready at \S+ after ([0-9.]+) s")


def _fmt(value: object, spec: str = ".3f") -> str:
    return "-" if value is None else format(value, spec)


def run_pytest(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[subprocess.CompletedProcess, busy.Interval]:
    print("$ " + shlex.join(argv), flush=True)
    t0 = time.time()
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, env=env)
    return proc, busy.Interval(t0, time.time())  # the pytest process's span, as the bench saw it


def read_timeline(path: Path) -> dict[str, busy.Interval]:
    """Each test's span (``bench_timeline.py``) by node id."""
    spans = {}
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            spans[row["nodeid"]] = busy.Interval(float(row["start"]), float(row["end"]))
    return spans


def module_rows(summary: dict, spans: dict[str, busy.Interval] | None = None,
                intervals: list[busy.Interval] | None = None) -> list[tuple[str, int, float, int, float | None]]:
    """Per module: items, seconds (JUnit item durations), the ``/tokenize`` calls its items made
    (their ``tokenize_calls`` properties: the run's sizer's calls to the server) and the engine's busy
    seconds inside its items' spans (None without a timeline or intervals), most seconds first."""
    rows: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0, 0, 0.0])
    for item in summary["items"]:
        row = rows[item["module"]]
        row[0] += 1
        row[1] += item.get("duration_s") or 0.0
        calls = (item.get("properties") or {}).get("tokenize_calls")
        row[2] += int(float(calls)) if calls not in (None, "") else 0
        span = (spans or {}).get(item["nodeid"])
        if span is not None and intervals:
            row[3] += busy.union_s(busy.clipped(intervals, span.start_s, span.end_s))
    measured = bool(spans) and bool(intervals)
    return sorted(((m, int(r[0]), r[1], int(r[2]), r[3] if measured else None) for m, r in rows.items()),
                  key=lambda x: -x[2])


def phases(run_dir: Path, clock: busy.Interval, start_s: float | None, first_request_s: float | None) -> list[tuple[str, float]]:
    """The run's phases: the start (pytest's start and collection, a launch's server start, the
    first reads, to the first request the engine answered), the items (to the end ``/metrics``
    scrape), the end's bundle and statement (to the last file of the bundle written) and the exit
    (the server's stop, the guard's release, the interpreter's end, to the pytest process's exit)."""
    end_scrape = run_dir / "metrics-end.prom"
    end_s = end_scrape.stat().st_mtime if end_scrape.is_file() else None
    last_file = max((p.stat().st_mtime for p in run_dir.iterdir() if p.is_file()), default=None)
    out: list[tuple[str, float]] = []
    if first_request_s is not None:
        out.append(("start: pytest, collection, first reads" + (" (server start left out)" if start_s else ""),
                    first_request_s - clock.start_s - (start_s or 0.0)))
        if end_s is not None:
            out.append(("items: the first request to the end scrape", end_s - first_request_s))
    if end_s is not None and last_file is not None:
        out.append(("end: bundle and statement (to the last file written)", last_file - end_s))
    if last_file is not None:
        out.append(("exit: server stop, guard release, interpreter end", clock.end_s - last_file))
    return out


def end_files(run_dir: Path) -> str:
    """The bundle's files written from the end scrape on, in order, with their seconds after it."""
    end = run_dir / "metrics-end.prom"
    if not end.is_file():
        return ""
    t0 = end.stat().st_mtime
    files = sorted((p.stat().st_mtime - t0, p.name) for p in run_dir.iterdir() if p.is_file() and p.stat().st_mtime >= t0)
    return ", ".join(f"{name} +{dt:.2f}" for dt, name in files)


def report(summary: dict, clock: busy.Interval, start_s: float | None, output: str, folders: list[Path]) -> float | None:
    run = summary["server_metrics"]["run"] or {}
    e2e_sum = run.get("e2e_sum_s")
    wall_s = clock.length_s
    qualify_s = wall_s - (start_s or 0.0)
    v = summary["verdict"]
    print(f"verdict {v['result']}; {len(summary['items'])} items; {run.get('e2e_count') or 0:.0f} requests the engine answered")
    for f in v["failures"][:6]:
        print(f"  - {f['module']}: {f['item']}: {f['reason'][:150]}")
    print(f"pytest wall time                  {wall_s:9.2f} s")
    if start_s is not None:
        print(f"  server start (left out)         {start_s:9.2f} s")
    print(f"run wall time                     {qualify_s:9.2f} s")
    found = busy.find_intervals(folders)
    union = ratio = first_request = None
    inside: list[busy.Interval] = []
    if found is not None:
        intervals, source = found
        inside = busy.clipped(intervals, clock.start_s, clock.end_s)
        union = busy.union_s(inside)
        first_request = min((iv.start_s for iv in inside), default=None)
        print(f"engine busy (union of requests)   {union:9.2f} s   ({len(inside)} requests; {source})")
        print(f"  the same requests summed        {busy.summed_s(inside):9.2f} s")
        ratio = qualify_s / union if union else None
    else:
        print("engine busy (union of requests)           -     (no per-request log: an unsteered launch; "
              "the old measure only)")
    print(f"engine busy (e2e latency sum)     {_fmt(e2e_sum, '9.2f')} s   (the old measure: overlaps and queue time counted)")
    old = qualify_s / e2e_sum if e2e_sum else None
    print(f"run wall / engine busy (union)    {_fmt(ratio, '9.2f')}x   (goal <= {GOAL}x)")
    print(f"run wall / e2e latency sum (old)  {_fmt(old, '9.2f')}x")
    run_dir = folders[-1]
    for name, seconds in phases(run_dir, clock, start_s, first_request):
        print(f"phase {name:<58} {seconds:7.2f} s")
    print(f"end files: {end_files(run_dir)}")
    # The API server's own CPU (process_cpu_seconds_total of the process answering /metrics, between
    # the run's first and last scrape): rendering and tokenizing prompts, the harness's /tokenize.
    print(f"API server CPU (run)              {_fmt(run.get('api_server_cpu_s'), '9.2f')} s")
    rows = module_rows(summary, read_timeline(folders[0] / TIMELINE), inside if found is not None else None)
    in_items = sum(r[2] for r in rows)
    print(f"outside the items (start, collection, bundle, stop) {qualify_s - in_items:6.2f} s   (serial runs only)")
    print(f"{'module':<16} {'items':>5} {'seconds':>8} {'engine':>8} {'harness':>8} {'/tokenize':>9}   "
          "(engine: its busy union inside the module's items)")
    for module, items, seconds, calls, engine in rows:
        rest = None if engine is None else seconds - engine
        print(f"{module:<16} {items:>5} {seconds:>8.1f} {_fmt(engine, '8.1f')} {_fmt(rest, '8.1f')} {calls:>9}")
    engine_all = None if any(r[4] is None for r in rows) else sum(r[4] for r in rows)
    print(f"{'all':<16} {sum(r[1] for r in rows):>5} {in_items:>8.1f} {_fmt(engine_all, '8.1f')} "
          f"{_fmt(None if engine_all is None else in_items - engine_all, '8.1f')} {sum(r[3] for r in rows):>9}")
    timing = summary.get("timing") or {}
    lanes = timing.get("lanes") or []
    if lanes:
        print(f"{'lane':>5} {'prompt':>8} {'ttft_s':>7} {'server':>7} {'client/server':>13} {'e2e_s':>7}   "
              "(medians; TTFT at the first chunk, as vllm bench serve)")
    for lane in lanes:
        med = {k: (lane.get(k) or {}).get("median") for k in ("prompt_tokens", "ttft_s", "server_ttft_s",
                                                               "ttft_client_server_ratio", "e2e_s")}
        print(f"{lane['lane']:>5} {_fmt(med['prompt_tokens'], '8.0f')} {_fmt(med['ttft_s'], '7.3f')} "
              f"{_fmt(med['server_ttft_s'], '7.3f')} {_fmt(med['ttft_client_server_ratio'], '13.2f')} "
              f"{_fmt(med['e2e_s'], '7.3f')}")
    streaming = timing.get("streaming") or {}
    if streaming.get("answers"):
        print(f"streamed answers {streaming['answers']}: {streaming.get('whole_at_finish', 0)} arrived whole in one "
              f"chunk with their finish; tokens per content chunk p50 {_fmt(streaming.get('tokens_per_chunk_p50'), '.1f')}"
              f", max {_fmt(streaming.get('tokens_per_chunk_max'), '.0f')}")
    load = timing.get("load") or {}
    if load.get("levels"):
        print(f"{'load c':>6} {'TTFT p50':>9} {'TPOT p50':>9} {'ITL/chunk':>10} {'ITL/token':>10} {'tok/chunk':>10} "
              f"{'ITL/tok : TPOT':>14}   (decode probes, worst repetition; TTFT at the first chunk)")
    for row in load.get("levels") or []:
        tpot, itl_token = row.get("tpot_s_p50"), row.get("itl_token_s_p50")
        print(f"{row['concurrency']:>6} {_fmt(row.get('ttft_s_p50'), '9.4f')} {_fmt(tpot, '9.4f')} "
              f"{_fmt(row.get('itl_s_p50'), '10.4f')} {_fmt(itl_token, '10.4f')} "
              f"{_fmt(row.get('tokens_per_chunk_p50'), '10.1f')} "
              f"{_fmt(itl_token / tpot if itl_token and tpot else None, '14.2f')}")
    last = [line for line in output.splitlines() if "QUALIFICATION" in line]
    if last:
        print(last[-1])
    return ratio


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    ap.add_argument("--profile", default="262k", help="attach mode: the profile the reference server serves")
    ap.add_argument("--launch", metavar="PROFILE", help="launch mode on a GPU machine: the plugin starts this profile's vLLM")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--prefill-tok-s", type=float, default=GPU_PREFILL_TOK_S)
    ap.add_argument("--decode-tok-s", type=float, default=GPU_DECODE_TOK_S)
    ap.add_argument("--evidence", type=Path, default=None, help="where the bundle goes (default: a temporary folder)")
    ap.add_argument("pytest_args", nargs="*", help="more pytest arguments (after --)")
    args = ap.parse_args(argv)
    evidence = (args.evidence or Path(tempfile.mkdtemp(prefix="bench-wall-"))).resolve()
    evidence.mkdir(parents=True, exist_ok=True)
    base = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "bench_timeline", "-q",
            "--repeat", str(args.repeat), "--qualify-evidence", str(evidence)]
    bench_dir = str(Path(__file__).resolve().parent)
    env = {**os.environ, "BENCH_TIMELINE": str(evidence / TIMELINE),
           "PYTHONPATH": os.pathsep.join(p for p in (bench_dir, os.environ.get("PYTHONPATH", "")) if p)}
    from pytest_qualify.hooks.collection import suites_dir

    suites = str(suites_dir())  # the installed plugin's suites (a checkout's own when it is installed editable)
    if args.launch:
        print(f"== run wall vs engine busy: --qualify={args.launch} --repeat {args.repeat}, launch mode ==")
        proc, clock = run_pytest(base + [f"--qualify={args.launch}", *args.pytest_args, suites], evidence, env)
    else:
        from bench_harness import reference_server

        env_rates = {"QUALIFY_REFERENCE_PREFILL_TOK_S": str(args.prefill_tok_s),
                     "QUALIFY_REFERENCE_DECODE_TOK_S": str(args.decode_tok_s)}
        print(f"== run wall vs engine busy: --qualify={args.profile} --repeat {args.repeat}, reference server at "
              f"{args.prefill_tok_s:,.0f} prefill / {args.decode_tok_s:,.0f} decode tok/s ==")
        with reference_server(args.profile, evidence / "reference-server.log", env_rates,
                              busy_log=evidence / busy.BUSY_LOG) as (url, _pid):
            proc, clock = run_pytest(base + [f"--qualify={args.profile}", "--qualify-endpoint", url, *args.pytest_args,
                                             suites], evidence, env)
    runs = [p for p in evidence.iterdir() if p.is_dir() and (p / "summary.json").is_file()]
    if len(runs) != 1:
        print(proc.stdout[-4000:] + proc.stderr[-2000:])
        print(f"no single summary.json under {evidence}")
        return 2
    ready = READY_RE.search(proc.stdout)
    ratio = report(json.loads((runs[0] / "summary.json").read_text()), clock, float(ready.group(1)) if ready else None,
                   proc.stdout, [evidence, runs[0]])
    print(f"pytest exit {proc.returncode}; evidence {runs[0]}")
    return 0 if ratio is not None else 2


if __name__ == "__main__":
    sys.exit(main())
