"""``python -m pytest_qualify.reference --port P --profile NAME [--fault NAME[=ARG]]...``

With ``--steer URL`` it is no simulation: a proxy in front of the real vLLM at URL that forces the
oracles' answers on it (``steer.py``)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from pytest_qualify.profiles import ProfileError, load_profile
from pytest_qualify.reference.faults import Faults, FaultError
from pytest_qualify.reference.handler import serve


def boot_factor(speed: float, jitter: float, seed: str) -> float:
    """This boot's rate factor: ``speed`` times a seeded lognormal draw of sd ``jitter``."""
    import math
    import random

    if jitter <= 0:
        return speed
    return speed * math.exp(random.Random(f"reference-boot:{seed}").gauss(0.0, jitter))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pytest_qualify.reference", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--profile", required=True, help="built-in profile name or path")
    parser.add_argument("--fault", action="append", default=[], metavar="NAME[=ARG]")
    parser.add_argument("--api-key-env", default=None, help="environment variable holding the API key")
    parser.add_argument("--fault-log", default=None, metavar="PATH",
                        help="keep which armed faults engaged, and when, in this JSON file (fault_log.py)")
    # The environment can set the rates because the plugin launches this server itself: the
    # harness benchmark (bench/) runs it with no added latency.
    parser.add_argument("--prefill-tok-s", type=float,
                        default=float(os.environ.get("QUALIFY_REFERENCE_PREFILL_TOK_S", 1_000_000.0)),
                        help="simulated prefill rate (0: none; env QUALIFY_REFERENCE_PREFILL_TOK_S)")
    parser.add_argument("--decode-tok-s", type=float,
                        default=float(os.environ.get("QUALIFY_REFERENCE_DECODE_TOK_S", 2_000.0)),
                        help="simulated decode rate (0: none; env QUALIFY_REFERENCE_DECODE_TOK_S)")
    # A known shift inside or outside a known noise, for the comparison's tests (compare/): every
    # rate is multiplied by the speed factor and by this boot's own draw of exp(N(0, jitter)), seeded
    # by the boot's name (an A/B campaign names each boot), so a boot-to-boot spread is reproducible.
    parser.add_argument("--speed", type=float, default=float(os.environ.get("QUALIFY_REFERENCE_SPEED", 1.0)),
                        help="rate factor, e.g. 0.986 for a 1.4%% slower server (env QUALIFY_REFERENCE_SPEED)")
    parser.add_argument("--jitter", type=float, default=float(os.environ.get("QUALIFY_REFERENCE_JITTER", 0.0)),
                        help="boot-to-boot jitter: the sd of the log rate per boot (env QUALIFY_REFERENCE_JITTER)")
    parser.add_argument("--boot-seed", default=os.environ.get("QUALIFY_REFERENCE_BOOT_SEED", ""),
                        help="names this boot's jitter draw (env QUALIFY_REFERENCE_BOOT_SEED)")
    parser.add_argument("--stream-whole", action="store_true",
                        default=os.environ.get("QUALIFY_REFERENCE_STREAM_WHOLE", "") not in ("", "0"),
                        help="stream each answer's content in one chunk with its finish, as vLLM 0.32.0 does with "
                             "--enable-auto-tool-choice and a tool parser (env QUALIFY_REFERENCE_STREAM_WHOLE)")
    steering = parser.add_argument_group("steering mode (steer.py)")
    steering.add_argument("--steer", metavar="URL", default=None,
                          help="forward every request to the real vLLM at URL, forcing the oracles' answers")
    steering.add_argument("--tool-call-syntax", default="hermes", choices=("qwen3_coder", "hermes"),
                          help="how the served model writes tool calls (its --tool-call-parser)")
    steering.add_argument("--strip-chat-template-kwargs", action="store_true",
                          help="drop the caller's chat_template_kwargs, as a router in front of the deployment may")
    steering.add_argument("--steer-log", default="steer.jsonl", help="one JSON line per chat request")
    args = parser.parse_args(argv)
    try:
        profile = load_profile(args.profile)
        faults = Faults.parse(args.fault)
    except (ProfileError, FaultError) as exc:
        print(f"reference server: {exc}", file=sys.stderr)
        return 2
    if args.steer:
        from pytest_qualify.reference.steer import SteerConfig, check_faults, serve_steer
        from pytest_qualify.reference.steer_forcing import SteerError

        try:
            check_faults(list(faults.active))
        except SteerError as exc:
            print(f"steering proxy: {exc}", file=sys.stderr)
            return 2
    if args.fault_log:
        faults.log.keep(Path(args.fault_log))
    if args.steer:
        serve_steer(args.host, args.port, SteerConfig(args.steer, args.tool_call_syntax,
                                                      args.strip_chat_template_kwargs, Path(args.steer_log)),
                    profile, faults)
        return 0
    api_key = os.environ.get(args.api_key_env) if args.api_key_env else None
    factor = boot_factor(args.speed, args.jitter, args.boot_seed)
    serve(args.host, args.port, profile, faults, api_key=api_key,
          prefill_tok_s=args.prefill_tok_s * factor, decode_tok_s=args.decode_tok_s * factor,
          stream_whole=args.stream_whole)
    return 0


if __name__ == "__main__":
    sys.exit(main())
