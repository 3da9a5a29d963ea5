"""The noise floor: what an A/A campaign (``ab A.toml A.toml``) measured of the recipe's own
boot-to-boot spread, written as ``noise-floor.json`` for a later comparison to take as its
per-figure tolerance (K2-Vendor-Verifier sets its thresholds from repeated runs of the reference the
same way).

Per figure: the pooled standard deviation of one boot's log value (each arm's own variance, pooled:
the arms are the same recipe, so a drift between them is not noise) and the tolerance
``exp(2 sd) - 1``: two standard deviations of one boot, the difference a single boot's luck reaches
about one time in twenty. No pytest here.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pytest_qualify.compare.boots import CompareUsageError

NOISE_SCHEMA_ID = "pytest-qualify/noise-floor"
NOISE_FILE = "noise-floor.json"
RULE = "tolerance = exp(2 x pooled boot-to-boot sd of the log value) - 1 (two standard deviations of one boot)"


def noise_floor(figures: Sequence[Mapping[str, Any]], *, workload: Mapping[str, Any], spread: str) -> dict[str, Any]:
    """The file's content from an A/A comparison's figures."""
    rows = {}
    for f in figures:
        a, b = f["a"]["values"], f["b"]["values"]
        if len(a) < 2 or len(b) < 2 or not all(v > 0 for v in a + b):
            continue
        la, lb = [math.log(v) for v in a], [math.log(v) for v in b]
        pooled = math.sqrt(((len(la) - 1) * statistics.variance(la) + (len(lb) - 1) * statistics.variance(lb))
                           / (len(la) + len(lb) - 2))
        rows[f["id"]] = {"sd_log": pooled, "cv_pct": (math.exp(pooled) - 1) * 100,
                         "tolerance_pct": max((math.exp(2 * pooled) - 1) * 100, 0.01), "boots": len(a) + len(b)}
    return {"schema": NOISE_SCHEMA_ID, "rule": RULE, "spread": spread, "workload": dict(workload), "figures": rows}


def write_noise_floor(data: Mapping[str, Any], out_dir: Path) -> Path:
    path = out_dir / NOISE_FILE
    path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    return path


def read_noise_floor(path: str | Path, workload: Mapping[str, Any]) -> dict[str, float]:
    """Per-figure tolerances from a noise-floor file measured on the same workload, or
    :class:`CompareUsageError` (a usage error: the operator named the file)."""
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
    return {fid: float(row["tolerance_pct"]) for fid, row in (data.get("figures") or {}).items()}
