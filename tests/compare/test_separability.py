"""The calls on one figure, proven on seeded simulations of boots: the reference server's speed
factor and boot-to-boot jitter (``reference/__main__.boot_factor``, the draw each reference boot
makes) place a known shift inside or outside a known noise."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_qualify.compare.separability import compare_figures, equivalent
from pytest_qualify.reference.__main__ import boot_factor

DECODE = "load.c1.output_tok_s"
OTHERS = ("lane.1K.ttft_s", "lane.2K.ttft_s", "load.c1.tpot_s_p50", "load.c2.output_tok_s", "load.c4.output_tok_s")


def boots(seed: int, arm: str, n: int, *, speed: float, jitter: float, base: float = 500.0) -> list[float]:
    """Decode tok/s of n boots of one arm: the reference server's rate factor per boot."""
    return [base * boot_factor(speed, jitter, f"{seed}:{arm}{i}") for i in range(n)]


# Below the 1.4% shift the low-jitter test separates: at a tolerance above it the whole interval
# would lie inside ±T, and the call would (rightly) be equivalence, not a worse B.
TOLERANCE_PCT = 1.0


def campaign(seed: int, *, shift: float, jitter: float, n: int = 3, gate: bool = True):
    arms = {DECODE: (boots(seed, "A", n, speed=1.0, jitter=jitter),
                     boots(seed, "B", n, speed=1.0 - shift, jitter=jitter), "higher")}
    for k, name in enumerate(OTHERS):
        better = "lower" if name.endswith(("_s", "_p50")) else "higher"
        arms[name] = (boots(seed * 7 + k, "A", n, speed=1.0, jitter=jitter, base=1.0),
                      boots(seed * 7 + k, "B", n, speed=1.0, jitter=jitter, base=1.0), better)
    return {t.figure: t for t in compare_figures(arms, tolerance_pct=TOLERANCE_PCT, gating={DECODE} if gate else None,
                                                 power=False)}


def test_a_one_point_four_percent_slower_decode_is_b_worse_under_low_jitter():
    """The seed's MoE tune: 1.399% lower throughput in a matched three-run A/B, at 0.3% boot-to-boot jitter."""
    calls = [campaign(seed, shift=0.014, jitter=0.003)[DECODE].call for seed in range(40)]
    assert calls[0] == "B worse"
    assert calls.count("B worse") >= 30, calls  # about 85% power at 3 boots: most draws, not every one


def test_the_same_shift_is_not_separable_under_high_jitter():
    """The seed's MARLIN vs TRITON: a ~1% difference well inside a 3% boot-to-boot spread."""
    calls = [campaign(seed, shift=0.014, jitter=0.03)[DECODE].call for seed in range(40)]
    assert calls[0] == "undecided"
    assert calls.count("undecided") >= 32, calls
    assert "B better" not in calls


def test_the_same_recipe_twice_has_no_call_on_any_figure_in_95_percent_of_simulations():
    separated = 0
    for seed in range(200):
        tests = campaign(1000 + seed, shift=0.0, jitter=0.03, gate=seed % 2 == 0)
        separated += any(t.call in ("B better", "B worse") for t in tests.values())
    assert separated <= 10, f"{separated}/200 simulations called a difference between two arms of one recipe"


def test_a_low_jitter_same_recipe_is_equivalent_and_a_wide_one_states_its_power():
    tight = compare_figures({DECODE: (boots(1, "A", 5, speed=1, jitter=0.002), boots(1, "B", 5, speed=1, jitter=0.002),
                                      "higher")}, tolerance_pct=2.0)[0]
    assert tight.call == equivalent(2.0)
    wide = compare_figures({DECODE: (boots(2, "A", 3, speed=1, jitter=0.14), boots(2, "B", 3, speed=0.986, jitter=0.14),
                                     "higher")}, tolerance_pct=2.0)[0]
    assert wide.call == "undecided" and wide.decision == "undecided"
    # At a 14% spread (the H200's own decode spread) three boots cannot see 2%: the report says how
    # far off they are, and how many boots would decide it.
    assert wide.min_detectable_pct is not None and wide.min_detectable_pct > 20
    assert wide.boots_if_equal is not None and wide.boots_if_equal > 50
    assert wide.boots_to_decide is None or wide.boots_to_decide > 50


