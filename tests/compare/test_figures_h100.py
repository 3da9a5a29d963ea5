"""compare/figures.py on the timing sections of eight real boots (one NVIDIA H100, vLLM 0.26.0,
tiny-qwen3 v2, 2026-12-06; ``data/h100-eager-ab-2026-12-06.json``): the recipe (A, ``262k-gpu``) and
``--enforce-eager`` (B). With the recipe's tool parser every streamed answer came whole in one chunk,
so the client's TPOT, TTFT and decode are "not measurable here"; the engine's own time per output
token is there in every boot, and it separates eager on three boots a side."""

from __future__ import annotations

import json
import math
from pathlib import Path

from scipy import stats

from pytest_qualify.compare.figures import figures_of, not_measurable

DATA = json.loads((Path(__file__).parent / "data" / "h100-eager-ab-2026-12-06.json").read_text())
BOOTS = {name: {"timing": boot["timing"]} for name, boot in DATA["boots"].items() if name != "S1"}


def test_every_probe_came_whole_so_the_clients_decode_figures_are_not_measurable():
    for name, summary in BOOTS.items():
        figures, reasons = figures_of(summary), not_measurable(summary)
        assert "load.c1.tpot_s_p50" not in figures and "sweep.p32768.ttft_s" not in figures, name
        assert figures["load.c1.engine_tpot_s_mean"].value > 0, name
        assert "8 in all" in reasons["load.c1.tpot_s_p50"] and "came whole in one chunk" in reasons["load.c1.tpot_s_p50"]
        assert reasons["lane.32K.decode_tok_s"].startswith("not measurable here")
        # The sweep still built its prompt of exactly 32,768 tokens on the Qwen3 tokenizer.
        assert summary["timing"]["sweep"]["points"][0]["measured_prompt_tokens"] == [32768]


def test_the_sweep_built_exact_sizes_up_to_131072_tokens_and_the_engine_timed_each():
    points = {p["prompt_tokens"]: p for p in DATA["boots"]["S1"]["timing"]["sweep"]["points"]}
    assert set(points) == {2048, 32768, 131072}
    assert all(p["measured_prompt_tokens"] == [n] for n, p in points.items())
    # Every sample came whole: no client TTFT; the engine's own TTFT grows with the prompt.
    assert all(p["ttft_s"] is None for p in points.values())
    engine = [points[n]["engine_ttft_s"] for n in (2048, 32768, 131072)]
    assert engine == sorted(engine) and all(v > 0 for v in engine)
    figures = figures_of({"timing": DATA["boots"]["S1"]["timing"]})
    assert {f"sweep.p{n}.engine_ttft_s" for n in points} <= set(figures)


def test_the_engines_tpot_separates_eager_on_three_boots_a_side():
    tpot = {name: figures_of(s)["load.c1.engine_tpot_s_mean"].value for name, s in BOOTS.items()}
    a = [math.log(tpot[n]) for n in ("A1", "A2", "A3")]
    b = [math.log(tpot[n]) for n in ("B1", "B2", "B3")]
    test = stats.ttest_ind(b, a, equal_var=False)
    low, high = (math.exp(x) - 1 for x in test.confidence_interval(0.95))
    assert low > 0.25 and 0.5 < math.exp(sum(b) / 3 - sum(a) / 3) - 1 < 0.7, (low, high)  # eager +59%
    # The recipe against itself (A1, A4 against A2, A3, A5): no separation.
    same = stats.ttest_ind([math.log(tpot[n]) for n in ("A1", "A4")],
                           [math.log(tpot[n]) for n in ("A2", "A3", "A5")], equal_var=False)
    lo, hi = same.confidence_interval(0.95)
    assert lo < 0 < hi
