"""``python -m pytest_qualify compare`` and ``python -m pytest_qualify ab``: arguments in, the
comparison's files and one last line out, the exit status (0 B not worse, 1 B worse or an item
regression, 2 incomplete, 4 usage). No pytest imported here.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from pytest_qualify.compare.boots import ArmBoots, CompareUsageError, check_comparable, read_boot

USAGE = 4


def add_parsers(sub: argparse._SubParsersAction) -> None:
    cmp = sub.add_parser("compare", help="compare two sets of evidence bundles (one per server boot), figure by figure")
    cmp.add_argument("a", nargs="+", metavar="A_BUNDLE", help="arm A's bundles (the incumbent, or recipe A)")
    cmp.add_argument("--vs", nargs="+", required=True, metavar="B_BUNDLE", help="arm B's bundles (the candidate)")
    cmp.add_argument("--reference", nargs="+", default=None, metavar="R_BUNDLE",
                     help="a reference deployment's bundles (e.g. the BF16 Primary): B failures it shares are not B's own")
    _common(cmp)
    cmp.add_argument("--boots", type=int, default=None, metavar="N", help="boots each arm must have (fewer: exit 2)")
    cmp.add_argument("--spread", choices=("boot-to-boot", "run-to-run"), default="boot-to-boot",
                     help="what one bundle is: a server boot, or a run against an endpoint that kept running")
    ab = sub.add_parser("ab", help="an A/B campaign: interleaved boots of two profiles (A, B, B, A, …), then compare")
    ab.add_argument("profile_a", metavar="A.toml")
    ab.add_argument("profile_b", metavar="B.toml")
    ab.add_argument("--boots", type=int, default=None, metavar="N", help="boots per arm (default: the profile's [ab] boots)")
    ab.add_argument("--repeat", type=int, default=1, metavar="N", help="--repeat of each boot's run")
    ab.add_argument("--endpoint", default=None, metavar="reference",
                    help="'reference': each boot starts the SIMULATED reference server (tests, demos)")
    ab.add_argument("--attach", nargs=2, default=None, metavar=("URL_A", "URL_B"),
                    help="attach mode: run against two running endpoints; the spread is run-to-run, not boot-to-boot")
    ab.add_argument("--a-env", action="append", default=[], metavar="KEY=VALUE", help="environment of arm A's boots")
    ab.add_argument("--b-env", action="append", default=[], metavar="KEY=VALUE", help="environment of arm B's boots")
    ab.add_argument("--pytest-arg", action="append", default=[], metavar="ARG", help="passed to every boot's pytest")
    _common(ab)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, metavar="DIR", help="where comparison.json, .md and .html go")
    p.add_argument("--gate", action="append", default=None, metavar="FIGURE",
                   help="a figure id or glob that gates (repeatable; default: the profile's [ab] figures, else every figure)")
    p.add_argument("--tolerance", type=float, default=None, metavar="PCT",
                   help="the equivalence tolerance in percent (default: the profile's [ab] tolerance_pct, else 5)")
    p.add_argument("--noise-floor", default=None, metavar="FILE", help="an A/A campaign's noise-floor.json: per-figure tolerances")
    p.add_argument("--allow-mixed-hosts", action="store_true", help="compare boots that ran on different kinds of host")


def _statistics_installed() -> None:
    try:
        import scipy  # noqa: F401
        import statsmodels  # noqa: F401
    except ImportError as exc:
        raise CompareUsageError(f"the comparison needs scipy and statsmodels ({exc}): "
                                "pip install 'pytest-qualify[compare]'") from None


def _finish(arms: list[ArmBoots], args: argparse.Namespace, *, gate: Sequence[str], tolerance: float,
            noise_path: str | None, spread: str, boots_asked: int | None, noise_out: bool = False) -> int:
    from pytest_qualify.compare.comparison import compare_arms, last_line
    from pytest_qualify.compare.noise import noise_floor, read_noise_floor, write_noise_floor
    from pytest_qualify.compare.render import write

    workload = check_comparable(arms, allow_mixed_hosts=args.allow_mixed_hosts)
    floor = read_noise_floor(noise_path, workload) if noise_path else None
    by = {arm.name: arm for arm in arms}
    comparison = compare_arms(by["A"], by["B"], reference=by.get("reference"), workload=workload,
                              tolerance_pct=tolerance, noise_floor=floor, gate_patterns=gate,
                              boots_asked=boots_asked, spread=spread)
    out = Path(args.out)
    write(comparison, out)
    md = (out / "comparison.md").read_text(encoding="utf-8")
    print(md.split("## Gate rows", 1)[0].rstrip())
    if noise_out and comparison["exit_code"] != 2:
        path = write_noise_floor(noise_floor(comparison["figures"], workload=workload, spread=spread), out)
        print(f"noise floor: {path} (per-figure tolerances for a later comparison: --noise-floor {path})")
    print(last_line(comparison, str(out)))
    return int(comparison["exit_code"])


def compare_main(args: argparse.Namespace) -> int:
    try:
        _statistics_installed()
        arms = [ArmBoots("A", [read_boot(p) for p in args.a]), ArmBoots("B", [read_boot(p) for p in args.vs])]
        if args.reference:
            arms.append(ArmBoots("reference", [read_boot(p) for p in args.reference]))
        return _finish(arms, args, gate=args.gate or (), tolerance=args.tolerance or 5.0,
                       noise_path=args.noise_floor, spread=args.spread, boots_asked=args.boots)
    except CompareUsageError as exc:
        print(f"compare: {exc}", file=sys.stderr)
        return USAGE


def _env(pairs: Sequence[str], flag: str) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise CompareUsageError(f"{flag} {pair!r}: expected KEY=VALUE")
        out[key] = value
    return out


def ab_main(args: argparse.Namespace) -> int:
    from pytest_qualify.bundle_format.workload import differences
    from pytest_qualify.compare.campaign import STAGE, ArmPlan, boot_order, run_campaign
    from pytest_qualify.profiles import ProfileError, load_profile

    try:
        _statistics_installed()
        try:
            pa, pb = load_profile(args.profile_a), load_profile(args.profile_b)
        except ProfileError as exc:
            raise CompareUsageError(str(exc)) from None
        if args.endpoint and args.attach:
            raise CompareUsageError("--endpoint reference and --attach are two different targets: give one")
        if args.endpoint not in (None, "reference"):
            raise CompareUsageError(f"--endpoint {args.endpoint!r}: only 'reference'; attach to URLs with --attach URL_A URL_B")
        for p in (pa, pb):
            try:
                stage = p.stage(STAGE)
            except ValueError as exc:
                raise CompareUsageError(f"profile {p.name}: {exc}") from None
            if not {"context", "load"} & set(stage.modules):
                raise CompareUsageError(f"profile {p.name}: its timing stage runs neither the context lanes nor the "
                                        "load module: there is no figure to compare")
        diff = differences(pa.workload(STAGE), pb.workload(STAGE), a_name=f"A ({pa.name})", b_name=f"B ({pb.name})")
        if diff:
            raise CompareUsageError("the two profiles measure different workloads: " + "; ".join(diff))
        rules = pb.ab
        # Before any boot: a gating figure the timing stage cannot produce would end the campaign only
        # after every boot (compare/figures.py).
        from pytest_qualify.compare.figures import unproducible_gates

        gates = args.gate or list(rules.figures)
        unproducible = unproducible_gates(gates, pa, STAGE) or unproducible_gates(gates, pb, STAGE)
        if unproducible:
            raise CompareUsageError("; ".join(unproducible))
        boots = args.boots or rules.boots
        if boots < 2:
            raise CompareUsageError(f"--boots {boots}: at least 2 per arm (one boot has no boot-to-boot spread)")
        endpoints = tuple(args.attach) if args.attach else (args.endpoint, args.endpoint)
        plans = (ArmPlan("A", args.profile_a, endpoints[0], _env(args.a_env, "--a-env")),
                 ArmPlan("B", args.profile_b, endpoints[1], _env(args.b_env, "--b-env")))
        same = Path(pa.source).resolve() == Path(pb.source).resolve() and plans[0].env == plans[1].env \
            and endpoints[0] == endpoints[1]
        spread = "run-to-run" if args.attach else "boot-to-boot"
        out = Path(args.out)
        print(f"A/B campaign: {boots} boots per arm, order " + ", ".join(arm for arm, _ in boot_order(boots))
              + f"; stage {STAGE}; {spread} spread" + ("; A/A: measuring the noise floor" if same else ""))
        if args.attach:
            print("attach mode: the endpoints keep running between runs, so each sample is a run, not a server boot: "
                  "the spread is run-to-run, and a boot's own luck (its graphs, its memory layout) is not in it")
        runs = run_campaign(plans[0], plans[1], boots=boots, out_dir=out, repeat=args.repeat, extra=args.pytest_arg)
        arms = [ArmBoots("A"), ArmBoots("B")]
        missing = []
        for run in runs:
            bundle = run.bundle
            if bundle is None or not (bundle / "summary.json").is_file():
                missing.append(f"{run.arm}{run.number} (exit {run.exit_code}: {run.last_line})")
                continue
            arms[0 if run.arm == "A" else 1].boots.append(read_boot(bundle))
        for m in missing:
            print(f"boot {m} wrote no bundle: it did not finish")
        gate = args.gate or list(rules.figures)
        tolerance = args.tolerance or rules.tolerance_pct
        code = _finish(arms, args, gate=gate, tolerance=tolerance, noise_path=args.noise_floor or rules.noise_floor,
                       spread=spread, boots_asked=boots, noise_out=same)
        return 2 if missing and code != USAGE else code
    except CompareUsageError as exc:
        print(f"ab: {exc}", file=sys.stderr)
        return USAGE