def test_an_exact_fact_differs_exactly():
    """A capacity fact every boot reports alike: a difference is real, none is equivalence."""
    kv = compare_figures({"facts.kv_cache_tokens": ([100_000.0] * 2, [375_000.0] * 2, "higher")}, tolerance_pct=1.0)[0]
    assert kv.call == "B better" and kv.difference_pct == pytest.approx(275.0)
    same = compare_figures({"facts.kv_cache_tokens": ([100_000.0] * 2, [100_000.0] * 2, "higher")}, tolerance_pct=1.0)[0]
    assert same.call == equivalent(1.0)


def test_an_interval_inside_the_tolerance_is_equivalence_even_when_it_excludes_zero():
    """A KV cache identical in every boot of each arm but 0.016% smaller in B, and a sampled 1.4%
    shift at 0.3% jitter: both sure differences, both inside a 5% tolerance, so neither is a worse B."""
    kv = compare_figures({"facts.kv_cache_tokens": ([375_000.0] * 3, [374_940.0] * 3, "higher")}, tolerance_pct=5.0)[0]
    assert kv.interval_pct[1] < 0 and kv.call == equivalent(5.0)
    shifted = campaign(0, shift=0.014, jitter=0.003)[DECODE]
    assert shifted.call == "B worse"  # at ±1%: outside the tolerance, separable
    alone = compare_figures({DECODE: (shifted.a.values, shifted.b.values, "higher")}, tolerance_pct=5.0)[0]
    assert alone.p_difference_holm < 0.03 and alone.interval_pct[1] < 0 and alone.call == equivalent(5.0)


def test_one_boot_per_arm_separates_nothing():
    t = compare_figures({DECODE: ([500.0], [250.0], "higher")}, tolerance_pct=5.0)[0]
    assert t.call == "undecided" and t.decision == "undecided" and "fewer than 2 boots" in t.note


def test_a_figure_that_can_be_zero_is_compared_on_its_own_scale():
    t = compare_figures({"load.c4.goodput": ([1.0, 0.98, 1.0], [0.0, 0.05, 0.02], "higher")}, tolerance_pct=5.0)[0]
    assert t.scale == "linear" and t.call == "B worse"


values = st.lists(st.floats(min_value=1.0, max_value=1000.0, allow_nan=False), min_size=2, max_size=5)
# A figure that can be zero (goodput: the share of requests inside their SLO) is tested on the linear scale.
shares = st.lists(st.one_of(st.just(0.0), st.floats(min_value=0.0, max_value=1.0, allow_nan=False)),
                  min_size=2, max_size=5)
FLIP = {"B better": "B worse", "B worse": "B better"}
SYMMETRIC = ("B better", "B worse", "equivalent")  # non-inferiority is one-sided: its mirror is another test


@settings(max_examples=40)
@given(st.lists(st.one_of(st.tuples(values, values, st.sampled_from(["higher", "lower"])),
                          st.tuples(shares, shares, st.just("higher"))), min_size=1, max_size=4),
       st.floats(min_value=0.5, max_value=20.0))
def test_swapping_the_arms_flips_every_call(figures, tolerance):
    arms = {f"f{i}": f for i, f in enumerate(figures)}
    swapped = {name: (b, a, better) for name, (a, b, better) in arms.items()}
    forward = compare_figures(arms, tolerance_pct=tolerance, power=False)
    backward = {t.figure: t for t in compare_figures(swapped, tolerance_pct=tolerance, power=False)}
    for t in forward:
        if t.call.startswith(SYMMETRIC):
            assert backward[t.figure].call == FLIP.get(t.call, t.call), (t.figure, t.call, backward[t.figure].call)
        assert backward[t.figure].p_difference == pytest.approx(t.p_difference, rel=1e-9, abs=1e-12)
        assert backward[t.figure].scale == t.scale
        # A ratio printed as a percentage keeps its log only while it is not -100% to the last digit.
        if t.difference_pct is not None and t.scale == "log" and -99.99 < t.difference_pct < 1e6:
            assert math.log1p(backward[t.figure].difference_pct / 100) == pytest.approx(
                -math.log1p(t.difference_pct / 100), abs=1e-9)


