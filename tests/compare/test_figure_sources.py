"""A figure's source across boots (compare/figures.py ``Figure.source``, compare/comparison.py): a
context lane's or a sweep point's TTFT is the client's first chunk, or the engine's own ``/metrics``
TTFT where the stream came whole with its finish (the summary's ``ttft_sources``, each repetition
with its source). Boots that agree compare it as before, the row naming the source; boots that took
it from different sources, in either arm, any boot, leave it out with the sources and the boots that
had each, and a gating figure left out so is never shown not worse. A summary of an earlier release
names the sources only in its rendered ``ttft_source`` text, and is read from that."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_qualify.compare.boots import ArmBoots, Boot
from pytest_qualify.compare.comparison import compare_arms, last_line
from pytest_qualify.compare.figures import earlier_figure_source, figure_source, figures_of
from pytest_qualify.compare.render import render_html, render_md, validate
from pytest_qualify.evidence.summary import lanes_section

# Each boot's jitter: a spread small against the 5% tolerance, so an unchanged B is shown not worse.
JITTER = (1.0, 1.002, 0.998)
ENGINE, CLIENT = "engine /metrics", "client chunks"


def _spread(value: float) -> dict:
    return {"median": value, "n": 1}


def _sourced(sources: str | tuple[str, ...] | None, earlier: bool) -> dict:
    """A lane's or a sweep point's TTFT sources, repetition 1, 2, ... taking ``sources`` in turn:
    as this release writes them for compare to read (``ttft_sources``; the rendered text beside them
    is report.md's and left out here, so only the structured field can decide), or, ``earlier``, as
    an earlier release wrote them (the rendered text alone). None: a summary from before sources
    were named (neither)."""
    if sources is None:
        return {}
    sources = (sources,) if isinstance(sources, str) else sources
    if earlier:
        return {"ttft_source": sources[0] if len(set(sources)) == 1 else ", ".join(
            f"{s} (repetition {rep})" for rep, s in enumerate(sources, 1))}
    return {"ttft_sources": [{"repetition": rep, "source": s} for rep, s in enumerate(sources, 1)]}


def _summary(run_id: str, factor: float, *, lane_source: str | tuple[str, ...] | None = CLIENT,
             sweep_source: str | None = CLIENT, speed: float = 1.0, earlier: bool = False) -> dict:
    """One finished boot's summary: a 32K lane, one load level and one sweep point, at ``factor``
    (jitter) times the base figures and ``speed`` times as fast on output throughput; the TTFT
    sources as :func:`_sourced` writes them."""
    level = {"concurrency": 1, "repetitions": 1, "requests": 10, "failed": 0, "batch_variance": 0, "probes": 8,
             "probes_whole": 0, "tpot_s_p50": 0.004 * factor, "ttft_s_p50": 0.01 * factor,
             "output_tok_s": 250.0 * speed / factor}
    point = {"prompt_tokens": 2048, "samples": 5, "ttft_s": 0.2 * factor, "prefill_tok_s": 2048 / (0.2 * factor),
             "engine_ttft_s": 0.19 * factor, **_sourced(sweep_source, earlier)}
    lane = {"lane": "32K", "ttft_s": _spread(1.5 * factor), "e2e_s": _spread(2.0 * factor),
            "prefill_tok_s": _spread(20000.0 / factor), **_sourced(lane_source, earlier)}
    return {"run": {"id": run_id}, "verdict": {"result": "PASS"}, "items": [],
            "timing": {"lanes": [lane], "load": {"label": "x", "probe_tokens": 256, "levels": [level]},
                       "sweep": {"label": "x", "points": [point], "decode": []}}}


def arm(name: str, sources: tuple[str | tuple[str, ...] | None, ...], **kw) -> ArmBoots:
    """Three boots of arm ``name``, boot i's lane TTFT taken from ``sources[i]`` (a tuple: one a
    repetition)."""
    return ArmBoots(name, [Boot(Path(f"{name.lower()}{i}"), _summary(f"{name}{i}", f, lane_source=s, **kw))
                           for i, (f, s) in enumerate(zip(JITTER, sources), 1)])


def decide(a: ArmBoots, b: ArmBoots, gates: tuple[str, ...]) -> dict:
    c = compare_arms(a, b, workload={}, tolerance_pct=5.0, gate_patterns=gates)
    validate(c)
    return c


def test_boots_that_agree_on_the_source_compare_the_figure_and_its_row_names_the_source():
    c = decide(arm("A", (ENGINE,) * 3), arm("B", (ENGINE,) * 3), ("lane.32K.ttft_s", "load.c1.output_tok_s"))
    rows = {f["id"]: f for f in c["figures"]}
    assert c["result"] == "B NOT WORSE" and c["exit_code"] == 0
    assert c["figures_left_out"] == [] and c["figures_left_out_reasons"] == {} and c["decision"]["left_out"] == []
    # The TTFT and the prefill rate taken from it carry the source; the end to end time and the load
    # module's figures name none.
    assert rows["lane.32K.ttft_s"]["source"] == ENGINE and rows["lane.32K.prefill_tok_s"]["source"] == ENGINE
    assert rows["lane.32K.ttft_s"]["decision"] == "not worse" and rows["lane.32K.ttft_s"]["gating"]
    assert rows["lane.32K.e2e_s"]["source"] is None and rows["load.c1.output_tok_s"]["source"] is None
    assert rows["sweep.p2048.ttft_s"]["source"] == CLIENT and rows["sweep.p2048.engine_ttft_s"]["source"] is None
    assert "(`lane.32K.ttft_s`; engine /metrics)" in render_md(c) and "Not compared" not in render_md(c)


@pytest.mark.parametrize("gates", [("lane.32K.ttft_s", "load.c1.output_tok_s"), ()], ids=["named", "every figure"])
def test_a_gating_figure_whose_boots_took_it_from_different_sources_is_left_out_and_never_not_worse(gates):
    c = decide(arm("A", (ENGINE,) * 3), arm("B", (CLIENT,) * 3), gates)
    rows = {f["id"]: f for f in c["figures"]}
    assert "lane.32K.ttft_s" not in rows and "lane.32K.prefill_tok_s" not in rows
    assert {"lane.32K.ttft_s", "lane.32K.prefill_tok_s"} <= set(c["figures_left_out"])
    why = c["figures_left_out_reasons"]["lane.32K.ttft_s"]
    assert why == ("not compared: its boots measured it from different sources (engine /metrics: A a1, A a2, A a3; "
                   "client chunks: B b1, B b2, B b3), two measurements under one id")
    # Every other gating figure is shown not worse: the one left out alone keeps it from B NOT WORSE.
    assert all(rows[f]["decision"] == "not worse" for f in c["decision"]["not_worse"])
    assert c["result"] == "UNDECIDED" and c["exit_code"] == 2
    assert "lane.32K.ttft_s" in c["decision"]["left_out"] and c["summary"]["gating_left_out"] >= 1
    assert f"gating figure lane.32K.ttft_s {why}: no number of boots decides it, boots that take it from one " \
           "source would" in c["reasons"]
    assert "gating figure(s) not compared: their boots took them from different sources" in last_line(c, "out")
    assert f"- `lane.32K.ttft_s`: {why}" in render_md(c) and "two measurements under one id" in render_html(c)


def test_a_gating_figure_left_out_by_its_sources_leaves_b_worse_where_another_gate_is_worse():
    c = decide(arm("A", (ENGINE,) * 3), arm("B", (CLIENT,) * 3, speed=0.8), ("lane.32K.ttft_s", "load.c1.output_tok_s"))
    assert c["result"] == "B WORSE" and c["decision"]["worse"] == ["load.c1.output_tok_s"]
    assert c["decision"]["left_out"] == ["lane.32K.ttft_s"]


def test_a_non_gating_figure_from_different_sources_is_left_out_and_the_decision_stands():
    gates = ("load.c1.output_tok_s",)
    agree = decide(arm("A", (CLIENT,) * 3), arm("B", (CLIENT,) * 3), gates)
    # One boot of B whose held stream took the engine's TTFT: any boot is enough.
    differ = decide(arm("A", (CLIENT,) * 3), arm("B", (CLIENT, ENGINE, CLIENT)), gates)
    assert differ["result"] == agree["result"] == "B NOT WORSE" and differ["exit_code"] == 0
    assert differ["decision"]["left_out"] == [] and differ["summary"]["gating_left_out"] == 0
    assert differ["figures_left_out"] == ["lane.32K.prefill_tok_s", "lane.32K.ttft_s"]
    assert differ["figures_left_out_reasons"]["lane.32K.ttft_s"] == (
        "not compared: its boots measured it from different sources (client chunks: A a1, A a2, A a3, B b1, B b3; "
        "engine /metrics: B b2), two measurements under one id")
    assert not any("lane.32K.ttft_s" in r for r in differ["reasons"])
    # The gating row is untouched; every other row keeps its call, its values and its interval, in a
    # family of figures two smaller (the TTFT and the prefill rate from it are not tested).
    before = {f["id"]: f for f in agree["figures"]}
    assert {f["id"] for f in differ["figures"]} == set(before) - set(differ["figures_left_out"])
    for f in differ["figures"]:
        was = before[f["id"]]
        if f["gating"]:
            assert f == was
        else:
            kept = ("call", "a", "b", "interval_pct")
            assert [f[k] for k in kept] == [was[k] for k in kept]
            assert f["family_size"] == was["family_size"] - 2


def test_a_sweep_point_that_names_no_source_took_the_clients_chunks():
    """A summary written before sources were named: a sweep point's TTFT was its samples' first chunks."""
    old = figures_of(_summary("A1", 1.0, sweep_source=None))
    assert old["sweep.p2048.ttft_s"].source == old["sweep.p2048.prefill_tok_s"].source == CLIENT
    a = ArmBoots("A", [Boot(Path(f"a{i}"), _summary(f"A{i}", f, sweep_source=None)) for i, f in enumerate(JITTER, 1)])
    b = ArmBoots("B", [Boot(Path(f"b{i}"), _summary(f"B{i}", f, sweep_source=ENGINE)) for i, f in enumerate(JITTER, 1)])
    c = decide(a, b, ("load.c1.output_tok_s",))
    assert "sweep.p2048.ttft_s" in c["figures_left_out"] and "sweep.p2048.engine_ttft_s" not in c["figures_left_out"]
    assert "(client chunks: A a1, A a2, A a3; engine /metrics: B b1, B b2, B b3)" in \
        c["figures_left_out_reasons"]["sweep.p2048.ttft_s"]


def test_a_lane_that_names_no_source_differs_from_one_that_names_one():
    """A lane's TTFT before sources were named was the client's first chunk, held or not: unknown."""
    c = decide(arm("A", (None,) * 3), arm("B", (CLIENT,) * 3), ("load.c1.output_tok_s",))
    assert "(no source named: A a1, A a2, A a3; client chunks: B b1, B b2, B b3)" in \
        c["figures_left_out_reasons"]["lane.32K.ttft_s"]
    same = decide(arm("A", (None,) * 3), arm("B", (None,) * 3), ("lane.32K.ttft_s",))
    assert same["figures_left_out"] == [] and {f["id"]: f for f in same["figures"]}["lane.32K.ttft_s"]["source"] is None


@pytest.mark.parametrize("taken,source", [
    ([{"repetition": 1, "source": CLIENT}], CLIENT),
    ([{"repetition": 1, "source": "client chunks, held"}], "client chunks, held"),
    ([{"repetition": 1, "source": ENGINE}, {"repetition": 2, "source": CLIENT}, {"repetition": 3, "source": ENGINE}],
     "client chunks + engine /metrics"),
    ([{"repetition": 1, "source": "client chunks, held"}, {"repetition": 2, "source": CLIENT}],
     "client chunks + client chunks, held"),
    ([], None),
])
def test_a_lanes_source_is_the_set_of_its_repetitions_sources(taken, source):
    # The rendered text beside it says otherwise: compare reads the structured field alone.
    assert figure_source({"ttft_sources": taken, "ttft_source": "engine /metrics (repetition 9)"}) == source


def test_a_lanes_sources_as_the_summary_writes_them_are_what_compare_reads():
    """From the lane items through ``evidence.summary.lanes_section`` to ``figures_of``: a lane of the
    client's chunks alone, and one whose repetitions mixed the client's chunks and the engine's TTFT."""
    def item(rep: int, source: str) -> dict:
        return {"module": "context", "lane": "32K", "repetition": rep, "outcome": "passed", "item": "test_lane",
                "properties": {"ttft_s": 1.5, "e2e_s": 2.0, "prefill_tok_s": 20000.0, "ttft_source": source}}

    (client,) = lanes_section([item(1, CLIENT), item(2, CLIENT)], ["32K"])
    (mixed,) = lanes_section([item(1, CLIENT), item(2, ENGINE)], ["32K"])
    assert figures_of({"timing": {"lanes": [client]}})["lane.32K.ttft_s"].source == CLIENT
    assert figures_of({"timing": {"lanes": [mixed]}})["lane.32K.prefill_tok_s"].source == f"{CLIENT} + {ENGINE}"


