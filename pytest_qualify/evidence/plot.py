"""A PNG of TTFT against prompt tokens. matplotlib is an optional extra (``pytest-qualify[plot]``):
imported here only, lazily, and its absence is reported in the bundle instead of failing it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

PLOT_FILE = "ttft-vs-prompt-tokens.png"


class PlotUnavailable(RuntimeError):
    """matplotlib is not installed; the message says how to get the plot."""


def plot_ttft(points: Sequence[Mapping[str, Any]], path: Path, title: str, simulated: bool) -> Path:
    """Scatter every measured request's TTFT over its prompt tokens, one colour per lane."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # no display on a CI runner
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise PlotUnavailable(
            f"plot skipped: matplotlib is not installed ({exc}); install pytest-qualify[plot]"
        ) from None

    fig, ax = plt.subplots(figsize=(7.5, 4.5), dpi=110)
    try:
        groups: dict[str, list[Mapping[str, Any]]] = {}
        for p in points:
            groups.setdefault(f"{p['lane']} lane" if p.get("lane") else "other items", []).append(p)
        for label, group in sorted(groups.items()):
            ax.scatter([p["prompt_tokens"] for p in group], [p["ttft_s"] for p in group], label=label, s=22)
        ax.set_xlabel("prompt tokens (server usage)")
        ax.set_ylabel("TTFT, client-observed (s)")
        ax.set_title(title + (" — SIMULATED reference server" if simulated else ""), fontsize=10)
        ax.grid(True, alpha=0.3)
        if not points:
            ax.text(0.5, 0.5, "no streamed request recorded", ha="center", va="center", transform=ax.transAxes)
        else:
            ax.legend(fontsize=8)
        # Fixed metadata: the same figures give the same bytes, so SHA256SUMS is reproducible.
        fig.savefig(path, format="png", metadata={"Software": None})
    finally:
        plt.close(fig)
    return path
