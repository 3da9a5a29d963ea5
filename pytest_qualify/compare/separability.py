"""The call on one figure across boots, the decision across the gating figures, and the boots that
would decide a figure still undecided.

One boot is one sample: the figure a server boot measured (a median inside the boot). Within a boot
the requests share the boot's luck (its memory layout, its compiled graphs, its clocks), so only
boots are independent; a comparison that pooled requests would call a boot's luck a difference.

Method (named in every output, :data:`METHOD`):

- each figure on the log scale (a ratio of arms is what an operator reads: "2.59x the decode",
  "1.4% slower"); a figure that can be zero (goodput) on its own scale, its difference relative to
  A's mean and its tolerance relative to the mean of both arms' means (so swapping the arms flips
  the call);
- the difference of B from A, its standard error and degrees of freedom by one of three analyses:
  **Welch** (unequal variances, Welch-Satterthwaite degrees of freedom: the numbers of
  ``scipy.stats.ttest_ind(equal_var=False)``, which the tests hold it to); **pooled with a noise
  floor** (an A/A campaign of the same workload on the same kind of host gives one boot's variance of
  the log value and its degrees of freedom; they are pooled with the comparison's own within-arm
  variance, Student's t on the summed degrees of freedom); **paired** (interleaved boots A, B, B, A,
  … taken as adjacent pairs: the difference within a pair, so a drift of the machine over the
  campaign cancels; Student's t on pairs - 1 degrees of freedom, plus the noise floor's where given);
- three tests on that estimate (``scipy.stats.t``): the two-sided difference test; equivalence by
  two one-sided tests at ±T (TOST: statsmodels ``ttost_ind`` gives the same p-value for Welch); the
  one-sided **non-inferiority** test that B's degradation is less than T (H0: B worse by T or more);
- error control. A wrong ``B WORSE`` (exit 1) needs a gating figure called worse though none is:
  the difference tests are corrected across the figures by Holm's step-down in Šidák's form
  (``statsmodels.stats.multitest.multipletests``, ``holm-sidak``), the gating figures at
  ``ALPHA_GATING`` (2.5%; every figure gates where none is named), the others at ``ALPHA_OTHER``
  (0.5%). A wrong ``B NOT WORSE`` (exit 0)
  needs *every* gating figure shown non-inferior, one of them falsely: by the intersection-union
  principle (Berger 1982) each non-inferiority (or equivalence) test at ``ALPHA_NOT_WORSE`` (2.5%)
  bounds that error at 2.5% with no correction across figures;
- across looks (``ab --until-decided``) every level above is the look's share of the alpha
  (:mod:`sequential`);
- power: the smallest difference these boots separate with 80% power (the noncentral t), and the
  boots per arm that would decide an undecided figure at 80% power if B's true difference is the
  one observed (``statsmodels.stats.power``: TTestIndPower, or TTestPower for pairs).

Calls, the first that holds: ``equivalent within ±T%`` (TOST rejects: even a sure difference inside
the tolerance does not matter), ``B better`` / ``B worse`` (the corrected difference test rejects),
``not worse by T%`` (the non-inferiority test rejects), else ``undecided`` (too few boots to tell:
never "the same", never "not worse"). No pytest here; numpy, scipy and statsmodels are imported
when a comparison runs.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Literal

Better = Literal["higher", "lower"]
Analysis = Literal["welch", "pooled with the noise floor", "paired", "paired with the noise floor", "exact"]
Decision = Literal["not worse", "worse", "undecided"]

ALPHA_GATING = 0.025
ALPHA_OTHER = 0.005
ALPHA_NOT_WORSE = 0.025
POWER = 0.8
CONFIDENCE = 0.95
MAX_BOOTS = 1000  # beyond it the boots needed are stated as "more than 1000"
UNDECIDED = "undecided"

# Call codes of the vectorised kernel (simulations run thousands of comparisons at once).
CODE_UNDECIDED, CODE_BETTER, CODE_WORSE, CODE_EQUIVALENT, CODE_NOT_WORSE = 0, 1, 2, 3, 4

METHOD = ("per figure, on log values across boots: Welch's t (unequal variances), or Student's t on the "
          "variance pooled with the noise floor's (its degrees of freedom added), or the paired t of adjacent "
          "interleaved boots; the two-sided difference test with Holm-Sidak step-down correction across the figures "
          "(statsmodels multipletests; gating figures at alpha 0.025, others at 0.005); equivalence by two one-sided "
          "tests at +-T and the one-sided non-inferiority test at margin T, each at 0.025 per gating figure (the "
          "intersection-union principle: B NOT WORSE needs every gating figure shown not worse); boots to decide at "
          "80% power (statsmodels TTestIndPower / TTestPower)")


def equivalent(tolerance_pct: float) -> str:
    return f"equivalent within ±{tolerance_pct:g}%"


def not_worse(tolerance_pct: float) -> str:
    return f"not worse by {tolerance_pct:g}%"


def decision_of(call: str) -> Decision:
    if call == "B worse":
        return "worse"
    if call == "B better" or call.startswith(("equivalent", "not worse")):
        return "not worse"
    return "undecided"


# -- the vectorised kernel: estimates, tests, correction, calls ------------------------------------


def welch(xa: Any, xb: Any) -> tuple[Any, Any, Any]:
    """(difference B - A, its standard error, Welch-Satterthwaite degrees of freedom) over the last
    axis of each arm's values (any leading batch shape)."""
    import numpy as np

    xa, xb = np.asarray(xa, float), np.asarray(xb, float)
    na, nb = xa.shape[-1], xb.shape[-1]
    va, vb = xa.var(axis=-1, ddof=1), xb.var(axis=-1, ddof=1)
    qa, qb = va / na, vb / nb
    se2 = qa + qb
    # Each arm's share of the variance first: squaring a tiny variance directly underflows to 0/0.
    with np.errstate(divide="ignore", invalid="ignore"):
        sa, sb = qa / se2, qb / se2
        df = np.where(se2 > 0, 1.0 / (sa ** 2 / (na - 1) + sb ** 2 / (nb - 1)), 1.0)
    return xb.mean(axis=-1) - xa.mean(axis=-1), np.sqrt(se2), df


