"""``python -m pytest_qualify.reference --port P --profile NAME [--fault NAME[=ARG]]...``"""

from __future__ import annotations

import argparse
import os
import sys

from pytest_qualify.profiles import ProfileError, load_profile
from pytest_qualify.reference.faults import Faults, FaultError
from pytest_qualify.reference.server import serve


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pytest_qualify.reference", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--profile", required=True, help="built-in profile name or path")
    parser.add_argument("--fault", action="append", default=[], metavar="NAME[=ARG]")
    parser.add_argument("--api-key-env", default=None, help="environment variable holding the API key")
    # The environment can set the rates because the plugin launches this server itself: the
    # harness benchmark (bench/) runs it with no added latency.
    parser.add_argument("--prefill-tok-s", type=float,
                        default=float(os.environ.get("QUALIFY_REFERENCE_PREFILL_TOK_S", 1_000_000.0)),
                        help="simulated prefill rate (0: none; env QUALIFY_REFERENCE_PREFILL_TOK_S)")
    parser.add_argument("--decode-tok-s", type=float,
                        default=float(os.environ.get("QUALIFY_REFERENCE_DECODE_TOK_S", 2_000.0)),
                        help="simulated decode rate (0: none; env QUALIFY_REFERENCE_DECODE_TOK_S)")
    args = parser.parse_args(argv)
    try:
        profile = load_profile(args.profile)
        faults = Faults.parse(args.fault)
    except (ProfileError, FaultError) as exc:
        print(f"reference server: {exc}", file=sys.stderr)
        return 2
    api_key = os.environ.get(args.api_key_env) if args.api_key_env else None
    serve(args.host, args.port, profile, faults, api_key=api_key,
          prefill_tok_s=args.prefill_tok_s, decode_tok_s=args.decode_tok_s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
