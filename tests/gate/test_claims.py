"""The recipe's claims (gate/claims.py): the profile's [claims] table (schema, named errors), each
direction held and broken at its tolerance's edge, where each figure is read from, and what a claim
the run cannot show does to the verdict (required: INCOMPLETE; otherwise listed)."""

from __future__ import annotations


import pytest

from pytest_qualify.gate.claims import NOT_VERIFIABLE, evaluate_claims, holds
from pytest_qualify.gate.decide import FAIL, INCOMPLETE, PASS, ItemResult, RunRecord, decide
from pytest_qualify.gate.run_facts import RunFacts
from pytest_qualify.profiles import Claim, Claims, ProfileError, load_profile, module_registry
from .profile_files import small_text, write


def claim(figure: str = "kv_cache_tokens", claimed: float = 100.0, direction: str = "at_least", tolerance: float = 0.1,
          **kw) -> Claim:
    return Claim(name=kw.pop("name", figure), figure=figure, claimed=claimed, direction=direction,  # type: ignore[arg-type]
                 tolerance=tolerance, **kw)


@pytest.mark.parametrize(("direction", "held", "broken"), [
    ("at_least", [90.0, 100.0, 1e9], [89.99, 0.0]),
    ("at_most", [0.0, 100.0, 110.0], [110.01, 1e9]),
    ("within", [90.0, 100.0, 110.0], [89.99, 110.01]),
])
def test_each_direction_holds_inside_its_tolerance_and_breaks_outside(direction, held, broken):
    c = claim(direction=direction)
    assert all(holds(c, v) for v in held)
    assert not any(holds(c, v) for v in broken)


def facts(**serving) -> RunFacts:
    return RunFacts(
        simulated=False,
        serving_facts={"facts": {k: {"value": v, "status": "read" if v is not None else "not in the log",
                                     "source": "server log" if v is not None else "no line matched"}
                                 for k, v in serving.items()}},
        timing={"sweep": {"points": [{"prompt_tokens": 511, "samples": 3, "ttft_s": 0.2, "prefill_tok_s": 2555.0}],
                          "decode": [{"prompt_tokens": 2048, "output_tokens": 256, "samples": 3, "decode_tok_s": 30.0}]},
                "lanes": [{"lane": "32K", "ttft_s": {"median": 1.5, "min": 1.4, "max": 1.6, "n": 3},
                           "e2e_s": {"median": 1.9, "min": 1.8, "max": 2.0, "n": 3}}],
                "decode_tok_s": {"p50": 170.0, "p95": 180.0, "n": 40}, "prefill_tok_s": {"p50": 10_000.0, "n": 40}})


def rows(*claims: Claim, **serving):
    return evaluate_claims(Claims(tuple(claims)), facts(**serving))


def test_each_figure_is_read_where_it_is_measured_with_both_figures_in_the_reason():
    got = rows(claim("kv_cache_tokens", 412_980, tolerance=0.0),
               claim("ttft_s", 0.196, "at_most", prompt_tokens=511, name="ttft_511"),
               claim("prefill_tok_s", 5071, prompt_tokens=511, name="prefill"),
               claim("decode_tok_s", 38.77, tolerance=0.05, prompt_tokens=2048, name="decode"),
               claim("ttft_s", 1.571, "at_most", lane="32K", name="lane"),
               claim("decode_tok_s_p50", 169.19, name="p50"),
               kv_cache_tokens=206_490)
    by = {r.name: r for r in got}
    assert by["kv_cache_tokens"].status == "broken" and not by["kv_cache_tokens"].ok
    assert "206,490 tokens" in by["kv_cache_tokens"].reason and "412,980 tokens" in by["kv_cache_tokens"].reason
    assert "server log" in by["kv_cache_tokens"].reason
    assert by["ttft_511"].measured == 0.2 and by["ttft_511"].status == "held"  # 0.2 <= 0.196 × 1.1
    assert by["prefill"].measured == 2555.0 and by["prefill"].status == "broken"
    assert by["decode"].measured == 30.0 and by["decode"].status == "broken"
    assert "decode probe" in by["decode"].source and "256 output tokens" in by["decode"].source
    assert by["lane"].measured == 1.5 and by["lane"].status == "held" and "32K lane" in by["lane"].source
    assert by["p50"].measured == 170.0 and by["p50"].status == "held"
    for r in got:
        assert r.title.startswith("Recipe claims: ") and r.claimed_text in r.reason
    # A TTFT claim's row says what the TTFT timed: the first chunk (vllm bench serve's TTFT).
    assert by["ttft_511"].title == "Recipe claims: TTFT (first chunk) at 511 prompt tokens"
    assert by["lane"].title == "Recipe claims: TTFT (first chunk), 32K lane"


