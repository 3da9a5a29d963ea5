"""The shipped 262k recipe on a real vLLM (CPU), the parts too heavy for CI: the 32K, 128K and 240K
lanes and both sides of the window bracket (a prompt of 261,888 tokens answered, one of 262,145
refused), with the identity and the enable_thinking override, in one launch-mode run of the
``262k-cpu`` profile.

Prints one line per protocol item: outcome, the lane's size as ``/tokenize`` sized it and as the
server counted it, the ``/tokenize`` calls it took, cached tokens, time to first token, end to end,
the item's wall time, and the reason of a failure; then the run's wall time. A random model's
answers fail the answer checks; what is measured is the serving side.

Run: ``python bench/bench_262k_cpu.py`` (about 10-20 min on 2 idle cores; ``.ci/vllm-env.sh``
first), ``--select EXPR`` for another ``-k`` selection, ``--repeat N`` for more repetitions.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SELECTION = ("test_health or test_identity or test_engine_version or test_context_retrieval "
                     "or test_prompt_that_fits_is_answered or test_prompt_over_window_is_refused "
                     "or test_thinking_override")


def _fmt(value: object, spec: str = "") -> str:
    if value is None or value == "":
        return "-"
    try:
        return format(value, spec)
    except (TypeError, ValueError):
        return str(value)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--select", default=DEFAULT_SELECTION, help="pytest -k expression over the protocol items")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--evidence", type=Path, default=None, help="evidence directory (default: a temporary one)")
    args = ap.parse_args(argv)
    evidence = (args.evidence or Path(tempfile.mkdtemp(prefix="bench-262k-cpu-"))).resolve()
    evidence.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--qualify=262k-cpu",
           "--repeat", str(args.repeat), "-k", args.select, "--qualify-evidence", str(evidence),
           str(ROOT / "suites")]
    print("$ " + shlex.join(cmd), flush=True)
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=evidence, capture_output=True, text=True)
    wall = time.monotonic() - t0
    runs = [p for p in evidence.iterdir() if p.is_dir()]
    if len(runs) != 1 or not (runs[0] / "summary.json").is_file():
        print(proc.stdout[-4000:] + proc.stderr[-2000:])
        print(f"no summary.json under {evidence}")
        return 2
    summary = json.loads((runs[0] / "summary.json").read_text())
    ready = next((line for line in proc.stdout.splitlines() if "server ready" in line), "server never ready")
    print(ready)
    print(f"{'item':58} {'outcome':7} {'sized':>7} {'server':>7} {'calls':>5} {'cached':>6} "
          f"{'ttft_s':>7} {'e2e_s':>7} {'item_s':>7}  reason")
    for item in summary["items"]:
        p = item.get("properties", {})
        sized = p.get("sized_prompt_tokens", p.get("fit_prompt_tokens", p.get("over_prompt_tokens")))
        status = p.get("overwindow_status")
        reason = item.get("reason", "") if item["outcome"] != "passed" else (f"HTTP {status}" if status else "")
        print(f"{item['item'][:58]:58} {item['outcome']:7} {_fmt(sized):>7} {_fmt(p.get('prompt_tokens')):>7} "
              f"{_fmt(p.get('tokenize_calls')):>5} {_fmt(p.get('cached_tokens')):>6} {_fmt(p.get('ttft_s'), '.1f'):>7} "
              f"{_fmt(p.get('e2e_s'), '.1f'):>7} {_fmt(item.get('duration_s'), '.1f'):>7}  {reason[:110]}")
    print(f"pytest exit {proc.returncode}; wall time {wall:.0f} s (server start included); evidence {runs[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