def pooled(xa: Any, xb: Any, noise_sd: Any, noise_df: Any) -> tuple[Any, Any, Any]:
    """Student's t with one boot's variance pooled from both arms and the noise floor's (sd of the
    log value on ``noise_df`` degrees of freedom): the degrees of freedom add up."""
    import numpy as np

    xa, xb = np.asarray(xa, float), np.asarray(xb, float)
    na, nb = xa.shape[-1], xb.shape[-1]
    noise_sd, noise_df = np.asarray(noise_sd, float), np.asarray(noise_df, float)
    df = noise_df + na + nb - 2
    s2 = (noise_df * noise_sd ** 2 + (na - 1) * xa.var(axis=-1, ddof=1) + (nb - 1) * xb.var(axis=-1, ddof=1)) / df
    return xb.mean(axis=-1) - xa.mean(axis=-1), np.sqrt(s2 * (1 / na + 1 / nb)), df


def paired(xa: Any, xb: Any, noise_sd: Any = 0.0, noise_df: Any = 0.0) -> tuple[Any, Any, Any]:
    """The paired t of adjacent boots (pair i: A's i-th boot and B's i-th boot, run one after the
    other): a drift over the campaign falls on both boots of a pair and cancels. With a noise floor,
    its variance of a difference of two boots (twice one boot's) is pooled in."""
    import numpy as np

    d = np.asarray(xb, float) - np.asarray(xa, float)
    n = d.shape[-1]
    noise_sd, noise_df = np.asarray(noise_sd, float), np.asarray(noise_df, float)
    df = noise_df + n - 1
    s2 = (noise_df * 2 * noise_sd ** 2 + (n - 1) * d.var(axis=-1, ddof=1)) / df
    return d.mean(axis=-1), np.sqrt(s2 / n), df


