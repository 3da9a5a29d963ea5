"""A figure computed from a stream's chunks, where the content came whole with its finish (a parser
held it): a context lane's TTFT and a sweep point's TTFT take the engine's own timing where /metrics
has it for the request, and say where the figure came from (``ttft_sources``, each repetition with
its source, and ``ttft_source``, the same rendered for report.md); without it, the lane's figure says
it read the parser."""

from __future__ import annotations

import pytest

from pytest_qualify.bundle_format.schema import SummaryError, schema, validate
from pytest_qualify.evidence.metrics import TimingSource, delta, held_stream, lane_timing, parse
from pytest_qualify.evidence.summary import lanes_section, sweep_section
from pytest_qualify.gate import decide as gate
from pytest_qualify.graders.answer_checks import INCREMENTAL_MIN_TOKENS
from pytest_qualify.profiles import load_profile, module_registry

from ..judging import judge, summary_of


CLIENT, ENGINE, HELD = (str(s) for s in (TimingSource.CLIENT, TimingSource.ENGINE, TimingSource.CLIENT_HELD))


def _scrapes(requests: int, ttft_sum_s: float):
    before = parse("vllm:time_to_first_token_seconds_count 0\nvllm:time_to_first_token_seconds_sum 0\n")
    after = parse(f"vllm:time_to_first_token_seconds_count {requests}\nvllm:time_to_first_token_seconds_sum {ttft_sum_s}\n")
    return delta(before, after)


def _timed(**over) -> dict:
    props = {"timing_source": "streamed", "ttft_s": 0.9, "e2e_s": 0.91, "prompt_tokens": 1000, "completion_tokens": 32,
             "whole_at_finish": True, "requests": 1}
    props.update(over)
    return props


def test_a_held_lanes_ttft_is_the_engines_for_its_one_request():
    got = lane_timing(_scrapes(1, 0.25), _timed())
    assert got == {"ttft_s": 0.25, "client_ttft_s": 0.9, "ttft_source": "engine /metrics", "prefill_tok_s": 4000.0}


@pytest.mark.parametrize("d,timed,source", [
    # streamed as decoded, or too short to tell (the one rule the sweep and load leave samples out by)
    ((1, 0.25), _timed(whole_at_finish=False), TimingSource.CLIENT),
    ((1, 0.25), _timed(completion_tokens=INCREMENTAL_MIN_TOKENS - 1), TimingSource.CLIENT),
    # held, and the engine's TTFT is not the request's alone: the client's, said to have read the parser
    ((2, 0.5), _timed(), TimingSource.CLIENT_HELD),
    ((2, 0.5), _timed(requests=2), TimingSource.CLIENT_HELD),
    ((0, 0.0), _timed(), TimingSource.CLIENT_HELD),
])
def test_otherwise_the_lane_keeps_the_clients_ttft_and_says_what_it_read(d, timed, source):
    assert lane_timing(_scrapes(*d), timed) == {"ttft_source": str(source)}


def test_no_streamed_timing_is_left_alone():
    assert lane_timing(_scrapes(1, 0.25), _timed(timing_source="non-streamed")) == {}
    assert lane_timing(_scrapes(1, 0.25), {"requests": 1}) == {}


def test_held_is_the_whole_answer_in_one_chunk_with_its_finish():
    assert held_stream({"whole_at_finish": True, "completion_tokens": INCREMENTAL_MIN_TOKENS})
    assert held_stream({"whole_at_finish": "true", "completion_tokens": 64})  # as a JUnit property reads
    assert not held_stream({"whole_at_finish": False, "completion_tokens": 64})
    assert not held_stream({"whole_at_finish": True, "completion_tokens": None})


def _lane_item(rep: int, **props) -> dict:
    return {"module": "context", "lane": "32K", "repetition": rep, "outcome": "passed", "item": "test_context_retrieval",
            "properties": {"metrics_attribution": "exclusive", **props}}