def record(claims: Claims, serving: dict) -> RunRecord:
    item = ItemResult(nodeid="suites/test_smoke.py::test_health[rep1of1]", module="smoke", item="test_health",
                      repetition=1, repetitions=1)
    item.record("call", "passed", "")
    return RunRecord(results=(item,), modules=module_registry(), required=("smoke",), claims=claims,
                     facts=facts(**serving))


def test_a_broken_claim_fails_the_run_and_a_held_one_passes():
    broken = decide(record(Claims((claim(tolerance=0.0),)), {"kv_cache_tokens": 50}))
    assert broken.verdict == FAIL and any("Recipe claims: KV cache tokens" in r for r in broken.reasons)
    assert [c.title for c in broken.checks] == ["Recipe claims: KV cache tokens"]
    held = decide(record(Claims((claim(tolerance=0.0),)), {"kv_cache_tokens": 150}))
    assert held.verdict == PASS and held.claims[0].status == "held"


def test_a_claim_not_verifiable_here_is_incomplete_only_when_required():
    required = decide(record(Claims((claim("weight_load_s", 282, "at_most", required=True),)), {"weight_load_s": None}))
    assert required.verdict == INCOMPLETE
    assert any(NOT_VERIFIABLE in r and "required" in r for r in required.incomplete)
    optional = decide(record(Claims((claim("weight_load_s", 282, "at_most"),)), {"weight_load_s": None}))
    assert optional.verdict == PASS
    (row,) = optional.claims
    assert row.status == NOT_VERIFIABLE and row.ok and row.measured is None
    assert optional.checks[0].measured == f"{NOT_VERIFIABLE} (not required)"
    # No serving facts at all (a run whose server never started): not verifiable either.
    assert evaluate_claims(Claims((claim(),)), RunFacts())[0].status == NOT_VERIFIABLE


# -- the profile's table ---------------------------------------------------------------------------




def test_the_recipe_profile_carries_the_recipes_figures_as_published():
    p = load_profile("a1-spark-recipe")
    by = {c.name: c for c in p.claims.claims}
    assert (by["kv_cache_tokens"].claimed, by["max_concurrency"].claimed, by["model_memory_gib"].claimed) == (412_980, 1.58, 35.31)
    assert by["decode_2k"].claimed == 38.77 and by["decode_2k"].prompt_tokens == 2048
    assert by["prefill_2042"].claimed == 5071 and by["prefill_2042"].prompt_tokens == 2042
    assert {c.prompt_tokens: c.claimed for c in p.claims.claims if c.figure == "ttft_s"} == {
        511: 0.196, 2042: 0.403, 8208: 1.35, 144_950: 43.1, 253_840: 105.3}
    assert (by["weight_load_s"].claimed, by["startup_s"].claimed) == (282, 420)
    assert p.sweep.prompt_tokens == (511, 2042, 8208, 144_950, 253_840) and p.sweep.decode_prompt_tokens == (2048,)
    assert p.deployment.engine == "vLLM 0.26.0" and not p.serve.attach_only
    assert all(c.said for c in p.claims.claims)


