"""The separability call on one figure across boots, and the error controlled across figures.

One boot is one sample: the figure a server boot measured (a median inside the boot). Within a boot
the requests share the boot's luck (its memory layout, its compiled graphs, its clocks), so only
boots are independent; a comparison that pooled requests would call a boot's luck a difference.

Method (named in every output, :data:`METHOD`):

- each figure on the log scale (a ratio of arms is what an operator reads: "2.59x the decode",
  "1.4% slower"); a figure that can be zero (goodput) on its own scale, its difference relative to
  A's mean and its tolerance relative to the mean of both arms' means (so swapping the arms flips
  the call: a tolerance of A's mean alone would change with the order);
- Welch's t-test of B against A across boots (``scipy.stats.ttest_ind``, unequal variances) and its
  95% interval on the difference, shown as a relative difference;
- two one-sided tests at the tolerance ±T (``statsmodels.stats.weightstats.ttost_ind``, unequal
  variances): equivalence;
- Holm's step-down correction in Šidák's form (``statsmodels.stats.multitest.multipletests``,
  ``holm-sidak``: Holm's steps at 1 - (1 - alpha)^(1/k), valid for the two-sided tests of positively
  or normally correlated figures and a little stronger than Holm's alpha / k) over the figures of a
  family: the gating figures at ``ALPHA_GATING`` (2.5%) and the others at ``ALPHA_OTHER`` (0.5%) when
  the operator gates some, all of them at ``ALPHA`` (3%) otherwise, so the family-wise error over
  every call stays ≤ 3% (Bonferroni over the two families); the difference tests and the
  equivalence tests each;
- power: the smallest difference these boots separate with 80% power (the noncentral t of
  Welch's standard error, ``scipy.stats.nct``) and the boots per arm that would separate the
  tolerance at the pooled spread, at Holm's strictest level of the family (the level a lone
  difference must meet).

Calls, in this order: ``equivalent within ±T%`` (the corrected equivalence test rejects: the whole
interval lies inside the tolerance, even where it excludes no difference: a KV cache 0.016% smaller
in every boot of B is equivalent under a 5% tolerance, not worse), ``B better`` / ``B worse`` (the
corrected difference test rejects), else ``not separable`` (the interval holds no difference and is
wider than the tolerance: too few boots, never "the same"). No pytest here; scipy and statsmodels
are imported when a comparison runs.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Literal

Call = Literal["B better", "B worse", "not separable"]  # or "equivalent within ±T%" (the tolerance in its text)
Better = Literal["higher", "lower"]

# The family-wise error over every call is held to 3%, inside the 5% the protocol allows, so that
# two boots sets of one recipe come out with no call in at least 95% of comparisons with a margin
# (at exactly 5% a seeded simulation would pass or fail by its seeds' luck).
ALPHA = 0.03
ALPHA_GATING = 0.025
ALPHA_OTHER = 0.005
POWER = 0.8
CONFIDENCE = 0.95
MAX_BOOTS = 10_000
METHOD = ("per figure: Welch's t-test across boots on log values (scipy.stats.ttest_ind, equal_var=False) with its 95% "
          "interval as a relative difference; equivalence by two one-sided tests at the tolerance "
          "(statsmodels ttost_ind, unequal variances); Holm-Sidak step-down correction (statsmodels multipletests) across the "
          "figures: the gating figures at alpha 0.025, the others at 0.005 (family-wise error <= 3% over all calls; "
          "all at 0.03 when every figure gates); power at 80% (scipy noncentral t)")


def equivalent(tolerance_pct: float) -> str:
    return f"equivalent within ±{tolerance_pct:g}%"


@dataclass(frozen=True)
class Arm:
    """One arm's boots of one figure: the values in boot order, and their spread."""

    values: tuple[float, ...]

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def center(self) -> float:
        """The geometric mean where every value is positive (the log-scale test's centre), else the mean."""
        if self.values and all(v > 0 for v in self.values):
            return math.exp(statistics.fmean(math.log(v) for v in self.values))
        return statistics.fmean(self.values) if self.values else math.nan

    @property
    def spread_pct(self) -> float | None:
        """(max - min) / centre: the boot-to-boot spread as an operator reads it ("454-590 tok/s, 25%")."""
        if self.n < 2 or not self.center:
            return None
        return (max(self.values) - min(self.values)) / abs(self.center) * 100.0

    @property
    def cv_pct(self) -> float | None:
        if self.n < 2 or not self.center:
            return None
        return statistics.stdev(self.values) / abs(statistics.fmean(self.values)) * 100.0