def test_a_boot_whose_lane_mixed_sources_is_left_out_beside_boots_of_one():
    """One boot of B whose lane took repetition 2's TTFT from the engine: a median of two sources is
    a third measurement, not the client's chunks of the other boots."""
    c = decide(arm("A", (CLIENT,) * 3), arm("B", (CLIENT, (CLIENT, ENGINE), CLIENT)), ("load.c1.output_tok_s",))
    assert c["result"] == "B NOT WORSE" and c["figures_left_out"] == ["lane.32K.prefill_tok_s", "lane.32K.ttft_s"]
    assert c["figures_left_out_reasons"]["lane.32K.ttft_s"] == (
        "not compared: its boots measured it from different sources (client chunks: A a1, A a2, A a3, B b1, B b3; "
        "client chunks + engine /metrics: B b2), two measurements under one id")


# -- summaries of earlier releases: the rendered text alone -----------------------------------------


@pytest.mark.parametrize("named,source", [
    ("client chunks", "client chunks"),
    ("client chunks, held", "client chunks, held"),
    ("engine /metrics (repetitions 1, 3), client chunks (repetition 2)", "client chunks + engine /metrics"),
    ("client chunks, held (repetition 1), client chunks (repetition 2)", "client chunks + client chunks, held"),
    (None, None), ("", None),
])
def test_an_earlier_releases_source_is_the_set_its_text_names_whatever_the_repetitions(named, source):
    assert earlier_figure_source(named) == source
    assert figure_source({"ttft_source": named}) == source  # no ttft_sources: the text is read