def test_the_262k_profile_carries_the_promotion_runs_figures():
    p = load_profile("262k")
    got = {(c.figure, c.lane): (c.claimed, c.direction) for c in p.claims.claims}
    assert got[("ttft_s", "32K")] == (1.571, "at_most") and got[("ttft_s", "128K")] == (12.839, "at_most")
    assert got[("ttft_s", "240K")] == (35.209, "at_most") and got[("e2e_s", "240K")] == (35.615, "at_most")
    assert got[("decode_tok_s_p50", None)] == (169.19, "at_least")
    assert not any(c.required for c in p.claims.claims)  # a stage without the lanes lists them, never INCOMPLETE


@pytest.mark.parametrize(("table", "field"), [
    ('[claims.x]\nfigure = "tok_s"\nclaimed = 1\ndirection = "at_least"\n', "claims.x.figure"),
    ('[claims.x]\nclaimed = 1\ndirection = "at_least"\n', "claims.x"),
    ('[claims.kv_cache_tokens]\nclaimed = 1\ndirection = "above"\n', "claims.kv_cache_tokens.direction"),
    ('[claims.kv_cache_tokens]\nclaimed = 0\ndirection = "at_least"\n', "claims.kv_cache_tokens.claimed"),
    ('[claims.kv_cache_tokens]\nclaimed = 1\ndirection = "at_least"\ntolerance = -0.1\n', "claims.kv_cache_tokens.tolerance"),
    ('[claims.t]\nfigure = "ttft_s"\nclaimed = 1\ndirection = "at_most"\n', "claims.t"),
    ('[claims.t]\nfigure = "ttft_s"\nlane = "64K"\nclaimed = 1\ndirection = "at_most"\n', "claims.t.lane"),
    ('[claims.kv_cache_tokens]\nprompt_tokens = 512\nclaimed = 1\ndirection = "at_least"\n', "claims.kv_cache_tokens.prompt_tokens"),
])
def test_a_bad_claims_table_is_an_error_naming_the_field(tmp_path, table, field):
    with pytest.raises(ProfileError, match=rf"field '{field}'"):
        load_profile(write(tmp_path, small_text() + "\n" + table))


def test_a_required_sweep_with_no_size_is_an_error(tmp_path):
    text = small_text().replace('required = [', 'required = ["sweep", ', 1)
    with pytest.raises(ProfileError, match=r"field 'sweep' is invalid: the sweep module is required but names no prompt size"):
        load_profile(write(tmp_path, text))


def test_a_baseline_compares_the_capacity_facts_and_the_sweep():
    from pytest_qualify.gate.baseline import compare

    def summary(kv: int, ttft: float) -> dict:
        return {"run": {"id": "r"}, "gate": [], "profile": {"name": "p", "deployment": {}}, "simulated": False,
                "timing": {"lanes": [], "decode_tok_s": None, "prefill_tok_s": None,
                           "sweep": {"points": [{"prompt_tokens": 512, "ttft_s": ttft}],
                                     "decode": [{"prompt_tokens": 512, "decode_tok_s": 40.0}]}},
                "serving_facts": {"facts": {"kv_cache_tokens": {"value": kv}, "startup_s": {"value": 9.0}}}}

    got = compare(summary(4096, 0.5), summary(8192, 0.2), threshold_pct=10.0)
    rows = {r["metric"]: r for r in got["rows"]}
    assert rows["KV cache (tokens)"]["regression"] and rows["KV cache (tokens)"]["delta_pct"] == -50.0
    assert rows["TTFT at 512 tokens (s)"]["regression"] and not rows["decode probe at 512 tokens (tok/s)"]["regression"]
    assert not any("startup" in name or "ready" in name for name in rows)  # start-up times vary with the host


