"""``python -m pytest_qualify compare`` and ``python -m pytest_qualify ab``: arguments in, the
comparison's files and one last line out, the exit status: the decision (0 B NOT WORSE, 1 B WORSE or
an item regression, 2 UNDECIDED with the boots that would decide it, or INCOMPLETE; 4 usage). No pytest
imported here.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_qualify.compare.boots import ArmBoots, CompareUsageError, check_comparable, read_boot

if TYPE_CHECKING:
    from pytest_qualify.compare.campaign import ArmPlan, BootRun, Runner

USAGE = 4
MAX_TOLERANCE_PCT = 100.0  # the profile schema's bound on [ab] tolerance_pct


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
    cmp.add_argument("--warm-up", type=int, default=0, metavar="N",
                     help="the first N bundles named of each arm warmed the machine's caches: read and verified, "
                          "never samples (default 0)")
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
    ab.add_argument("--warm-up", type=int, default=1, metavar="N",
                    help="boots per arm run first to warm the machine's caches, never samples (default 1)")
    ab.add_argument("--until-decided", action="store_true",
                    help="add boot pairs until every gating figure is decided or --max-boots is reached, spending the "
                         "alpha across looks (group-sequential)")
    ab.add_argument("--max-boots", type=int, default=None, metavar="N", help="with --until-decided: boots per arm at most")
    ab.add_argument("--spending", choices=("pocock", "obrien-fleming"), default="pocock",
                    help="with --until-decided: the alpha-spending function (default pocock)")
    _common(ab)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, metavar="DIR", help="where comparison.json, .md and .html go")
    p.add_argument("--gate", action="append", default=None, metavar="FIGURE",
                   help="a figure id or glob that gates (repeatable; default: the profile's [ab] figures, else every figure)")
    p.add_argument("--tolerance", type=float, default=None, metavar="PCT",
                   help="the tolerance T in percent, above 0 and at most 100: equivalence within ±T, B not worse by T "
                        "(default: the profile's [ab] tolerance_pct, else 5)")
    p.add_argument("--noise-floor", default=None, metavar="FILE",
                   help="an A/A campaign's noise-floor.json of the same workload and host kind: its variance and "
                        "degrees of freedom are pooled with the boots'")
    p.add_argument("--paired", action="store_true",
                   help="decide on adjacent pairs (A's i-th boot with B's i-th, run one after the other): a drift "
                        "of the machine cancels")
    p.add_argument("--allow-mixed-hosts", action="store_true", help="compare boots that ran on different kinds of host")


def _statistics_installed() -> None:
    try:
        import scipy  # noqa: F401
        import statsmodels  # noqa: F401
    except ImportError as exc:
        raise CompareUsageError(f"the comparison needs scipy and statsmodels ({exc}): "
                                "pip install 'pytest-qualify[compare]'") from None


def _positive(value: float | None, flag: str, *, minimum: float, what: str) -> None:
    if value is not None and not value >= minimum:
        raise CompareUsageError(f"{flag} {value:g}: {what}")


def _check_numbers(args: argparse.Namespace) -> None:
    """The numbers an operator passes, before anything is read or booted."""
    _positive(args.boots, "--boots", minimum=2, what="at least 2 boots per arm (one boot has no boot-to-boot spread)")
    _positive(args.tolerance, "--tolerance", minimum=1e-9,
              what="the tolerance must be above 0% (no test can show a difference of exactly nothing)")
    # The profile's [ab] tolerance_pct has the same ceiling: a tolerance no difference reaches (inf)
    # calls every boot-to-boot spread "equivalent", so noise would read as B NOT WORSE.
    if args.tolerance is not None and not args.tolerance <= MAX_TOLERANCE_PCT:
        raise CompareUsageError(f"--tolerance {args.tolerance:g}: at most {MAX_TOLERANCE_PCT:g}% (a tolerance "
                                "wider than that calls any spread equivalent, so noise would read as not worse)")
    if args.warm_up < 0:
        raise CompareUsageError(f"--warm-up {args.warm_up}: a number of boots, 0 or more")


def _compare(arms: list[ArmBoots], args: argparse.Namespace, *, gate: Sequence[str], tolerance: float,
             noise_path: str | None, spread: str, boots_asked: int | None, warm_up: str,
             spend: float = 1.0, sequential: dict[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The comparison of the arms as they stand, and the workload they measured."""
    from pytest_qualify.compare.comparison import compare_arms
    from pytest_qualify.compare.noise import read_noise_floor

    workload = check_comparable(arms, allow_mixed_hosts=args.allow_mixed_hosts)
    kinds = sorted({b.host_kind for arm in arms for b in arm.boots})
    floor = read_noise_floor(noise_path, workload, host_kinds=kinds, spread=spread) if noise_path else None
    by = {arm.name: arm for arm in arms}
    comparison = compare_arms(by["A"], by["B"], reference=by.get("reference"), workload=workload,
                              tolerance_pct=tolerance, noise_floor=floor, gate_patterns=gate,
                              boots_asked=boots_asked, spread=spread, pair=args.paired, spend=spend,
                              warm_up=warm_up, sequential=sequential)
    return comparison, workload


