"""Forcing the parsers corpus in the tokenizer's own tokens, measured in one run on real vLLM (CPU).

The parsers module forces each case's text with a grammar (structured outputs). A grammar allows any
spelling of the text, and a random model picks among them; biasing the text's own token ids
(``tasks/parsers.TEXT_BIAS``, the served tokenizer's encoding) makes the engine write it as its
tokenizer does. This bench asks the same cases both ways against one vLLM (profile
``tiny-qwen3-parsers``, launched here), in the order unbiased, biased, unbiased, biased (drift
cancels), and prints per arm the tokens generated, tokens per byte of forced text, the cases that
came back exactly, and the wall time; then the ratios.

Run: ``python bench/bench_parsers_bias.py`` (about 5 min on 2 idle cores; ``.ci/vllm-env.sh``
first), ``--cases N`` for another sample size (drawn seeded from every kind but the 10K strings).
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pytest_qualify.client.endpoint import QualifyClient
from pytest_qualify.profiles import load_profile
from pytest_qualify.server.lifecycle import ServerProcess
from pytest_qualify.server.target import launch_spec
from pytest_qualify.settings import Settings
from pytest_qualify.tasks import parsers

PROFILE = "tiny-qwen3-parsers"
SEED = 20261206


def ask_all(client: QualifyClient, cases: list[parsers.ParserCase], markers: dict[str, int], *, bias: bool,
            workers: int) -> tuple[list[parsers.Asked], float]:
    def one(case: parsers.ParserCase) -> parsers.Asked:
        return parsers.ask_case(lambda m, **p: client.chat(m, temperature=0, seed=1, **p), case, "qwen3_coder", markers,
                                thinking_off=False, label="bench", model=client.model,
                                tokenize=client.text_token_ids if bias else None)

    t0 = time.monotonic()
    with ThreadPoolExecutor(workers) as pool:
        asked = list(pool.map(one, cases))
    return asked, time.monotonic() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=96, help="cases per half-arm (each arm asks them twice)")
    ap.add_argument("--profile", default=PROFILE, help="the parsers' test deployment (a name or a file)")
    args = ap.parse_args(argv)
    profile = load_profile(args.profile)
    pool = [c for c in parsers.corpus() if c.kind != "long_string"]
    cases = random.Random(SEED).sample(pool, args.cases)
    run_dir = Path(tempfile.mkdtemp(prefix="bench-parsers-bias-"))
    spec = launch_spec(profile, Settings(profile.name, 1, None, "QUALIFY_API_KEY", run_dir, None, None), run_dir, None)
    process = ServerProcess(spec)
    process.start()
    try:
        print(f"vLLM ready in {process.wait_ready():.0f} s ({profile.name}); {len(cases)} cases, "
              f"{profile.limits.max_num_seqs} at a time, plain and streamed", flush=True)
        client = QualifyClient(spec.base_url, None, profile.deployment.served_name, 900.0)
        markers = parsers.marker_ids(client.text_token_ids)
        arms: dict[bool, dict[str, float]] = {False: {}, True: {}}
        for bias in (False, True, False, True):
            asked, wall = ask_all(client, cases, markers, bias=bias, workers=profile.limits.max_num_seqs)
            tokens = sum(a.line["completion_tokens"] or 0 for a in asked)
            nbytes = sum(len(parsers.model_text(a.case, "qwen3_coder").encode()) for a in asked)
            arm = arms[bias]
            for key, value in (("tokens", tokens), ("bytes", nbytes), ("wall_s", wall),
                               ("exact", sum(1 for a in asked if not a.deviates)),
                               ("markers_held", sum(1 for a in asked if a.unforced is None)),
                               ("asked", len(asked))):
                arm[key] = arm.get(key, 0) + value
            print(f"  {'biased  ' if bias else 'unbiased'}: {tokens} tokens generated plain for {nbytes} bytes "
                  f"({tokens / nbytes:.3f} a byte), {wall:.1f} s", flush=True)
    finally:
        process.stop()
    for bias, arm in arms.items():
        print(f"{'biased' if bias else 'unbiased'}: {arm['tokens']:.0f} tokens ({arm['tokens'] / arm['bytes']:.3f} a byte), "
              f"{arm['exact']:.0f} of {arm['asked']:.0f} exact, markers as their own tokens in {arm['markers_held']:.0f}, "
              f"{arm['wall_s']:.1f} s")
    print(f"biased / unbiased: tokens {arms[True]['tokens'] / arms[False]['tokens']:.2f}x, "
          f"wall {arms[True]['wall_s'] / arms[False]['wall_s']:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