def p_values(improvement: Any, se: Any, df: Any, bound: Any) -> tuple[Any, Any, Any]:
    """(two-sided difference, TOST equivalence at ±bound, non-inferiority at margin bound) p-values.
    ``improvement`` is B's difference in the better direction (negative: B worse). A standard error
    of zero (every boot alike) makes the difference exact."""
    import numpy as np
    from scipy import stats

    w, se, df, bound = np.broadcast_arrays(*(np.asarray(v, float) for v in (improvement, se, df, bound)))
    exact = ~(se > 0)
    s = np.where(exact, 1.0, se)
    p_two = np.where(exact, (w == 0).astype(float), 2 * stats.t.sf(np.abs(w) / s, df))
    p_low = stats.t.sf((w + bound) / s, df)  # H0: B worse by the margin or more
    p_high = stats.t.cdf((w - bound) / s, df)  # H0: B better by the margin or more
    p_eq = np.where(exact, (np.abs(w) >= bound).astype(float), np.maximum(p_low, p_high))
    p_ni = np.where(exact, (w <= -bound).astype(float), p_low)
    return p_two, p_eq, p_ni


def holm_sidak(p: Any, alpha: Any) -> Any:
    """Holm-Šidák's step-down rejections over the last axis (the figures of a family): the i-th
    smallest of k p-values is held to 1 - (1 - alpha)^(1 / (k - i)), and the steps stop at the first
    that does not reject. The same rejections as statsmodels ``multipletests(method="holm-sidak")``
    (the tests hold them to it); vectorised for the simulations."""
    import numpy as np

    p = np.asarray(p, float)
    k = p.shape[-1]
    order = np.argsort(p, axis=-1, kind="stable")
    ranked = np.take_along_axis(p, order, axis=-1)
    levels = 1.0 - (1.0 - np.asarray(alpha, float)[..., None]) ** (1.0 / (k - np.arange(k)))
    kept = np.cumprod(ranked <= levels, axis=-1).astype(bool)
    reject = np.empty_like(kept)
    np.put_along_axis(reject, order, kept, axis=-1)
    return reject


def classify(improvement: Any, p_eq: Any, p_ni: Any, reject: Any, alpha_not_worse: Any) -> Any:
    """The call codes: equivalence first, then a corrected difference, then non-inferiority."""
    import numpy as np

    w = np.asarray(improvement, float)
    a = np.asarray(alpha_not_worse, float)
    code = np.where(np.asarray(p_ni) < a, CODE_NOT_WORSE, CODE_UNDECIDED)
    code = np.where(reject & (w > 0), CODE_BETTER, code)
    code = np.where(reject & (w < 0), CODE_WORSE, code)
    return np.where(np.asarray(p_eq) < a, CODE_EQUIVALENT, code)


def decide_arrays(xa: Any, xb: Any, *, sign: Any, bound: Any, spend: Any = 1.0, analysis: str = "welch",
                  noise_sd: Any = None, noise_df: Any = None) -> Any:
    """The calls of many comparisons at once: arms ``(..., figures, boots)`` on the log scale, every
    figure gating (one family at ``ALPHA_GATING``), ``sign`` +1 where higher is better, ``spend`` the
    look's share of the alpha (1: a single analysis). The same tests and levels as
    :func:`compare_figures` (the tests hold them equal); the simulations run on it."""
    import numpy as np

    if analysis == "paired":
        diff, se, df = paired(xa, xb, 0.0 if noise_sd is None else noise_sd, 0.0 if noise_df is None else noise_df)
    elif noise_sd is not None:
        diff, se, df = pooled(xa, xb, noise_sd, noise_df)
    else:
        diff, se, df = welch(xa, xb)
    w = np.asarray(sign, float) * diff
    p_two, p_eq, p_ni = p_values(w, se, df, bound)
    spend = np.asarray(spend, float)
    reject = holm_sidak(p_two, ALPHA_GATING * spend * np.ones(p_two.shape[:-1]))
    return classify(w, p_eq, p_ni, reject, ALPHA_NOT_WORSE * (spend[..., None] if spend.ndim else spend))