@dataclass
class FigureTest:
    """One figure's comparison before and after the correction across figures."""

    figure: str
    better: Better
    a: Arm
    b: Arm
    tolerance_pct: float
    gating: bool
    scale: Literal["log", "linear"] = "log"
    difference_pct: float | None = None  # B relative to A
    interval_pct: tuple[float, float] | None = None  # the unadjusted 95% interval
    # The interval at the level Holm's step-down held this figure to (its rank among the family's
    # p-values): it excludes no difference exactly when the figure's own step rejects, so the interval
    # an operator reads agrees with the call (a call also needs every earlier step to have rejected).
    adjusted_interval_pct: tuple[float, float] | None = None
    adjusted_confidence: float | None = None
    p_difference: float = 1.0
    p_equivalence: float = 1.0
    p_difference_holm: float = 1.0
    p_equivalence_holm: float = 1.0
    family_alpha: float = ALPHA
    family_size: int = 1
    min_detectable_pct: float | None = None
    boots_to_separate_tolerance: int | None = None
    call: str = "not separable"
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        # ``extra`` holds working state (the Welch test's result), never part of the comparison's file.
        out: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}
        out["a"] = {"values": list(self.a.values), "center": _num(self.a.center), "spread_pct": self.a.spread_pct,
                    "cv_pct": self.a.cv_pct, "boots": self.a.n}
        out["b"] = {"values": list(self.b.values), "center": _num(self.b.center), "spread_pct": self.b.spread_pct,
                    "cv_pct": self.b.cv_pct, "boots": self.b.n}
        out["interval_pct"] = list(self.interval_pct) if self.interval_pct else None
        out["adjusted_interval_pct"] = list(self.adjusted_interval_pct) if self.adjusted_interval_pct else None
        return {k: _num(v) if isinstance(v, float) else v for k, v in out.items()}


def _num(value: float) -> float | None:
    return None if value is None or not math.isfinite(value) else value


def _scaled(test: FigureTest) -> tuple[list[float], list[float], float]:
    """Both arms on the test's scale, and the scale's unit of a relative difference (the log's 1,
    or A's mean on the linear scale)."""
    if all(v > 0 for v in test.a.values + test.b.values):
        return [math.log(v) for v in test.a.values], [math.log(v) for v in test.b.values], 1.0
    test.scale = "linear"
    base = abs(statistics.fmean(test.a.values)) or 1.0
    return list(test.a.values), list(test.b.values), base


def _tolerance_base(test: FigureTest, base: float) -> float:
    """What ±T% is a percentage of: the log scale's 1 (a ratio), or on the linear scale the mean
    of both arms' means, the same whichever arm is A."""
    if test.scale == "log":
        return base
    middle = (abs(statistics.fmean(test.a.values)) + abs(statistics.fmean(test.b.values))) / 2
    return middle or 1.0


def _to_pct(x: float, scale: str, base: float) -> float:
    if scale == "log":
        return (math.exp(x) - 1.0) * 100.0 if x < 50 else math.inf  # beyond any reach: shown as such
    return x / base * 100.0


def _bound(tolerance_pct: float, scale: str, base: float) -> float:
    """The tolerance on the test's scale (symmetric on the log scale: ±T% of the ratio)."""
    return math.log1p(tolerance_pct / 100.0) if scale == "log" else tolerance_pct / 100.0 * base