def test_a_lane_names_each_source_and_keeps_the_clients_first_chunk_beside():
    items = [
        _lane_item(1, ttft_s=1.5, server_ttft_s=1.4, prompt_tokens=32_000, ttft_source="client chunks"),
        _lane_item(2, ttft_s=1.45, client_ttft_s=2.9, server_ttft_s=1.45, prompt_tokens=32_000,
                   ttft_source="engine /metrics"),
        _lane_item(3, ttft_s=1.5, client_ttft_s=3.0, server_ttft_s=1.5, prompt_tokens=32_000,
                   ttft_source="engine /metrics"),
    ]
    (lane,) = lanes_section(items, ["32K"])
    assert lane["ttft_s"]["median"] == 1.5 and lane["client_ttft_s"]["median"] == 2.9
    assert lane["ttft_source"] == "client chunks (repetition 1), engine /metrics (repetitions 2, 3)"
    assert lane["ttft_sources"] == [{"repetition": 1, "source": "client chunks"},
                                    {"repetition": 2, "source": "engine /metrics"},
                                    {"repetition": 3, "source": "engine /metrics"}]
    assert lane["ttft_source_note"].startswith("engine /metrics: the engine's own TTFT (vllm:time_to_first_token_seconds")
    # The client / server ratio is the client's first chunk over the engine's TTFT: what the hold cost.
    assert lane["ttft_client_server_ratio"]["median"] == 2.0
    (plain,) = lanes_section([_lane_item(1, ttft_s=1.5, ttft_source="client chunks")], ["32K"])
    assert plain["ttft_source"] == "client chunks" and plain["ttft_source_note"] is None
    (held,) = lanes_section([_lane_item(1, ttft_s=1.5, ttft_source="client chunks, held")], ["32K"])
    assert "it read the parser that held the content" in held["ttft_source_note"]
    (earlier,) = lanes_section([_lane_item(1, ttft_s=1.5)], ["32K"])  # an item from before the source was recorded
    assert earlier["ttft_source"] is None and earlier["ttft_s"] == earlier["client_ttft_s"]
    assert earlier["ttft_sources"] == []


def _sweep_item(samples: str, engine: float | None, rep: int = 1) -> dict:
    props = {"sweep_prompt_tokens": 512, "sweep_ttft_s_samples": samples, "sweep_measured_prompt_tokens": 512}
    if engine is not None:
        props["sweep_engine_ttft_s"] = engine
    return {"module": "sweep", "item": "test_ttft_sweep", "repetition": rep, "outcome": "passed", "properties": props}


def test_a_sweep_point_whose_samples_all_came_whole_takes_the_engines_ttft():
    (point,) = sweep_section([_sweep_item("", 0.128)])["points"]
    assert point["samples"] == 0 and point["ttft_s"] == point["engine_ttft_s"] == 0.128
    assert point["prefill_tok_s"] == 4000.0 and point["ttft_source"] == "engine /metrics"
    assert point["ttft_sources"] == [{"repetition": 1, "source": "engine /metrics"}]
    (timed,) = sweep_section([_sweep_item("0.2,0.3", 0.128)])["points"]
    assert timed["ttft_s"] == 0.25 and timed["ttft_source"] == "client chunks"
    assert timed["ttft_sources"] == [{"repetition": 1, "source": "client chunks"}]
    (none,) = sweep_section([_sweep_item("", None)])["points"]
    assert none["ttft_s"] is None and none["prefill_tok_s"] is None and none["ttft_source"] is None
    assert none["ttft_sources"] == []


def test_a_sweep_points_sources_are_the_repetitions_its_figure_was_taken_from():
    """A repetition whose samples all came whole is in no median of the others' first chunks: the
    point names the repetitions that timed it, not every one that ran."""
    (point,) = sweep_section([_sweep_item("0.2", 0.128, 2), _sweep_item("", 0.13, 1), _sweep_item("0.3", None, 3)])[
        "points"]
    assert point["ttft_s"] == 0.25 and point["ttft_source"] == "client chunks"
    assert point["ttft_sources"] == [{"repetition": 2, "source": "client chunks"},
                                     {"repetition": 3, "source": "client chunks"}]
    (engine,) = sweep_section([_sweep_item("", 0.128, 2), _sweep_item("", None, 1)])["points"]
    assert engine["ttft_sources"] == [{"repetition": 2, "source": "engine /metrics"}]