def _write(comparison: dict[str, Any], workload: dict[str, Any], args: argparse.Namespace, *,
           noise_out: bool = False) -> int:
    from pytest_qualify.compare.comparison import last_line
    from pytest_qualify.compare.noise import noise_floor, write_noise_floor
    from pytest_qualify.compare.render import write

    out = Path(args.out)
    write(comparison, out)
    md = (out / "comparison.md").read_text(encoding="utf-8")
    print(md.split("## Gate rows", 1)[0].rstrip())
    if noise_out and comparison["result"] != "INCOMPLETE":
        kinds = [k for arm in comparison["arms"].values() for k in arm["host_kinds"]]
        path = write_noise_floor(noise_floor(comparison["figures"], workload=workload, spread=comparison["spread"],
                                             host_kinds=kinds), out)
        print(f"noise floor: {path} (one boot's variance per figure for a later comparison: --noise-floor {path})")
    print(last_line(comparison, str(out)))
    return int(comparison["exit_code"])


def _warm_up_text(arms: Sequence[ArmBoots], how: str) -> str:
    names = "; ".join(f"{arm.name}: " + ", ".join(b.path.name for b in arm.warm_up) for arm in arms if arm.warm_up)
    return f"{how}: {names}" if names else ""


def compare_main(args: argparse.Namespace) -> int:
    try:
        _check_numbers(args)
        _statistics_installed()
        arms = []
        for name, paths in (("A", args.a), ("B", args.vs)):
            boots = [read_boot(p) for p in paths]
            if len(boots) <= args.warm_up:
                raise CompareUsageError(f"--warm-up {args.warm_up}: arm {name} names {len(boots)} bundle(s), so no "
                                        "sample would be left")
            arms.append(ArmBoots(name, boots[args.warm_up:], boots[:args.warm_up]))
        if args.reference:
            arms.append(ArmBoots("reference", [read_boot(p) for p in args.reference]))
        warm = _warm_up_text(arms, f"the first {args.warm_up} bundle(s) of each arm warmed the caches and are no "
                                   "sample (--warm-up)")
        comparison, workload = _compare(arms, args, gate=args.gate or (), tolerance=args.tolerance or 5.0,
                                        noise_path=args.noise_floor, spread=args.spread, boots_asked=args.boots,
                                        warm_up=warm)
        return _write(comparison, workload, args)
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


def _collect(runs: Sequence[BootRun], arms: Sequence[ArmBoots]) -> list[str]:
    """Each run's bundle into its arm (a warm-up boot's among the arm's warm-up boots); the boots
    that wrote none."""
    missing = []
    for run in runs:
        bundle = run.bundle
        if bundle is None or not (bundle / "summary.json").is_file():
            missing.append(f"{'warm-up ' if run.warm_up else ''}{run.arm}{run.number} (exit {run.exit_code}: "
                           f"{run.last_line})")
            continue
        arm = arms[0 if run.arm == "A" else 1]
        (arm.warm_up if run.warm_up else arm.boots).append(read_boot(bundle))
    return missing