# -- one comparison: figures as records ----------------------------------------------------------


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


@dataclass(frozen=True)
class NoiseRow:
    """A noise floor's reading of one figure: one boot's sd of the log value, on ``df`` degrees of freedom."""

    sd_log: float
    df: int


@dataclass
class FigureTest:
    """One figure's comparison, before and after the correction across figures."""

    figure: str
    better: Better
    a: Arm
    b: Arm
    tolerance_pct: float
    gating: bool
    scale: Literal["log", "linear"] = "log"
    analysis: str = "welch"
    df: float | None = None
    difference_pct: float | None = None  # B relative to A
    interval_pct: tuple[float, float] | None = None  # the unadjusted 95% interval
    # The interval at the level Holm's step-down held this figure to (its rank among the family's
    # p-values): it excludes no difference exactly when the figure's own step rejects.
    adjusted_interval_pct: tuple[float, float] | None = None
    adjusted_confidence: float | None = None
    # B's worst degradation the non-inferiority test leaves (its one-sided bound at the level, as a
    # relative change in the worse direction): inside the tolerance exactly when it rejects.
    degradation_bound_pct: float | None = None
    paired_difference_pct: float | None = None  # the adjacent pairs' estimate, where the arms pair up
    paired_interval_pct: tuple[float, float] | None = None
    p_difference: float = 1.0
    p_equivalence: float = 1.0
    p_not_worse: float = 1.0
    p_difference_holm: float = 1.0
    family_alpha: float = ALPHA_GATING
    family_size: int = 1
    alpha_not_worse: float = ALPHA_NOT_WORSE
    min_detectable_pct: float | None = None
    boots_to_decide: int | None = None  # per arm, at 80% power, if B's true difference is the one observed
    boots_to_decide_basis: str = ""
    boots_if_equal: int | None = None  # per arm, to show not worse at 80% power if B equals A
    call: str = UNDECIDED
    decision: Decision = "undecided"
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        # ``extra`` holds working state (the estimate), never part of the comparison's file.
        out: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}
        for arm in ("a", "b"):
            v: Arm = getattr(self, arm)
            out[arm] = {"values": list(v.values), "center": _num(v.center), "spread_pct": v.spread_pct,
                        "cv_pct": v.cv_pct, "boots": v.n}
        for key in ("interval_pct", "adjusted_interval_pct", "paired_interval_pct"):
            out[key] = list(out[key]) if out[key] else None
        return {k: _num(v) if isinstance(v, float) else v for k, v in out.items()}


