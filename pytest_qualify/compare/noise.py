"""The noise floor: what an A/A campaign (``ab A.toml A.toml``) measured of the recipe's own
boot-to-boot spread, written as ``noise-floor.json`` for a later comparison of the same workload on
the same kind of host to pool with its own boots.

Per figure: the pooled within-arm variance of one boot's log value and its degrees of freedom
(n_A + n_B - 2: each arm's own variance, pooled, so a drift between the arms is not counted as
noise). A later comparison pools that variance with its own boots' and adds the degrees of freedom
(``separability.pooled``): three boots a side then stand on the noise floor's degrees of freedom too,
not on the two of a Welch test. The tolerance stays the operator's (``--tolerance`` or ``[ab]
tolerance_pct``): what difference matters is a decision, the noise is a measurement. No pytest here.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pytest_qualify.compare.boots import CompareUsageError
from pytest_qualify.compare.separability import NoiseRow

NOISE_SCHEMA_ID = "pytest-qualify/noise-floor"
NOISE_FILE = "noise-floor.json"
RULE = ("per figure: the pooled within-arm variance of one boot's log value (sd_log) on df = n_A + n_B - 2 degrees "
        "of freedom; a later comparison pools it with its own boots' variance and adds the degrees of freedom")


def noise_floor(figures: Sequence[Mapping[str, Any]], *, workload: Mapping[str, Any], spread: str,
                host_kinds: Sequence[str]) -> dict[str, Any]:
    """The file's content from an A/A comparison's figures."""
    rows = {}
    for f in figures:
        a, b = f["a"]["values"], f["b"]["values"]
        if len(a) < 2 or len(b) < 2 or not all(v > 0 for v in a + b):
            continue
        la, lb = [math.log(v) for v in a], [math.log(v) for v in b]
        df = len(la) + len(lb) - 2
        pooled = math.sqrt(((len(la) - 1) * statistics.variance(la) + (len(lb) - 1) * statistics.variance(lb)) / df)
        rows[f["id"]] = {"sd_log": pooled, "df": df, "cv_pct": (math.exp(pooled) - 1) * 100, "boots": len(a) + len(b)}
    return {"schema": NOISE_SCHEMA_ID, "rule": RULE, "spread": spread, "host_kinds": sorted(set(host_kinds)),
            "workload": dict(workload), "figures": rows}


def write_noise_floor(data: Mapping[str, Any], out_dir: Path) -> Path:
    path = out_dir / NOISE_FILE
    path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    return path


def read_noise_floor(path: str | Path, workload: Mapping[str, Any], *, host_kinds: Sequence[str],
                     spread: str) -> dict[str, NoiseRow]:
    """Per-figure variance and degrees of freedom from a noise-floor file measured on the same
    workload, the same kind of host and the same kind of spread, or :class:`CompareUsageError` (the
    operator named the file)."""
    from pytest_qualify.bundle_format.earlier import EarlierRunError, read_earlier
    from pytest_qualify.bundle_format.workload import differences

    label = f"noise floor {path}"
    try:
        data = read_earlier(Path(path), label, NOISE_SCHEMA_ID).data
    except EarlierRunError as exc:
        raise CompareUsageError(str(exc)) from None
    diff = differences(data.get("workload") or {}, workload, a_name="noise floor", b_name="these bundles")
    if diff:
        raise CompareUsageError(f"{label} was measured on another workload: " + "; ".join(diff))
    kinds = data.get("host_kinds")
    if not kinds:
        raise CompareUsageError(f"{label} names no kind of host (field 'host_kinds'): its variance cannot be held to "
                                "these boots' host; measure it again (ab A.toml A.toml)")
    if sorted(set(kinds)) != sorted(set(host_kinds)):
        raise CompareUsageError(f"{label} was measured on {', '.join(kinds)}, these boots ran on "
                                f"{', '.join(sorted(set(host_kinds)))}: another host's noise is not this one's")
    if data.get("spread") != spread:
        raise CompareUsageError(f"{label} measured a {data.get('spread')} spread, these boots a {spread} one")
    rows = {}
    for fid, row in (data.get("figures") or {}).items():
        try:
            rows[fid] = NoiseRow(float(row["sd_log"]), int(row["df"]))
        except (KeyError, TypeError, ValueError):
            raise CompareUsageError(f"{label}: figure {fid} has no sd_log and df (a file of an older release: "
                                    "measure it again)") from None
    return rows
