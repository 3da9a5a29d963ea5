"""Boots added until the call is made (``ab --until-decided --max-boots N``): a group-sequential
design whose looks spend the alpha so that the error over every look stays what one analysis had.

Method (named in ``comparison.json``): Lan-DeMets alpha spending. Looks are planned at every boot
count per arm from the first (``--boots``) to ``--max-boots``; look k at n_k boots has information
fraction t_k = n_k / N and may spend alpha(t_k) - alpha(t_k-1) of the alpha, by the Pocock-type
spending function alpha * ln(1 + (e - 1) t) (the default: it spends early, where a few boots
must decide a large difference) or the O'Brien-Fleming-type 2 - 2 Phi(z_(1-alpha/2) / sqrt(t))
(it keeps the alpha for the last looks). Each look's share is used as that look's level: the chance
of a wrong call at some look is at most the sum of the looks' shares (Bonferroni over looks), alpha,
whatever the correlation between looks and without the normal approximation that exact
group-sequential boundaries rest on (at 2-12 boots a t statistic is far from normal). No library
fits boundaries for a t test on a few boots (spotify-confidence's bounds are z boundaries for large
samples), so the spending functions are written here from scipy's normal distribution and the
guarantee is proven by seeded simulation (tests/compare/test_sequential.py): the family-wise error
holds across looks, and the expected boots fall against a fixed design of N. No pytest here.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

Spending = Literal["pocock", "obrien-fleming"]


def pocock(t: float, alpha: float) -> float:
    """The Pocock-type spending function (Lan and DeMets 1983): alpha * ln(1 + (e - 1) t)."""
    return alpha * math.log(1.0 + (math.e - 1.0) * min(max(t, 0.0), 1.0))


def obrien_fleming(t: float, alpha: float) -> float:
    """The O'Brien-Fleming-type spending function (Lan and DeMets 1983): 2 - 2 Phi(z_(1-alpha/2) / sqrt(t))."""
    from scipy.stats import norm

    if t <= 0:
        return 0.0
    return float(2.0 - 2.0 * norm.cdf(norm.ppf(1.0 - alpha / 2.0) / math.sqrt(min(t, 1.0))))


SPENDING: dict[str, Callable[[float, float], float]] = {"pocock": pocock, "obrien-fleming": obrien_fleming}


@dataclass(frozen=True)
class Look:
    boots: int  # per arm
    share: float  # of every alpha this look may spend (the shares sum to 1)


def method(spending: str) -> str:
    name = {"pocock": "Pocock-type alpha * ln(1 + (e - 1) t)",
            "obrien-fleming": "O'Brien-Fleming-type 2 - 2 Phi(z / sqrt(t))"}[spending]
    return (f"group-sequential: Lan-DeMets alpha spending, {name}, t = boots / max boots; each look's share of "
            "every alpha is its level (Bonferroni over looks: the error over all looks stays within one analysis')")


def looks(first_boots: int, max_boots: int, spending: str = "pocock", alpha: float = 0.025) -> list[Look]:
    """The planned looks: one at every boot count per arm from ``first_boots`` to ``max_boots``,
    each with its share of the alpha. The shares are the spending function's at the gating alpha
    (2.5%) over that alpha (the Pocock type's do not depend on it), and every family's alpha is
    spent in the same shares."""
    if first_boots < 2 or max_boots < first_boots:
        raise ValueError(f"looks from {first_boots} to {max_boots} boots: need 2 <= first <= max")
    spend = SPENDING[spending]
    out, spent = [], 0.0
    for n in range(first_boots, max_boots + 1):
        total = spend(n / max_boots, alpha) / alpha
        out.append(Look(n, total - spent))
        spent = total
    return out


def simulate(xa: object, xb: object, *, sign: object, bound: float, first_boots: int, spending: str = "pocock",
             analysis: str = "welch", noise_sd: object = None, noise_df: object = None) -> tuple[object, object]:
    """Many ``--until-decided`` campaigns at once: arms ``(runs, figures, max_boots)`` of log values,
    every figure gating. At each planned look the calls of ``separability.decide_arrays`` at the
    look's share of the alpha; a run stops at its first look with a figure worse (exit 1) or every
    figure shown not worse (exit 0), else at the last look (exit 2). Returns (exit status, boots per
    arm used) per run: what the seeded simulations hold the design to."""
    import numpy as np

    from pytest_qualify.compare.separability import CODE_UNDECIDED, CODE_WORSE, decide_arrays

    xa, xb = np.asarray(xa, float), np.asarray(xb, float)
    runs, max_boots = xa.shape[0], xa.shape[-1]
    exit_code = np.full(runs, 2)
    used = np.full(runs, max_boots)
    open_ = np.ones(runs, bool)
    for look in looks(first_boots, max_boots, spending):
        n = look.boots
        codes = decide_arrays(xa[..., :n], xb[..., :n], sign=sign, bound=bound, spend=look.share, analysis=analysis,
                              noise_sd=noise_sd, noise_df=noise_df)
        worse = (codes == CODE_WORSE).any(axis=-1)
        settled = ~(codes == CODE_UNDECIDED).any(axis=-1)
        done = open_ & (worse | settled)
        exit_code[done] = np.where(worse[done], 1, 0)
        used[done] = n
        open_ &= ~done
    return exit_code, used
