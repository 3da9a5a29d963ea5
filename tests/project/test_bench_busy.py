"""The bench's measure of the engine's busy time (``bench/busy.py``): the union of the intervals in
which the engine had a request running, checked on a seeded fake engine whose busy time is known."""

from __future__ import annotations

import json
import random
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import busy  # noqa: E402


def fake_engine(seed: int, max_num_seqs: int, requests: int) -> tuple[list[busy.Interval], list[busy.Interval], float]:
    """A seeded engine: requests arrive at random, wait for one of ``max_num_seqs`` seats (first come,
    first served) and run for a random time. Returns each request's arrival-to-end interval (what a
    client or the e2e histogram sees: queue time in it), its admitted-to-end interval, and the engine's
    busy time computed on its own, as the length of the time with at least one seat taken, by
    walking a 1 ms grid: a second way to the answer, not the union's code."""
    rng = random.Random(seed)
    arrivals = sorted(round(rng.uniform(0, 20), 3) for _ in range(requests))
    free_at = [0.0] * max_num_seqs
    e2e, running = [], []
    for arrived in arrivals:
        seat = min(range(max_num_seqs), key=lambda i: free_at[i])
        admitted = max(arrived, free_at[seat])
        ended = round(admitted + rng.uniform(0.05, 2.0), 3)
        free_at[seat] = ended
        e2e.append(busy.Interval(arrived, ended))
        running.append(busy.Interval(admitted, ended))
    horizon = int(max(iv.end_s for iv in running) * 1000) + 1
    covered = [False] * horizon
    for iv in running:
        for ms in range(round(iv.start_s * 1000), round(iv.end_s * 1000)):
            covered[ms] = True
    return e2e, running, sum(covered) / 1000


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("max_num_seqs", [1, 4])
def test_union_is_the_fake_engines_busy_time(seed, max_num_seqs):
    e2e, running, known = fake_engine(seed, max_num_seqs, 40)
    assert busy.union_s(running) == pytest.approx(known, abs=1e-6)
    # Queued requests overlap a running one: their arrival-to-end intervals give the same union
    # (a work-conserving engine is never idle while a request waits), and the old sum is larger.
    assert busy.union_s(e2e) == pytest.approx(known, abs=1e-6)
    assert busy.summed_s(e2e) > busy.union_s(e2e) + 1.0


def test_union_counts_an_overlap_once_and_a_gap_not_at_all():
    intervals = [busy.Interval(0, 2), busy.Interval(1, 3), busy.Interval(5, 6), busy.Interval(5.5, 5.7),
                 busy.Interval(7, 7)]
    assert busy.union_s(intervals) == pytest.approx(4.0)
    assert busy.summed_s(intervals) == pytest.approx(5.2)
    assert busy.union_s([]) == 0.0
    assert busy.union_s(busy.clipped(intervals, 1.5, 5.5)) == pytest.approx(2.0)


def test_logs_are_read_answered_requests_only(tmp_path):
    (tmp_path / busy.STEER_LOG).write_text("\n".join(json.dumps(row) for row in [
        {"seq": 1, "status": 200, "started_at": 10.0, "ended_at": 11.0},
        {"seq": 2, "status": 400, "started_at": 11.0, "ended_at": 12.0},  # refused: never on the engine
        {"seq": 3, "status": 200},  # an older proxy's line: no times
        {"seq": 4, "status": 200, "started_at": 10.5, "ended_at": 12.5},
    ]) + "\n")
    intervals, source = busy.find_intervals([tmp_path])
    assert intervals == [busy.Interval(10.0, 11.0), busy.Interval(10.5, 12.5)]
    assert "steering proxy" in source
    (tmp_path / busy.BUSY_LOG).write_text('{"start": 1, "end": 2}\n{"start": 3, "en')  # the last line cut
    intervals, source = busy.find_intervals([tmp_path])
    assert intervals == [busy.Interval(1.0, 2.0)] and "scheduler" in source
    assert busy.find_intervals([tmp_path / "none"]) is None


@pytest.mark.e2e
def test_the_bench_measures_a_steered_launch_on_the_union_and_prints_its_phases(tmp_path):
    # Launch mode as on a GPU (``--launch 262k-gpu-steered``), with the fake vLLM in place of
    # ``vllm serve``: the union comes from the steering proxy's log, the start-up is left out.
    import subprocess

    from ..fake_vllm import fake_command
    from ..helpers import write_profile

    profile = write_profile(tmp_path, ("smoke", "recall"), name="steered.toml")
    profile.write_text(profile.read_text().replace(
        "[modules]", '[steer]\ntool_call_syntax = "hermes"\nstrip_chat_template_kwargs = true\n\n[modules]', 1))
    bench = Path(__file__).resolve().parents[2] / "bench" / "bench_wall_vs_engine.py"
    out = subprocess.run([sys.executable, str(bench), "--launch", str(profile), "--repeat", "2",
                          "--evidence", str(tmp_path / "ev"), "--", "--qualify-serve-command", fake_command()],
                         capture_output=True, text=True, timeout=300)
    text = out.stdout + out.stderr
    assert out.returncode == 0, text
    assert re.search(r"server start \(left out\)\s+[0-9.]+ s", text), text
    union = re.search(r"engine busy \(union of requests\)\s+([0-9.]+) s\s+\((\d+) requests; steer\.jsonl", text)
    assert union and float(union.group(1)) > 0 and int(union.group(2)) > 0, text
    assert re.search(r"run wall / engine busy \(union\)\s+[0-9.]+x", text), text
    assert re.search(r"run wall / e2e latency sum \(old\)\s+[0-9.]+x", text), text
    for phase in ("start: pytest, collection, first reads (server start left out)", "items: the first request",
                  "end: bundle and statement", "exit: server stop, guard release"):
        assert f"phase {phase}" in text, text