def test_figure(test: FigureTest) -> FigureTest:
    """The uncorrected tests of one figure: the difference's p-value and 95% interval, the
    equivalence p-value. Arms with fewer than two boots have no spread: nothing is separable."""
    from scipy import stats
    from statsmodels.stats.weightstats import ttost_ind

    xa, xb, base = _scaled(test)
    if test.a.n < 2 or test.b.n < 2:
        test.note = "an arm has fewer than 2 boots: no boot-to-boot spread, nothing can be separated"
        if test.a.n and test.b.n:
            test.difference_pct = _to_pct(statistics.fmean(xb) - statistics.fmean(xa), test.scale, base)
        return test
    diff = statistics.fmean(xb) - statistics.fmean(xa)
    test.difference_pct = _to_pct(diff, test.scale, base)
    bound = _bound(test.tolerance_pct, test.scale, _tolerance_base(test, base))
    if statistics.variance(xa) == 0 and statistics.variance(xb) == 0:
        # A figure every boot reports alike (a capacity fact): a difference is exact, not sampled.
        test.interval_pct = (test.difference_pct, test.difference_pct)
        test.p_difference = 0.0 if diff else 1.0
        test.p_equivalence = 0.0 if abs(diff) < bound else 1.0
        test.note = "the same value in every boot of each arm: the difference is exact"
        return test
    result = stats.ttest_ind(xb, xa, equal_var=False)
    test.extra["welch"] = (result, base)  # its interval at the level Holm's step holds the figure to (decide)
    ci = result.confidence_interval(CONFIDENCE)
    test.p_difference = float(result.pvalue)
    test.interval_pct = (_to_pct(float(ci.low), test.scale, base), _to_pct(float(ci.high), test.scale, base))
    test.p_equivalence = float(ttost_ind(xb, xa, -bound, bound, usevar="unequal")[0])
    return test


def _interval_at(test: FigureTest, confidence: float) -> tuple[float, float] | None:
    """Welch's interval on B's relative difference at ``confidence``, from the test
    :func:`test_figure` ran; where it ran none, the interval it gave (an exact difference: the point;
    fewer than 2 boots an arm: None)."""
    if "welch" not in test.extra:
        return test.interval_pct
    welch, base = test.extra["welch"]
    ci = welch.confidence_interval(confidence)
    return _to_pct(float(ci.low), test.scale, base), _to_pct(float(ci.high), test.scale, base)


def step_levels(p_values: Sequence[float], alpha: float) -> list[float]:
    """Holm-Sidak's level for each p-value (in the order given): the one ranked i-th smallest of k
    is held to 1 - (1 - alpha)^(1 / (k - i))."""
    k = len(p_values)
    order = sorted(range(k), key=lambda j: p_values[j])
    levels = [0.0] * k
    for rank, j in enumerate(order):
        levels[j] = 1.0 - (1.0 - alpha) ** (1.0 / (k - rank))
    return levels


def power_of(effect: float, se: float, df: float, alpha: float) -> float:
    """The chance a two-sided t-test at ``alpha`` separates a true difference ``effect`` whose
    estimate has standard error ``se`` on ``df`` degrees of freedom (the noncentral t, scipy)."""
    from scipy import stats

    crit = float(stats.t.ppf(1 - alpha / 2, df))
    nc = effect / se
    power = float(stats.nct.sf(crit, df, nc) + stats.nct.cdf(-crit, df, nc))
    return power if math.isfinite(power) else 1.0  # far past the critical value: the series gives up, not the test


