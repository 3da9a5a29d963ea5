"""The decision on real boots: eleven timing-stage boots on one NVIDIA H100 (vLLM 0.26.0,
tiny-qwen3 v2; A = 262k-gpu, B = 262k-gpu-eager, run A1 B1 B2 A2 A3 B3 A4 A5, later A6 B4), their
timing sections kept in ``data/h100-eager-ab-2026-12-06.json``. Gated on the packaged pair's
decode and throughput figures (the engine's own TPOT at concurrency 1, output tok/s at the top
level), three boots a side of ``--enforce-eager`` end B WORSE, and the recipe against itself never
does: it ends UNDECIDED with the boots per arm that would decide it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_qualify.compare.boots import ArmBoots, Boot
from pytest_qualify.compare.comparison import compare_arms

DATA = Path(__file__).parent / "data" / "h100-eager-ab-2026-12-06.json"
GATES = ("load.c1.engine_tpot_s_mean", "load.c2.output_tok_s")


def arm(name: str, boots: tuple[str, ...]) -> ArmBoots:
    data = json.loads(DATA.read_text())["boots"]
    # Each boot's timing section as it was measured; its run was judged (the random model's answers
    # fail alike in both arms), and nothing else of the bundle is read here.
    return ArmBoots(name, [Boot(Path(b), {"run": {"id": data[b]["run_id"]}, "verdict": {"result": "FAIL"},
                                          "items": [], "timing": data[b]["timing"]}) for b in boots])


def decide(a: tuple[str, ...], b: tuple[str, ...], **kw) -> dict:
    return compare_arms(arm("A", a), arm("B", b), workload={}, tolerance_pct=5.0, gate_patterns=GATES, **kw)


def test_three_boots_of_enforce_eager_are_b_worse_on_the_h100():
    c = decide(("A1", "A2", "A3"), ("B1", "B2", "B3"))
    rows = {f["id"]: f for f in c["figures"]}
    assert c["result"] == "B WORSE" and c["exit_code"] == 1
    assert sorted(c["decision"]["worse"]) == sorted(GATES)
    tpot = rows["load.c1.engine_tpot_s_mean"]
    assert tpot["difference_pct"] == pytest.approx(59.1, abs=0.5) and tpot["adjusted_interval_pct"][0] > 10
    assert rows["load.c2.output_tok_s"]["difference_pct"] == pytest.approx(-35.2, abs=0.5)
    # Adjacent pairs (A1 B1, B2 A2, A3 B3) see the same decode regression.
    paired = {f["id"]: f for f in decide(("A1", "A2", "A3"), ("B1", "B2", "B3"), pair=True)["figures"]}
    assert paired["load.c1.engine_tpot_s_mean"]["call"] == "B worse"


@pytest.mark.parametrize("a, b", [(("A1", "A2", "A3"), ("A4", "A5", "A6")), (("A1", "A2"), ("A4", "A5"))])
def test_the_recipe_against_itself_is_never_worse_and_states_the_boots_that_would_decide(a, b):
    c = decide(a, b)
    assert c["exit_code"] in (0, 2) and c["result"] != "B WORSE"
    if c["result"] == "UNDECIDED":
        need = c["decision"]["boots_per_arm_to_decide"]
        assert need is not None and need > len(a)
        assert all("boots per arm would decide it" in r for r in c["reasons"])
