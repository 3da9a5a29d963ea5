"""The packaged GPU pair, end to end on one NVIDIA H100 (vLLM 0.26.0, tiny-qwen3 v2, 2026-12-06):
``python -m pytest_qualify ab 262k-gpu 262k-gpu-eager --boots 3`` ran one warm-up boot a side, then
A1 B1 B2 A2 A3 B3, and ended ``COMPARISON: B WORSE (exit 1)``; ``ab 262k-gpu 262k-gpu --boots 3
--warm-up 0`` right after ended ``COMPARISON: UNDECIDED (exit 2)``. The boots' timing sections and
serving facts, and both comparisons' figures as the device wrote them, are kept in
``data/h100-ab-end-to-end-2026-12-06.json``; these tests decide on them again with the packaged
profile's ``[ab]`` table, so a change to the figures, the profile or the decision that would have
turned either call shows here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_qualify.compare.boots import ArmBoots, Boot
from pytest_qualify.compare.comparison import compare_arms
from pytest_qualify.compare.separability import compare_figures
from pytest_qualify.profiles import load_profile

DATA = json.loads((Path(__file__).parent / "data" / "h100-ab-end-to-end-2026-12-06.json").read_text())
RULES = load_profile("262k-gpu").ab
DECODE = ("load.c1.engine_tpot_s_mean", "load.c2.output_tok_s")


def arm(name: str, boots: tuple[str, ...]) -> ArmBoots:
    stored = DATA["ab"]["boots"]
    return ArmBoots(name, [Boot(Path(b), {"run": {"id": stored[b]["run_id"]}, "verdict": {"result": stored[b]["verdict"]},
                                          "items": [], "timing": stored[b]["timing"],
                                          "serving_facts": stored[b]["serving_facts"]}) for b in boots])


def test_the_packaged_pair_gates_what_the_h100_run_gated():
    assert sorted(RULES.figures) == sorted(DATA["ab"]["gating"]) == sorted(DATA["aa"]["gating"])
    assert RULES.boots == 3 and load_profile("262k-gpu-eager").ab == RULES


def test_three_boots_of_enforce_eager_end_b_worse_on_decode():
    c = compare_arms(arm("A", ("A1", "A2", "A3")), arm("B", ("B1", "B2", "B3")), workload={},
                     tolerance_pct=RULES.tolerance_pct, gate_patterns=RULES.figures)
    assert (c["result"], c["exit_code"]) == (DATA["ab"]["result"], DATA["ab"]["exit_code"]) == ("B WORSE", 1)
    assert sorted(c["decision"]["worse"]) == sorted(DECODE)
    rows = {f["id"]: f for f in c["figures"]}
    assert rows["load.c1.engine_tpot_s_mean"]["difference_pct"] == pytest.approx(48.5, abs=0.1)
    assert rows["load.c1.engine_tpot_s_mean"]["adjusted_interval_pct"][0] > 5
    assert rows["load.c2.output_tok_s"]["difference_pct"] == pytest.approx(-36.0, abs=0.1)
    # Prefill is not what eager mode slows: the TTFT figure stays undecided, and says how many boots.
    ttft = rows["sweep.p32768.engine_ttft_s"]
    assert ttft["decision"] == "undecided" and ttft["boots_to_decide"] > 3
    # Every figure the device's run called is called the same here, from the boots' own sections.
    device = {f["id"]: f for f in DATA["ab"]["figures"]}
    assert set(rows) == set(device)
    assert {k: r["call"] for k, r in rows.items()} == {k: d["call"] for k, d in device.items()}


def test_the_warm_up_boots_were_cold_and_are_no_sample():
    """The first boot of each arm compiled into an empty cache (A: 18 s of torch.compile, start 128 s
    against 47-50 s); as a sample it would have read as B's engine init being far better."""
    facts = {name: b["serving_facts"]["facts"] for name, b in DATA["ab"]["boots"].items()}
    assert facts["warm-up-A1"]["compile_s"]["value"] > 10 * max(facts[b]["compile_s"]["value"] for b in ("A1", "A2", "A3"))
    assert facts["warm-up-A1"]["startup_s"]["value"] > 2 * max(facts[b]["startup_s"]["value"] for b in ("A1", "A2", "A3"))
    with_cold = compare_arms(arm("A", ("warm-up-A1", "A1", "A2")), arm("B", ("B1", "B2", "B3")), workload={},
                             tolerance_pct=RULES.tolerance_pct, gate_patterns=RULES.figures)
    warm = compare_arms(arm("A", ("A1", "A2", "A3")), arm("B", ("B1", "B2", "B3")), workload={},
                        tolerance_pct=RULES.tolerance_pct, gate_patterns=RULES.figures)
    spread = {c_id: {f["id"]: f["a"]["spread_pct"] for f in c["figures"]} for c_id, c in (("cold", with_cold), ("warm", warm))}
    assert spread["cold"]["facts.startup_s"] > 5 * spread["warm"]["facts.startup_s"]


def test_the_recipe_against_itself_is_undecided_never_worse_and_states_the_boots():
    figures = DATA["aa"]["figures"]
    tests = compare_figures({f["id"]: (f["a"], f["b"], f["better"]) for f in figures},
                            tolerance_pct=RULES.tolerance_pct, gating=set(DATA["aa"]["gating"]))
    gates = [t for t in tests if t.gating]
    assert len(gates) == 3 and not any(t.decision == "worse" for t in gates)
    undecided = [t for t in gates if t.decision == "undecided"]
    assert undecided, "three boots of the recipe against itself cannot show it not worse by 5%"
    assert all(t.boots_to_decide is not None and t.boots_to_decide > 3 for t in undecided)
    assert max(t.boots_to_decide for t in undecided) == DATA["aa"]["boots_per_arm_to_decide"]
    assert (DATA["aa"]["result"], DATA["aa"]["exit_code"]) == ("UNDECIDED", 2)
    assert {t.figure: t.call for t in tests} == {f["id"]: f["call"] for f in figures}