def _summary(lanes: dict[str, tuple[str, ...]], sweep: tuple[tuple[str, float | None], ...]) -> dict:
    """A whole summary.json from item results: each lane's repetitions with their TTFT sources, and
    the sweep's repetitions at 512 prompt tokens (samples, the engine's TTFT)."""
    results = []
    for lane, sources in lanes.items():
        for rep, source in enumerate(sources, 1):
            r = gate.ItemResult(f"suites/test_context.py::test_lane[rep{rep}of{len(sources)}-{lane}]", "context",
                                f"test_lane[{lane}]", rep, len(sources), lane)
            r.properties.update({"qualify_module": "context", "ttft_s": 0.25, "e2e_s": 0.5, "prompt_tokens": 1024,
                                 "ttft_source": source})
            r.record("call", "passed", "")
            results.append(r)
    for rep, (samples, engine) in enumerate(sweep, 1):
        r = gate.ItemResult(f"suites/test_sweep.py::test_ttft_sweep[rep{rep}of{len(sweep)}-512]", "sweep",
                            "test_ttft_sweep[512]", rep, len(sweep))
        r.properties.update({"qualify_module": "sweep", **_sweep_item(samples, engine)["properties"]})
        r.record("call", "passed", "")
        results.append(r)
    summary = summary_of(
        run={"id": "run-1", "started_at": "2026-01-01T00:00:00+00:00", "finished_at": "2026-01-01T00:01:00+00:00",
             "duration_s": 60.0, "repeat": 3, "workers": 0, "tool_version": "0.1.0"},
        target={"mode": "reference", "simulated": True, "base_url": None, "launch_command": None,
                "engine_version": "x", "models": [], "startup_error": None, "died": None},
        profile=load_profile("small"), verdict=judge(results, module_registry(), ("context",)), results=results,
        cases={}, snapshots={}, metrics_errors={}, metrics_files=[], artifacts={"plot": None, "notes": []})
    validate(summary)
    return summary


def test_the_summary_carries_each_repetitions_source_beside_the_text_and_validates():
    summary = _summary({"1K": (CLIENT, CLIENT, CLIENT), "32K": (CLIENT, ENGINE, HELD)},
                       (("0.2,0.3", 0.128), ("", 0.13), ("0.25", None)))
    lanes = {lane["lane"]: lane for lane in summary["timing"]["lanes"]}
    assert lanes["1K"]["ttft_source"] == CLIENT
    assert lanes["1K"]["ttft_sources"] == [{"repetition": rep, "source": CLIENT} for rep in (1, 2, 3)]
    assert lanes["32K"]["ttft_source"] == ("client chunks (repetition 1), engine /metrics (repetition 2), "
                                           "client chunks, held (repetition 3)")
    assert lanes["32K"]["ttft_sources"] == [{"repetition": 1, "source": CLIENT}, {"repetition": 2, "source": ENGINE},
                                            {"repetition": 3, "source": HELD}]
    (point,) = summary["timing"]["sweep"]["points"]
    assert point["ttft_sources"] == [{"repetition": 1, "source": CLIENT}, {"repetition": 3, "source": CLIENT}]


def test_the_schema_names_every_timing_source_and_refuses_any_other():
    ttft_sources = schema()["$defs"]["ttft_sources"]
    assert ttft_sources["items"]["properties"]["source"]["enum"] == [str(s) for s in TimingSource]
    summary = _summary({"32K": (CLIENT,)}, (("0.2", None),))
    summary["timing"]["lanes"][0]["ttft_sources"][0]["source"] = "client chunk"
    with pytest.raises(SummaryError, match=r"timing\.lanes\.0\.ttft_sources\.0\.source"):
        validate(summary)
    summary["timing"]["lanes"][0]["ttft_sources"] = [{"repetition": 1}]
    with pytest.raises(SummaryError, match="'source' is a required property"):
        validate(summary)
    del summary["timing"]["lanes"][0]["ttft_sources"]  # a summary of an earlier release
    validate(summary)


def test_the_report_says_where_a_held_figure_came_from():
    from pytest_qualify.evidence.report import sweep_block

    (point,) = sweep_section([_sweep_item("", 0.128)])["points"]
    text = "\n".join(sweep_block({"timing": {"sweep": {"label": "the sweep", "points": [point], "decode": []}}}))
    assert "(engine /metrics: every sample came whole, its first chunk read the parser)" in text


def test_the_report_names_a_lanes_ttft_source_where_it_is_not_the_client_alone():
    from pytest_qualify.evidence.report import lane_ttft_sources

    items = [_lane_item(1, ttft_s=1.5, ttft_source="client chunks"),
             _lane_item(2, ttft_s=1.4, client_ttft_s=2.9, server_ttft_s=1.4, ttft_source="engine /metrics")]
    lanes = lanes_section(items, ["32K"]) + lanes_section([{**_lane_item(1, ttft_s=1.0, ttft_source="client chunks"),
                                                            "lane": "1K"}], ["1K"])
    assert lane_ttft_sources(lanes) == [
        "32K lane: TTFT from client chunks (repetition 1), engine /metrics (repetition 2); engine /metrics: the "
        "engine's own TTFT (vllm:time_to_first_token_seconds read around the request), since the whole answer came in "
        "one chunk with its finish: the client's chunks read the parser that held the content"]