def test_the_boot_factor_is_seeded_and_centred_on_the_speed():
    assert boot_factor(0.9, 0.0, "x") == 0.9
    assert boot_factor(1.0, 0.03, "A1") == boot_factor(1.0, 0.03, "A1") != boot_factor(1.0, 0.03, "A2")
    draws = [math.log(boot_factor(1.0, 0.03, str(i))) for i in range(400)]
    assert abs(sum(draws) / len(draws)) < 0.005
    assert 0.025 < math.sqrt(sum(d * d for d in draws) / len(draws)) < 0.035
    assert random.Random(1).random() == random.Random(1).random()


def _excludes_zero(interval) -> bool:
    return interval is not None and (interval[0] > 0 or interval[1] < 0)


@pytest.mark.parametrize("shift, jitter", [(0.014, 0.003), (0.0, 0.03), (0.05, 0.01), (0.014, 0.03)])
def test_the_interval_shown_agrees_with_the_call(shift, jitter):
    """The interval the report shows is Holm's adjusted one: a separable call's interval excludes zero,
    and where the unadjusted 95% interval excludes zero but the call is ``not separable`` (many
    figures at once), the adjusted interval holds zero."""
    seen_unadjusted_only = 0  # how often the adjusted interval settled what the unadjusted one would misread
    for seed in range(30):
        tests = campaign(seed, shift=shift, jitter=jitter)
        family = list(tests.values())
        for t in family:
            assert t.adjusted_interval_pct is not None and 0 < t.adjusted_confidence < 1
            # Never narrower than the 95% interval: every step's level is at most the family's alpha (<= 3%).
            assert t.adjusted_interval_pct[0] <= t.interval_pct[0] + 1e-9
            assert t.adjusted_interval_pct[1] >= t.interval_pct[1] - 1e-9
            rejected = t.p_difference_holm < t.family_alpha
            if t.call in ("B better", "B worse"):
                assert rejected
            if rejected:
                assert _excludes_zero(t.adjusted_interval_pct), (seed, t.figure, t.adjusted_interval_pct)
                assert (t.adjusted_interval_pct[0] > 0) == (t.difference_pct > 0)
            if not rejected and _excludes_zero(t.interval_pct):
                seen_unadjusted_only += 1
                assert not _excludes_zero(t.adjusted_interval_pct) or any(
                    u.p_difference < t.p_difference and u.p_difference_holm >= u.family_alpha
                    and u.family_alpha == t.family_alpha
                    for u in family), (seed, t.figure)  # else only a step before it stopped the step-down


def test_a_lone_figure_is_separable_exactly_when_its_adjusted_interval_excludes_zero():
    for seed in range(60):
        a = boots(seed, "A", 3, speed=1.0, jitter=0.01)
        b = boots(seed, "B", 3, speed=0.985, jitter=0.01)
        t = compare_figures({DECODE: (a, b, "higher")}, tolerance_pct=0.1, power=False)[0]
        assert (t.p_difference_holm < t.family_alpha) == _excludes_zero(t.adjusted_interval_pct), (seed, t)
        if not t.call.startswith("equivalent"):
            assert (t.call in ("B worse", "B better")) == _excludes_zero(t.adjusted_interval_pct), (seed, t)


def test_a_variance_too_small_to_square_still_gives_a_finite_test():
    # (1e-96)^2 underflows to zero: the Welch degrees of freedom were 0/0 and every p-value nan.
    t = compare_figures({"f": ([0.0, 0.0], [0.0, 1.1018553873502358e-96], "higher")}, tolerance_pct=1.0, power=False)[0]
    assert math.isfinite(t.p_difference) and math.isfinite(t.df) and t.df == pytest.approx(1.0)