def test_the_plot_draws_the_sweep_and_the_claimed_ttft(tmp_path):
    from pytest_qualify.evidence.bundle import plot_marks
    from pytest_qualify.evidence.plot import plot_ttft

    summary = {"profile": {"limits": {"window_tokens": 4096, "lanes": [{"name": "1K", "prompt_tokens": 1024}]}},
               "timing": {"sweep": {"points": [{"prompt_tokens": 512, "ttft_s": 0.2, "ttft_s_samples": [0.19, 0.2, 0.3]}]}},
               "claims": [{"figure": "ttft_s", "prompt_tokens": 512, "lane": None, "claimed": 0.1, "high": 0.11, "status": "broken"},
                          {"figure": "ttft_s", "prompt_tokens": None, "lane": "1K", "claimed": 1.0, "high": 1.1, "status": "held"},
                          {"figure": "kv_cache_tokens", "prompt_tokens": None, "lane": None, "claimed": 9.0, "high": None,
                           "status": "held"}]}
    marks = plot_marks(summary)
    assert marks["claims"] == [{"prompt_tokens": 512, "ttft_s": 0.1, "bound": 0.11, "status": "broken"},
                               {"prompt_tokens": 1024, "ttft_s": 1.0, "bound": 1.1, "status": "held"}]
    assert marks["sweep"][0]["ttft_s_samples"] == [0.19, 0.2, 0.3]
    with_marks = plot_ttft([], tmp_path / "a.png", "t", False, **marks).read_bytes()
    without = plot_ttft([], tmp_path / "b.png", "t", False, window_tokens=4096).read_bytes()
    assert with_marks != without


def test_a_claim_whose_module_or_lane_is_not_in_the_run_is_listed_and_no_gate_row():
    from pytest_qualify.gate.claims import NOT_IN_RUN, check_rows

    claims = Claims((claim("ttft_s", 1.571, "at_most", lane="32K", name="lane", required=True),
                     claim("ttft_s", 0.2, "at_most", prompt_tokens=511, name="sweep", required=True),
                     claim(tolerance=0.0)))
    got = evaluate_claims(claims, facts(kv_cache_tokens=150), modules=("smoke", "context"), lanes=("240K",))
    by = {r.name: r for r in got}
    assert by["lane"].status == NOT_IN_RUN and "32K lane is not in this run" in by["lane"].reason
    assert by["sweep"].status == NOT_IN_RUN and "sweep module" in by["sweep"].reason
    assert by["kv_cache_tokens"].status == "held"
    assert [c.title for c in check_rows(got)] == ["Recipe claims: KV cache tokens"]
    # Required or not, a claim the run does not measure leaves nothing unjudged: a stage is not the profile.
    assert all(r.ok for r in got)


def test_the_sweep_table_says_its_ttft_is_at_the_first_chunk():
    from pytest_qualify.evidence.report import sweep_block

    point = {"prompt_tokens": 512, "ttft_s": 0.2, "ttft_s_min": 0.1, "ttft_s_max": 0.3, "samples": 3,
             "prefill_tok_s": 2560.0}
    text = "\n".join(sweep_block({"timing": {"sweep": {"label": "the sweep", "points": [point], "decode": []}}}))
    assert "| Prompt tokens | TTFT at the first chunk (median) | min – max | Samples | Prefill tok/s |" in text


def test_the_plot_axes_say_their_ttft_is_at_the_first_chunk(tmp_path, monkeypatch):
    from pytest_qualify.evidence import plot

    labels: list[str] = []
    monkeypatch.setattr(plot, "_side_label", lambda img, label, *a: labels.append(label))
    load = {"levels": [{"concurrency": 1, "ttft_s_p50": 0.1, "ttft_s_p95": 0.2, "ttft_s_p99": 0.3, "tpot_s_p50": 0.01,
                        "tpot_s_p95": 0.02, "tpot_s_p99": 0.03}]}
    plot.plot_ttft([{"lane": "1K", "prompt_tokens": 1024, "ttft_s": 0.5}], tmp_path / "a.png", "t", False,
                   window_tokens=4096, load=load)
    assert "TTFT at the first chunk, client-observed (s)" in labels and "TTFT, first chunk (ms)" in labels, labels


