"""``python -m pytest_qualify init --endpoint URL [--api-key-env NAME] --out PROFILE.toml``: a
starter profile probed from a running endpoint (``init_profile.py``), validated by the profile
schema before it is kept. ``python -m pytest_qualify report BUNDLE_DIR``: the bundle's
``report.html`` rebuilt from its ``summary.json``, ``transcripts.jsonl`` and plot.
``python -m pytest_qualify compare A_BUNDLE... --vs B_BUNDLE... --out DIR``: two deployments compared
figure by figure across server boots; ``python -m pytest_qualify ab A.toml B.toml --boots N --out DIR``:
the interleaved boots of an A/B campaign, then that comparison (``compare/``).
``python -m pytest_qualify fleet --qualify PROFILE --router URL ... --out DIR``: every replica of a
fleet behind a router qualified, and the fleet; ``fleet-merge``: one CI job per replica merged (``fleet/``)."""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from pathlib import Path


def _init(args: argparse.Namespace) -> int:
    from pytest_qualify.client.endpoint import QualifyClient
    from pytest_qualify.init_profile import InitError, probe, render, report_lines
    from pytest_qualify.profiles import ProfileError, load_profile
    from pytest_qualify.settings import SettingsError, resolve

    try:
        endpoint = resolve({"qualify_endpoint": args.endpoint}, {}, lambda key: None).endpoint or ""
    except SettingsError as exc:
        print(f"init: {exc}", file=sys.stderr)
        return 2
    if endpoint == "reference":
        print("init: --endpoint needs a URL (start the reference server with python -m pytest_qualify.reference)",
              file=sys.stderr)
        return 2
    out = Path(args.out)
    if out.exists() and not args.force:
        print(f"init: {out} exists; pass --force to replace it", file=sys.stderr)
        return 2
    api_key = os.environ.get(args.api_key_env) or None
    client = QualifyClient(endpoint, api_key, args.served_name or "", args.timeout, api_key_env=args.api_key_env)
    try:
        probed = probe(client, endpoint, args.served_name)
    except InitError as exc:
        print(f"init: {endpoint}: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # noqa: BLE001 - an unreachable endpoint, a rejected key
        print(f"init: {endpoint}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    finally:
        client.close()
    name = args.name or re.sub(r"[^A-Za-z0-9_.-]+", "-", str(probed.served_name.value)).strip("-") or "probed"
    text = render(probed, name, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    tmp = out.with_name(out.name + ".tmp")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp.write_text(text, encoding="utf-8")
    try:
        load_profile(str(tmp))
    except ProfileError as exc:  # a bug here, never the operator's: keep the text to look at
        print(f"init: the written profile does not validate ({exc}); left in {tmp}", file=sys.stderr)
        return 1
    tmp.replace(out)
    for line in report_lines(probed):
        print(line)
    print(f"serve command: not written; an endpoint cannot say how it was launched: this profile is for "
          f"attach mode (pytest --qualify={out} --qualify-endpoint {endpoint})")
    print(f"wrote {out} (validated against the profile schema)")
    return 0


def _report(args: argparse.Namespace) -> int:
    import json

    from pytest_qualify.bundle_format.manifest import MANIFEST, SUMMARY, verify_manifest
    from pytest_qualify.evidence.bundle import rebuild_html

    run_dir = Path(args.bundle_dir)
    if not (run_dir / SUMMARY).is_file():
        print(f"report: {run_dir} is not an evidence bundle (no {SUMMARY})", file=sys.stderr)
        return 2
    try:
        path = rebuild_html(run_dir)
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        print(f"report: {run_dir / SUMMARY} cannot be rendered: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {path} ({path.stat().st_size:,} bytes)")
    if (run_dir / MANIFEST).is_file():
        problems = verify_manifest(run_dir)
        if problems == [f"{path.name}: checksum mismatch"]:
            print(f"{MANIFEST}: every other file matches; {path.name} differs from the page sealed in the bundle "
                  "(rendered by another version of pytest-qualify)")
        else:
            print(f"{MANIFEST}: " + ("every file matches" if not problems else "; ".join(problems)))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pytest_qualify")
    sub = parser.add_subparsers(dest="command", required=True)
    init = sub.add_parser("init", help="write a starter profile probed from a running endpoint")
    init.add_argument("--endpoint", required=True, metavar="URL", help="the running OpenAI-compatible endpoint")
    init.add_argument("--api-key-env", default="QUALIFY_API_KEY", metavar="NAME",
                      help="environment variable holding the endpoint's API key (default QUALIFY_API_KEY)")
    init.add_argument("--out", required=True, metavar="PROFILE.toml", help="where to write the profile")
    init.add_argument("--served-name", default=None, help="the model to probe when /v1/models lists several")
    init.add_argument("--name", default=None, help="the profile's name (default: the served name)")
    init.add_argument("--timeout", type=float, default=120.0, metavar="S", help="seconds per probe request")
    init.add_argument("--force", action="store_true", help="replace an existing file")
    report = sub.add_parser("report", help="rebuild an evidence bundle's report.html from its files")
    report.add_argument("bundle_dir", metavar="BUNDLE_DIR", help="the run's evidence folder (holds summary.json)")
    from pytest_qualify.compare.cli import ab_main, add_parsers, compare_main

    add_parsers(sub)
    from pytest_qualify.fleet.cli import add_parsers as add_fleet_parsers, fleet_main, merge_main

    add_fleet_parsers(sub)
    args = parser.parse_args(argv)
    commands = {"report": _report, "init": _init, "compare": compare_main, "ab": ab_main, "fleet": fleet_main,
                "fleet-merge": merge_main}
    return commands[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