def test_boots_of_an_earlier_release_are_read_from_their_text_and_left_out_where_they_differ():
    a = arm("A", (ENGINE,) * 3, earlier=True)
    assert all("ttft_sources" not in boot.summary["timing"]["lanes"][0] for boot in a.boots)  # type: ignore[attr-defined]
    c = decide(a, arm("B", (CLIENT, (CLIENT, ENGINE), CLIENT), earlier=True), ("load.c1.output_tok_s",))
    assert c["figures_left_out_reasons"]["lane.32K.ttft_s"] == (
        "not compared: its boots measured it from different sources (engine /metrics: A a1, A a2, A a3; "
        "client chunks: B b1, B b3; client chunks + engine /metrics: B b2), two measurements under one id")
    same = decide(arm("A", (ENGINE,) * 3, earlier=True), arm("B", (ENGINE,) * 3), ("lane.32K.ttft_s",))
    assert same["result"] == "B NOT WORSE" and same["figures_left_out"] == []
    assert {f["id"]: f for f in same["figures"]}["lane.32K.ttft_s"]["source"] == ENGINE


def test_the_h100_boots_of_an_earlier_release_name_no_lane_source_and_their_sweep_the_clients_chunks():
    """``data/h100-eager-ab-2026-12-06.json``: boots written before either field; read through the
    fallback, a lane names no source and a sweep point's TTFT is its samples' first chunks. The same
    lane with the earlier release's text is read from the text."""
    boot = json.loads((Path(__file__).parent / "data" / "h100-eager-ab-2026-12-06.json").read_text())["boots"]["A1"]
    lane, point = boot["timing"]["lanes"][0], boot["timing"]["sweep"]["points"][0]
    assert not {"ttft_source", "ttft_sources"} & (set(lane) | set(point))
    figures = figures_of({"timing": boot["timing"]})
    assert figures["lane.32K.ttft_s"].source is None and figures["lane.32K.e2e_s"].source is None
    lane["ttft_source"] = "client chunks, held (repetition 1), engine /metrics (repetition 2)"
    # Every sample of this boot came whole (no TTFT): as a boot whose samples streamed would hold it.
    point["ttft_s"], point["prefill_tok_s"] = 0.2, point["prompt_tokens"] / 0.2
    assert figures_of({"timing": boot["timing"]})["lane.32K.ttft_s"].source == "client chunks, held + engine /metrics"
    assert figures_of({"timing": boot["timing"]})[f"sweep.p{point['prompt_tokens']}.ttft_s"].source == CLIENT


def test_a_figure_missing_from_a_boot_names_the_boot():
    a = arm("A", (CLIENT,) * 3)
    b = arm("B", (CLIENT,) * 3)
    del b.boots[1].summary["timing"]["sweep"]  # type: ignore[attr-defined]
    c = decide(a, b, ("load.c1.output_tok_s",))
    assert c["figures_left_out_reasons"]["sweep.p2048.ttft_s"] == \
        "not compared: missing from B b2 (a module that did not reach it)"