def _num(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else value


@dataclass(frozen=True)
class _Estimate:
    diff: float  # B - A on the test's scale
    se: float
    df: float
    sd_boot: float  # one boot's sd on the scale (what the boots needed are computed from)
    base: float  # the linear scale's unit of a relative difference (1 on the log scale)
    bound: float  # the tolerance on the scale


def _sign(test: FigureTest) -> float:
    return 1.0 if test.better == "higher" else -1.0


def _to_pct(x: float, scale: str, base: float) -> float:
    if scale == "log":
        return (math.exp(x) - 1.0) * 100.0 if x < 50 else math.inf  # beyond any reach: shown as such
    return x / base * 100.0


def _estimate(test: FigureTest, noise: NoiseRow | None, pair: bool) -> _Estimate:
    import numpy as np

    log = all(v > 0 for v in test.a.values + test.b.values)
    test.scale = "log" if log else "linear"
    xa = np.log(test.a.values) if log else np.asarray(test.a.values, float)
    xb = np.log(test.b.values) if log else np.asarray(test.b.values, float)
    base = 1.0 if log else (abs(float(xa.mean())) or 1.0)
    middle = 1.0 if log else ((abs(float(xa.mean())) + abs(float(xb.mean()))) / 2 or 1.0)
    bound = math.log1p(test.tolerance_pct / 100.0) if log else test.tolerance_pct / 100.0 * middle
    use_noise = noise is not None and log and noise.df > 0
    nsd, ndf = (noise.sd_log, noise.df) if use_noise else (0.0, 0)
    if pair and test.a.n == test.b.n:
        diff, se, df = paired(xa, xb, nsd, ndf)
        test.analysis = "paired with the noise floor" if use_noise else "paired"
        sd_boot = float(se) * math.sqrt(test.a.n) / math.sqrt(2)
    elif use_noise:
        diff, se, df = pooled(xa, xb, nsd, ndf)
        test.analysis = "pooled with the noise floor"
        sd_boot = float(se) / math.sqrt(1 / test.a.n + 1 / test.b.n)
    else:
        diff, se, df = welch(xa, xb)
        test.analysis = "welch"
        sd_boot = math.sqrt((float(xa.var(ddof=1)) + float(xb.var(ddof=1))) / 2)
    if not float(se) > 0:
        test.analysis = "exact"
        test.note = "the same value in every boot of each arm: the difference is exact"
    return _Estimate(float(diff), float(se), float(df), sd_boot, base, bound)


def test_figure(test: FigureTest, *, noise: NoiseRow | None = None, pair: bool = False) -> FigureTest:
    """The uncorrected tests of one figure. Arms with fewer than two boots have no spread: nothing
    is decided. Where the arms pair up (as many boots each), the adjacent pairs' estimate is reported
    beside the deciding analysis, or is the deciding analysis when ``pair``."""
    import numpy as np

    if test.a.n < 2 or test.b.n < 2:
        test.note = "an arm has fewer than 2 boots: no boot-to-boot spread, nothing can be decided"
        if test.a.n and test.b.n:
            log = all(v > 0 for v in test.a.values + test.b.values)
            test.scale = "log" if log else "linear"
            fa = statistics.fmean(math.log(v) if log else v for v in test.a.values)
            fb = statistics.fmean(math.log(v) if log else v for v in test.b.values)
            test.difference_pct = _to_pct(fb - fa, test.scale, 1.0 if log else (abs(fa) or 1.0))
        return test
    est = _estimate(test, noise, pair)
    test.extra["estimate"] = est
    test.df = est.df
    test.difference_pct = _to_pct(est.diff, test.scale, est.base)
    test.interval_pct = _interval(test, est, CONFIDENCE)
    p_two, p_eq, p_ni = p_values(_sign(test) * est.diff, est.se, est.df, est.bound)
    test.p_difference, test.p_equivalence, test.p_not_worse = float(p_two), float(p_eq), float(p_ni)
    if test.a.n == test.b.n and test.a.n >= 3 and not pair and test.scale == "log":
        d, se, df = paired(np.log(test.a.values), np.log(test.b.values))
        if float(se) > 0:
            test.paired_difference_pct = _to_pct(float(d), "log", 1.0)
            half = _t_ppf(1 - (1 - CONFIDENCE) / 2, float(df)) * float(se)
            test.paired_interval_pct = (_to_pct(float(d) - half, "log", 1.0), _to_pct(float(d) + half, "log", 1.0))
    return test


def _t_ppf(q: float, df: float) -> float:
    from scipy import stats

    return float(stats.t.ppf(q, df))


def _interval(test: FigureTest, est: _Estimate, confidence: float) -> tuple[float, float]:
    if not est.se > 0:
        point = _to_pct(est.diff, test.scale, est.base)
        return point, point
    half = _t_ppf(1 - (1 - confidence) / 2, est.df) * est.se
    return _to_pct(est.diff - half, test.scale, est.base), _to_pct(est.diff + half, test.scale, est.base)


def step_levels(p_values_: Sequence[float], alpha: float) -> list[float]:
    """Holm-Sidak's level for each p-value (in the order given): the one ranked i-th smallest of k
    is held to 1 - (1 - alpha)^(1 / (k - i))."""
    k = len(p_values_)
    order = sorted(range(k), key=lambda j: p_values_[j])
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
    return power if math.isfinite(power) else 1.0


def boots_needed(effect: float, sd_boot: float, alpha: float, *, alternative: str, paired_: bool = False) -> int | None:
    """Boots per arm for 80% power to reject at ``alpha`` when the true difference is ``effect``
    (on the scale, in the direction the test looks) and one boot's sd is ``sd_boot``: statsmodels'
    TTestIndPower (TTestPower on the pairs' differences, whose sd is sqrt(2) boots'). None: more than
    ``MAX_BOOTS`` (or no effect to find)."""
    import warnings

    from statsmodels.stats.power import TTestIndPower, TTestPower

    if effect <= 0 or not math.isfinite(effect):
        return None
    if sd_boot <= 0:
        return 2
    size = effect / (sd_boot * (math.sqrt(2) if paired_ else 1.0))
    solver = TTestPower() if paired_ else TTestIndPower()
    key = "nobs" if paired_ else "nobs1"

    def power(n: int) -> float:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # statsmodels warns near n = 2, where the noncentral t is steep
            value = float(solver.power(effect_size=size, alpha=alpha, alternative=alternative, **{key: n}))
        # Far past the critical value the noncentral t's series gives up (nan): the power is 1 there.
        return value if math.isfinite(value) else 1.0

    if power(MAX_BOOTS) < POWER:
        return None
    # The power grows with n: the smallest n that reaches 80%, by bisection over whole boots.
    low, high = 1, MAX_BOOTS
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if power(mid) >= POWER else (mid, high)
    return max(2, high)


def _power(test: FigureTest, pair: bool) -> None:
    """The smallest difference these boots separate with 80% power, and the boots per arm that would
    decide the figure (and that would show B not worse were it equal to A)."""
    from scipy.optimize import brentq

    est: _Estimate | None = test.extra.get("estimate")
    if est is None:
        return
    strict = test.family_alpha / test.family_size  # the level a lone difference must meet
    if not est.se > 0:
        test.min_detectable_pct, test.boots_to_decide, test.boots_if_equal = 0.0, 2, 2
        return
    high = (3 * _t_ppf(1 - strict / 2, est.df) + 20) * est.se
    effect = brentq(lambda d: power_of(d, est.se, est.df, strict) - POWER, 1e-6 * est.se, high, xtol=1e-3 * est.se)
    test.min_detectable_pct = _to_pct(effect, test.scale, est.base)
    pair = pair and test.analysis.startswith("paired")
    w = _sign(test) * est.diff
    test.boots_if_equal = boots_needed(est.bound, est.sd_boot, test.alpha_not_worse, alternative="larger",
                                       paired_=pair)
    if w > -est.bound:
        test.boots_to_decide = boots_needed(w + est.bound, est.sd_boot, test.alpha_not_worse, alternative="larger",
                                            paired_=pair)
        test.boots_to_decide_basis = (f"to show B not worse by {test.tolerance_pct:g}% (one-sided, alpha "
                                      f"{test.alpha_not_worse:.4g}) if B's true difference is the observed "
                                      f"{_signed(test.difference_pct)}")
    else:
        test.boots_to_decide = boots_needed(-w, est.sd_boot, strict, alternative="two-sided", paired_=pair)
        test.boots_to_decide_basis = (f"to separate the observed {_signed(test.difference_pct)} (two-sided, alpha "
                                      f"{strict:.4g}, the family's strictest Holm-Sidak step)")


def _signed(pct: float | None) -> str:
    return "-" if pct is None else f"{pct:+.1f}%"


def _degradation_bound(test: FigureTest) -> float | None:
    """The one-sided bound on B's degradation at the non-inferiority level, as a relative change in
    the worse direction (positive: worse; a figure better lower is worse when B is higher)."""
    est: _Estimate | None = test.extra.get("estimate")
    if est is None:
        return None
    w = _sign(test) * est.diff
    worst = w - (_t_ppf(1 - test.alpha_not_worse, est.df) * est.se if est.se > 0 else 0.0)  # B's worst improvement
    if test.scale == "log":
        return (math.exp(-worst) - 1.0) * 100.0 if -worst < 50 else math.inf
    return -worst / est.base * 100.0


def decide(tests: Sequence[FigureTest], *, power: bool = True, spend: float = 1.0, pair: bool = False) -> list[FigureTest]:
    """Every figure's call after Holm-Šidák's correction within its family (see the module's text).
    ``spend``: the look's share of every alpha (1: one analysis); ``power=False`` leaves the power
    figures out (a simulation of thousands of comparisons)."""
    import numpy
    from statsmodels.stats.multitest import multipletests

    gating = [t for t in tests if t.gating]
    others = [t for t in tests if not t.gating]
    # With no figure named, every figure gates: one family at the gating alpha either way, so a false
    # B WORSE is held to 2.5% whatever the operator named.
    families = [(gating, ALPHA_GATING), (others, ALPHA_OTHER)]
    for family, alpha in families:
        if not family:
            continue
        alpha *= spend
        for t in family:
            t.family_alpha, t.family_size = alpha, len(family)
            t.alpha_not_worse = (ALPHA_NOT_WORSE if t.gating else ALPHA_OTHER) * spend
        raw = [min(1.0, max(0.0, t.p_difference)) if math.isfinite(t.p_difference) else 1.0 for t in family]
        with numpy.errstate(divide="ignore"):  # a p-value of 1 corrects to 1 through log1p(-1)
            rejected, adjusted, _, _ = multipletests(raw, alpha=alpha, method="holm-sidak")
        for t, rej, p, level in zip(family, rejected, adjusted, step_levels(raw, alpha)):
            t.p_difference_holm = float(p)
            t.adjusted_confidence = 1.0 - level
            est: _Estimate | None = t.extra.get("estimate")
            t.adjusted_interval_pct = _interval(t, est, 1.0 - level) if est is not None else t.interval_pct
            t.degradation_bound_pct = _degradation_bound(t)
            if est is None:
                t.call = UNDECIDED
            else:
                w = _sign(t) * est.diff
                code = int(classify(w, t.p_equivalence, t.p_not_worse, bool(rej), t.alpha_not_worse))
                t.call = {CODE_EQUIVALENT: equivalent(t.tolerance_pct), CODE_BETTER: "B better",
                          CODE_WORSE: "B worse", CODE_NOT_WORSE: not_worse(t.tolerance_pct)}.get(code, UNDECIDED)
            t.decision = decision_of(t.call)
            if power:
                _power(t, pair)
    return list(tests)


def compare_figures(arms: Mapping[str, tuple[Sequence[float], Sequence[float], Better]], *,
                    tolerance_pct: float | Mapping[str, float], gating: set[str] | None = None,
                    power: bool = True, noise: Mapping[str, NoiseRow] | None = None, pair: bool = False,
                    spend: float = 1.0) -> list[FigureTest]:
    """Figure name → (A's values by boot, B's values by boot, which way is better) → every figure's
    test and call. ``tolerance_pct``: one tolerance or one per figure; ``gating``: the figures the
    operator gates (None: every figure); ``noise``: a noise floor's rows by figure (pooled in);
    ``pair``: decide on adjacent pairs (the arms' boots in campaign order); ``spend``: the look's
    share of the alpha."""
    tests = []
    for name, (a, b, better) in arms.items():
        tol = tolerance_pct if isinstance(tolerance_pct, (int, float)) else tolerance_pct[name]
        t = FigureTest(name, better, Arm(tuple(map(float, a))), Arm(tuple(map(float, b))), float(tol),
                       gating is None or name in gating)
        tests.append(test_figure(t, noise=(noise or {}).get(name), pair=pair))
    return decide(tests, power=power, spend=spend, pair=pair)