def test_a_claim_row_is_a_frozen_record_whose_dict_is_the_summarys_claim_row():
    from dataclasses import FrozenInstanceError, fields

    from pytest_qualify.bundle_format.schema import schema
    from pytest_qualify.gate.claims import ClaimRow

    (row,) = rows(claim(tolerance=0.0, said="KV cache: 100 tokens"), kv_cache_tokens=150)
    assert isinstance(row, ClaimRow)
    assert row.as_dict() == {
        "name": "kv_cache_tokens", "title": "Recipe claims: KV cache tokens", "figure": "kv_cache_tokens",
        "unit": "tokens", "direction": "at_least", "claimed": 100.0, "tolerance": 0.0, "required": False,
        "prompt_tokens": None, "lane": None, "said": "KV cache: 100 tokens", "low": 100.0, "high": None,
        "measured": 150.0, "source": "server log", "status": "held", "ok": True,
        "claimed_text": "at least 100 tokens (−0%)", "measured_text": "150 tokens",
        "reason": ("Recipe claims: KV cache tokens: measured 150 tokens (server log) holds the claim of "
                   "at least 100 tokens (−0%)"), "verdict": "PASS"}
    # The fields are summary.json's keys, in its order, then the verdict the gate decided of them:
    # a field the schema does not hold fails here.
    assert [f.name for f in fields(ClaimRow)] == schema()["properties"]["claims"]["items"]["required"]
    with pytest.raises(FrozenInstanceError):
        row.ok = False  # type: ignore[misc]


def test_an_upper_bound_proves_at_most_and_never_at_least():
    """KV tokens computed from blocks on one group's assumption (an old /metrics in attach mode) may
    overstate a hybrid model's pool: a claim of at least N tokens is not verifiable from it, never held."""
    bound = RunFacts(simulated=False, serving_facts={"facts": {"kv_cache_tokens": {
        "value": 900_000, "status": "computed", "source": "/metrics: block size × blocks",
        "note": "one KV group assumed", "upper_bound": True}}})
    at_least = claim("kv_cache_tokens", 412_980, tolerance=0.0)
    (row,) = evaluate_claims(Claims((at_least,)), bound)
    assert row.status == NOT_VERIFIABLE and row.measured is None, row
    assert "upper bound" in row.reason and "900,000" in row.reason
    (within,) = evaluate_claims(Claims((claim("kv_cache_tokens", 900_000, "within", tolerance=0.01),)), bound)
    assert within.status == NOT_VERIFIABLE
    (at_most,) = evaluate_claims(Claims((claim("kv_cache_tokens", 1_000_000, "at_most", tolerance=0.0),)), bound)
    assert at_most.status == "held" and at_most.measured == 900_000


def test_a_figure_the_engine_timed_for_a_held_stream_says_so_in_its_source():
    engine = RunFacts(simulated=False, serving_facts={"facts": {}}, timing={
        "sweep": {"points": [{"prompt_tokens": 511, "samples": 0, "ttft_s": 0.19, "prefill_tok_s": 2689.0,
                              "engine_ttft_s": 0.19, "ttft_source": "engine /metrics"}], "decode": []},
        "lanes": [{"lane": "32K", "ttft_s": {"median": 1.4, "min": 1.4, "max": 1.4, "n": 1},
                   "ttft_source": "engine /metrics"}]})
    got = {r.name: r for r in evaluate_claims(Claims((claim("ttft_s", 0.196, "at_most", prompt_tokens=511, name="p"),
                                                       claim("ttft_s", 1.5, "at_most", lane="32K", name="lane"))),
                                               engine)}
    assert got["p"].measured == 0.19 and got["p"].status == "held"
    assert got["p"].source == ("sweep, the engine's own TTFT (/metrics) over the samples at 511 tokens: each came whole "
                               "in one chunk with its finish, so its first chunk read the parser")
    assert got["lane"].source == "32K lane, median of 1 repetition(s), TTFT from engine /metrics"
    # The client's own figures say so as before.
    client = {r.name: r for r in rows(claim("ttft_s", 0.196, "at_most", prompt_tokens=511, name="p"),
                                      claim("ttft_s", 1.571, "at_most", lane="32K", name="lane"))}
    assert client["p"].source == "sweep, median of 3 warm sample(s) at 511 tokens"
    assert client["lane"].source == "32K lane, median of 3 repetition(s), client-observed"