def ab_main(args: argparse.Namespace, runner: Runner | None = None) -> int:
    """The campaign; ``runner`` runs one boot's command (tests hand in one that writes bundles)."""
    from pytest_qualify.bundle_format.workload import differences
    from pytest_qualify.compare.campaign import STAGE, ArmPlan, boot_order, run_campaign, run_subprocess
    from pytest_qualify.profiles import ProfileError, load_profile

    try:
        _check_numbers(args)
        if args.max_boots is not None and not args.until_decided:
            raise CompareUsageError("--max-boots is the bound of --until-decided: pass both, or --boots alone")
        if args.until_decided and args.max_boots is None:
            raise CompareUsageError("--until-decided needs --max-boots N (boots per arm at most)")
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
        boots = args.boots if args.boots is not None else rules.boots
        if boots < 2:
            raise CompareUsageError(f"--boots {boots}: at least 2 per arm (one boot has no boot-to-boot spread)")
        max_boots = args.max_boots if args.until_decided else boots
        if max_boots < boots:
            raise CompareUsageError(f"--max-boots {max_boots}: below the first look's --boots {boots}")
        endpoints = tuple(args.attach) if args.attach else (args.endpoint, args.endpoint)
        plans = (ArmPlan("A", args.profile_a, endpoints[0], _env(args.a_env, "--a-env")),
                 ArmPlan("B", args.profile_b, endpoints[1], _env(args.b_env, "--b-env")))
        same = Path(pa.source).resolve() == Path(pb.source).resolve() and plans[0].env == plans[1].env \
            and endpoints[0] == endpoints[1]
        spread = "run-to-run" if args.attach else "boot-to-boot"
        # Attached endpoints are warm already: no server starts, so no cold boot.
        warm_up = 0 if args.attach else args.warm_up
        out = Path(args.out)
        print(f"A/B campaign: {boots} boots per arm"
              + (f", up to {max_boots} until decided" if args.until_decided else "")
              + (f" after {warm_up} warm-up boot(s) per arm (not samples)" if warm_up else "")
              + ", order " + ", ".join(arm for arm, _ in boot_order(boots))
              + f"; stage {STAGE}; {spread} spread" + ("; A/A: measuring the noise floor" if same else ""))
        if args.attach:
            print("attach mode: the endpoints keep running between runs, so each sample is a run, not a server boot: "
                  "the spread is run-to-run, and a boot's own luck (its graphs, its memory layout) is not in it")
        tolerance = args.tolerance if args.tolerance is not None else rules.tolerance_pct
        noise_path = args.noise_floor or rules.noise_floor
        warm_text = (f"each arm's first {warm_up} boot(s) on this machine warmed its caches and are no sample "
                     "(boots/warm-up-*)") if warm_up else ("attach mode: no server starts, no cold boot" if args.attach
                                                           else "--warm-up 0: every boot is a sample, the first "
                                                                "of each arm too (cold caches included)")
        run = dict(out_dir=out, repeat=args.repeat, extra=args.pytest_arg, runner=runner or run_subprocess)
        arms = [ArmBoots("A"), ArmBoots("B")]
        missing = _collect(run_campaign(plans[0], plans[1], boots=boots, warm_up=warm_up, **run), arms)
        if not args.until_decided:
            comparison, workload = _compare(arms, args, gate=gates, tolerance=tolerance, noise_path=noise_path,
                                            spread=spread, boots_asked=boots, warm_up=warm_text)
        else:
            comparison, workload = _until_decided(arms, args, plans, run, missing, gates=gates, tolerance=tolerance,
                                                  noise_path=noise_path, spread=spread, first=boots,
                                                  max_boots=max_boots, warm_text=warm_text)
        for m in missing:
            print(f"boot {m} wrote no bundle: it did not finish")
        # A sample that wrote no bundle leaves the campaign incomplete (a warm-up boot is no sample).
        lost = [f"boot {m} wrote no bundle: it did not finish" for m in missing if not m.startswith("warm-up")]
        if lost:
            comparison["result"], comparison["exit_code"] = "INCOMPLETE", 2
            comparison["reasons"] = lost + comparison["reasons"]
        return _write(comparison, workload, args, noise_out=same)
    except CompareUsageError as exc:
        print(f"ab: {exc}", file=sys.stderr)
        return USAGE


def _until_decided(arms: list[ArmBoots], args: argparse.Namespace, plans: tuple[ArmPlan, ArmPlan],
                   run: dict[str, Any], missing: list[str], *, gates: Sequence[str], tolerance: float,
                   noise_path: str | None, spread: str, first: int, max_boots: int,
                   warm_text: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Looks at every boot count per arm from ``first`` to ``max_boots``, each at its share of the
    alpha (compare/sequential.py); a pair of boots added after each look that decides nothing.
    Stops at the first look where B is worse, or every gating figure is decided or left out."""
    from pytest_qualify.compare.campaign import run_campaign
    from pytest_qualify.compare.sequential import looks, method

    plan = looks(first, max_boots, args.spending)
    history: list[dict[str, Any]] = []
    for k, look in enumerate(plan):
        if k:
            missing += _collect(run_campaign(plans[0], plans[1], boots=look.boots, first=look.boots, **run), arms)
        sequential = {"method": method(args.spending), "spending": args.spending, "max_boots": max_boots,
                      "first_boots": first, "looks": history}
        comparison, workload = _compare(arms, args, gate=gates, tolerance=tolerance, noise_path=noise_path,
                                        spread=spread, boots_asked=look.boots, warm_up=warm_text,
                                        spend=look.share, sequential=sequential)
        history.append({"boots_per_arm": look.boots, "alpha_share": look.share, "result": comparison["result"],
                        "undecided": [u["figure"] for u in comparison["decision"]["undecided"]]})
        print(f"look {k + 1}/{len(plan)} at {look.boots} boots per arm (alpha share {look.share:.3f}): "
              f"{comparison['result']}")
        # Undecided with no gating figure undecided: what keeps it so (a gating figure its boots took
        # from different sources, no figure in common) stays whatever boots are added.
        if comparison["result"] != "UNDECIDED" or not comparison["decision"]["undecided"]:
            break
    comparison["sequential"]["stopped_at_boots"] = history[-1]["boots_per_arm"]
    return comparison, workload