def _power(test: FigureTest) -> None:
    """The smallest difference these boots separate with 80% power (Welch's standard error and
    degrees of freedom), and the boots per arm that would separate the tolerance at the pooled
    boot-to-boot spread; both at the family's strictest Holm level (alpha / figures)."""
    from scipy.optimize import brentq

    if test.a.n < 2 or test.b.n < 2:
        return
    xa, xb, base = _scaled(test)
    va, vb = statistics.variance(xa), statistics.variance(xb)
    alpha = test.family_alpha / test.family_size
    if va == 0 and vb == 0:
        test.min_detectable_pct, test.boots_to_separate_tolerance = 0.0, 2
        return
    se = math.sqrt(va / test.a.n + vb / test.b.n)
    df = se ** 4 / ((va / test.a.n) ** 2 / (test.a.n - 1) + (vb / test.b.n) ** 2 / (test.b.n - 1))
    from scipy import stats

    high = (3 * float(stats.t.ppf(1 - alpha / 2, df)) + 20) * se
    effect = brentq(lambda d: power_of(d, se, df, alpha) - POWER, 1e-6 * se, high, xtol=1e-3 * se)
    test.min_detectable_pct = _to_pct(effect, test.scale, base)
    pooled = (va + vb) / 2
    tolerance = _bound(test.tolerance_pct, test.scale, _tolerance_base(test, base))
    n = 2
    while n < MAX_BOOTS and power_of(tolerance, math.sqrt(2 * pooled / n), 2 * n - 2, alpha) < POWER:
        n = n * 2 if power_of(tolerance, math.sqrt(2 * pooled / (n * 2)), 4 * n - 2, alpha) < POWER else n + 1
    test.boots_to_separate_tolerance = n if n < MAX_BOOTS else None


def decide(tests: Sequence[FigureTest], *, power: bool = True) -> list[FigureTest]:
    """Every figure's call after Holm's correction within its family (see the module's text);
    ``power=False`` leaves the power figures out (a simulation of thousands of comparisons)."""
    import numpy
    from statsmodels.stats.multitest import multipletests

    gating = [t for t in tests if t.gating]
    others = [t for t in tests if not t.gating]
    families = [(gating, ALPHA_GATING), (others, ALPHA_OTHER)] if gating and others else [(list(tests), ALPHA)]
    for family, alpha in families:
        if not family:
            continue
        for t in family:
            t.family_alpha, t.family_size = alpha, len(family)
        for attr in ("p_difference", "p_equivalence"):
            raw = [min(1.0, max(0.0, getattr(t, attr))) if math.isfinite(getattr(t, attr)) else 1.0 for t in family]
            with numpy.errstate(divide="ignore"):  # a p-value of 1 corrects to 1 through log1p(-1)
                _, adjusted, _, _ = multipletests(raw, alpha=alpha, method="holm-sidak")
            for t, p in zip(family, adjusted):
                setattr(t, attr + "_holm", float(p))
        raw = [t.p_difference if math.isfinite(t.p_difference) else 1.0 for t in family]
        for t, level in zip(family, step_levels(raw, alpha)):
            t.adjusted_confidence = 1.0 - level
            t.adjusted_interval_pct = _interval_at(t, 1.0 - level)
        for t in family:
            if power:
                _power(t)
            # Equivalence first: an interval wholly inside ±T is a difference too small to matter,
            # however sure it is (an exact fact 0.016% apart), never a worse B.
            if t.a.n >= 2 and t.b.n >= 2 and t.p_equivalence_holm < alpha:
                t.call = equivalent(t.tolerance_pct)
            elif t.a.n >= 2 and t.b.n >= 2 and t.p_difference_holm < alpha and t.difference_pct:
                b_higher = t.difference_pct > 0
                t.call = "B better" if b_higher == (t.better == "higher") else "B worse"
            else:
                t.call = "not separable"
    return list(tests)


def compare_figures(arms: Mapping[str, tuple[Sequence[float], Sequence[float], Better]], *,
                    tolerance_pct: float | Mapping[str, float], gating: set[str] | None = None,
                    power: bool = True) -> list[FigureTest]:
    """Figure name → (A's values by boot, B's values by boot, which way is better) → every
    figure's test and call. ``tolerance_pct`` is one tolerance or one per figure (a noise floor);
    ``gating``: the figures the operator gates (None: every figure)."""
    tests = []
    for name, (a, b, better) in arms.items():
        tol = tolerance_pct if isinstance(tolerance_pct, (int, float)) else tolerance_pct[name]
        tests.append(test_figure(FigureTest(name, better, Arm(tuple(map(float, a))), Arm(tuple(map(float, b))),
                                            float(tol), gating is None or name in gating)))
    return decide(tests, power=power)