def test_a_lane_whose_stream_came_whole_bounds_its_ttft_and_shows_only_at_most():
    """A lane answer held by the parser to its finish, with no engine timing to stand in, has a first
    chunk that is its end: the TTFT is at most that, the prefill rate at least. An at-most TTFT claim
    is held or broken on the bound; an at-least or within claim is not measurable here, never held."""
    held = RunFacts(simulated=False, serving_facts={"facts": {}}, timing={"lanes": [
        {"lane": "32K", "ttft_s": {"median": 1.4, "min": 1.3, "max": 1.5, "n": 2},
         "prefill_tok_s": {"median": 23400.0, "min": 21800.0, "max": 25200.0, "n": 2},
         "ttft_source": "client chunks, held",
         "ttft_sources": [{"repetition": 1, "source": "client chunks, held"},
                          {"repetition": 2, "source": "client chunks, held"}]}]})
    got = {r.name: r for r in evaluate_claims(Claims((
        claim("ttft_s", 1.5, "at_most", lane="32K", name="at most"),
        claim("ttft_s", 1.4, "within", lane="32K", name="within"),
        claim("ttft_s", 1.0, "at_least", tolerance=0.0, lane="32K", name="at least"),
        claim("prefill_tok_s", 20000.0, "at_least", lane="32K", name="prefill"),
        claim("prefill_tok_s", 30000.0, "at_most", lane="32K", name="prefill at most"))), held)}
    assert got["at most"].status == "held" and got["at most"].measured == 1.4
    assert got["prefill"].status == "held"
    for name in ("within", "at least", "prefill at most"):
        assert got[name].status == NOT_VERIFIABLE and got[name].measured is None, got[name]
        assert "came whole in one chunk" in got[name].reason and "only a bound" in got[name].reason
    # One repetition timed by the engine and one held: still a bound.
    mixed = RunFacts(simulated=False, serving_facts={"facts": {}}, timing={"lanes": [
        {"lane": "32K", "ttft_s": {"median": 1.4, "min": 1.3, "max": 1.5, "n": 2},
         "ttft_source": "engine /metrics (repetition 1), client chunks, held (repetition 2)",
         "ttft_sources": [{"repetition": 1, "source": "engine /metrics"}, {"repetition": 2, "source": "client chunks, held"}]}]})
    (row,) = evaluate_claims(Claims((claim("ttft_s", 1.4, "within", lane="32K", name="w"),)), mixed)
    assert row.status == NOT_VERIFIABLE
    # The engine's own TTFT for every repetition is a measure, not a bound.
    engine = RunFacts(simulated=False, serving_facts={"facts": {}}, timing={"lanes": [
        {"lane": "32K", "ttft_s": {"median": 1.4, "min": 1.3, "max": 1.5, "n": 2}, "ttft_source": "engine /metrics",
         "ttft_sources": [{"repetition": 1, "source": "engine /metrics"}, {"repetition": 2, "source": "engine /metrics"}]}]})
    (row,) = evaluate_claims(Claims((claim("ttft_s", 1.4, "within", lane="32K", name="w"),)), engine)
    assert row.status == "held" and row.measured == 1.4
