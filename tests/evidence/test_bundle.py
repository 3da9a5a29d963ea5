"""The evidence writers on a synthetic run: summary (schema-validated), report.md, junit.xml,
the plot, redaction and SHA256SUMS."""

from __future__ import annotations

import builtins
import copy
import json
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from pytest_qualify.gate import decide as gate
from pytest_qualify.bundle_format.manifest import verify_manifest
from pytest_qualify.evidence import bundle, junit, report
from pytest_qualify.evidence.metrics import parse
from pytest_qualify.evidence.session import CaseRecord
from pytest_qualify.bundle_format.schema import SummaryError, validate
from pytest_qualify.gate.waivers import Waiver, WaiverSet
from pytest_qualify.profiles import load_profile, module_registry
from pytest_qualify.redaction import redact_command
from pytest_qualify.client.timing import Timeline, merge_answer_properties, request_metrics
from ..judging import judge, summary_of

SECRET = "sk-test-very-secret-0123456789"


def lane_item(lane: str, rep: int, ttft: float, e2e: float, prompt: int, hits: int = 0) -> gate.ItemResult:
    r = gate.ItemResult(f"suites/test_context.py::test_lane[rep{rep}of3-{lane}]", "context",
                        f"test_lane[{lane}]", rep, 3, lane)
    tl = Timeline(t0=0.0, clock=lambda: 0.0)
    tl.chunk(True, False, at_s=ttft)
    tl.chunk(True, True, at_s=ttft + 0.01)
    tl.finish(at_s=e2e)
    props: list = [("qualify_module", "context"), ("lane", lane)]
    merge_answer_properties(props, request_metrics(tl, prompt, 9), streamed=True, cached_tokens=0)
    props += [("server_ttft_s", ttft * 0.9), ("server_requests", 1), ("prefix_cache_hit_tokens", hits),
              ("metrics_attribution", "exclusive")]
    r.properties.update(props)
    return r


@pytest.fixture
def run():
    profile = load_profile("small")
    results = []
    for rep in (1, 2, 3):
        results.append(lane_item("1K", rep, 0.10 * rep, 0.30 * rep, 1024))
        results.append(lane_item("2K", rep, 0.20 * rep, 0.50 * rep, 2048, hits=16 if rep == 2 else 0))
        ok = gate.ItemResult(f"suites/test_smoke.py::test_health[rep{rep}of3]", "smoke", "test_health", rep, 3)
        ok.properties.update({"qualify_module": "smoke"})
        results.append(ok)
    bad = gate.ItemResult("suites/test_multimodal.py::test_image[rep2of3-img07]", "multimodal", "test_image[img07]", 2, 3)
    bad.record("call", "failed", "img07: answer lacks required word 'violet'\x07")
    hard = gate.ItemResult("suites/test_smoke.py::test_identity[rep1of3]", "smoke", "test_identity", 1, 3)
    hard.record("call", "failed", "GET /v1/models: root 'x' is not 'pytest-qualify/small-chat'")
    results += [bad, hard]
    waivers = WaiverSet((Waiver("test_image[img07]", "caption ambiguity, ticket MM-12", __import__("datetime").date(2099, 1, 1), 1),
                         Waiver("test_gone[*]", "renamed", __import__("datetime").date(2099, 1, 1), 2)),
                        profile.waivable_modules, "waivers.toml")
    verdict = judge(results, module_registry(), ("smoke", "context", "multimodal"), waivers=waivers)
    cases = {r.nodeid: CaseRecord(r.nodeid, 0.5, "call" if not r.passed else "", f"E   {r.reason}\n{SECRET}")
             for r in results}
    start = parse("vllm:time_to_first_token_seconds_count 0\nvllm:time_to_first_token_seconds_sum 0\n")
    end = parse("vllm:time_to_first_token_seconds_count 6\nvllm:time_to_first_token_seconds_sum 1.2\n"
                "vllm:prefix_cache_hits_total 16\n")
    summary = summary_of(
        run={"id": "20260101T000000Z-abcdef", "started_at": "2026-01-01T00:00:00+00:00",
             "finished_at": "2026-01-01T00:01:00+00:00", "duration_s": 60.0, "repeat": 3, "workers": 0,
             "tool_version": "0.1.0"},
        target={"mode": "reference", "simulated": True, "base_url": "http://127.0.0.1:1",
                "launch_command": redact_command(f"python -m x --api-key {SECRET} --port 1"),
                "engine_version": "0.1.0-reference", "models": [{"id": "small-chat-4k", "root": "m", "max_model_len": 4096}],
                "startup_error": None, "died": None},
        profile=profile, verdict=verdict, results=results, cases=cases,
        snapshots={"start": start, "end": end}, metrics_errors={}, metrics_files=["metrics-end.prom", "metrics-start.prom"],
        artifacts={"plot": None, "notes": []},
    )
    return summary, cases, verdict


def test_summary_validates_and_carries_the_run(run):
    summary, _, verdict = run
    validate(summary)
    assert summary["verdict"]["result"] == "FAIL"
    assert [f["item"] for f in summary["verdict"]["failures"]] == ["test_identity"]
    assert [w["item"] for w in summary["verdict"]["waived"]] == ["test_image[img07]"]
    lanes = {lane["lane"]: lane for lane in summary["timing"]["lanes"]}
    assert list(lanes) == ["1K", "2K"]  # the profile's lane order
    assert lanes["1K"]["ttft_s"] == {"median": pytest.approx(0.2), "min": pytest.approx(0.1), "max": pytest.approx(0.3), "n": 3}
    assert lanes["1K"]["ttft_client_server_ratio"]["median"] == pytest.approx(1 / 0.9)
    assert lanes["2K"]["prefix_cache_hit_tokens"] == 16
    assert lanes["2K"]["flags"] == ["2K lane, repetition 2: the server counted 16 prefix-cache hit tokens during the lane"]
    assert summary["timing"]["decode_tok_s"]["n"] == 6
    assert summary["server_metrics"]["run"]["ttft_mean_s"] == pytest.approx(0.2)
    statuses = {w["item"]: w["status"] for w in summary["waivers"]["waivers"]}
    assert statuses == {"test_image[img07]": "applied", "test_gone[*]": "stale"}


@pytest.mark.parametrize("mutate, field", [
    (lambda s: s.update(schema_version=3), "schema_version"),
    (lambda s: s["verdict"].update(result="PASS"), "verdict"),
    (lambda s: s.pop("timing"), "(top level)"),
    (lambda s: s["timing"]["lanes"][0].update(ttft_s={"median": 1.0}), "timing.lanes.0.ttft_s"),
    (lambda s: s["items"][0].update(outcome="maybe"), "items.0.outcome"),
    # The item fields whose definitions validate inlined (bundle_format.schema.inline_leaf_refs).
    (lambda s: s["items"][0]["properties"].update(figure=[1, 2]), "items.0.properties.figure"),
    (lambda s: s["items"][0].update(duration_s="fast"), "items.0.duration_s"),
])
def test_schema_rejects_broken_summaries(run, mutate, field):
    summary = copy.deepcopy(run[0])
    mutate(summary)
    with pytest.raises(SummaryError, match=field.replace(".", r"\.").replace("(", r"\(").replace(")", r"\)")):
        validate(summary)


def test_a_pass_with_failures_is_impossible_in_the_schema(run):
    summary = copy.deepcopy(run[0])
    summary["verdict"]["result"] = "PASS"
    summary["verdict"]["reasons"] = []
    with pytest.raises(SummaryError):
        validate(summary)


def test_report_has_every_table(run):
    text = report.render(run[0])
    assert text.startswith("# Qualification report: small-chat-4k — FAIL (SIMULATED)")
    assert "> **SIMULATED**" in text
    for needle in ("| Gate | Result |", "| Context lane | Prompt tokens (server) | TTFT (first chunk) | End to end |",
                   "| Decode tok/s p50 (derived from the answers' own lengths) |", "| Decode tok/s p95 (derived) |", "| Prefill tok/s p50 |",
                   "| Model | pytest-qualify/small-chat |", "| Thinking | disabled; not overridable by the caller |",
                   "| Media limits | 4 images, 1 video per request |", "| Admission | 1 sequence (max_num_seqs) |",
                   "caption ambiguity, ticket MM-12", "**Stale waivers**", "## Failures",
                   "root 'x' is not 'pytest-qualify/small-chat'", "Prefix-cache flags",
                   "| Context lane | Client TTFT (first chunk) | Server TTFT (first token) | Client / server |"):
        assert needle in text, needle
    # 1K lane: median 200 ms with min-max over three repetitions.
    assert "| 1K | 1,024 (1,024 – 1,024, n=3) | 200.0 ms (100.0 ms – 300.0 ms, n=3) | 600.0 ms (300.0 ms – 900.0 ms, n=3) | 3/3 |" in text
    assert "| Multimodal corpus | 0/1 (1 waived), 1/3 repetitions |" in text
    assert "| Smoke: health, identity, short answer | 3/4, 2/3 repetitions — **FAIL** |" in text


def test_report_cells_cannot_break_tables():
    assert report.cell("a|b\nc") == "a\\|b c"
    assert report.cell("") == "-"


def test_junit_keeps_the_xunit2_structure_and_the_figures_stay_in_the_summary(run):
    summary, cases, verdict = run
    data = junit.build_xml(summary, cases, verdict.gate_cases)
    root = ET.fromstring(data)  # well-formed, control characters replaced
    assert junit.structure_errors(data) == []
    assert not [tc for tc in root.iter("testcase") if tc.find("properties") is not None]
    suite = root.find("testsuite")
    sprops = {p.get("name"): p.get("value") for p in suite.find("properties")}
    assert sprops["verdict"] == "FAIL" and sprops["profile"] == "small" and sprops["simulated"] == "true"
    assert SECRET not in sprops["launch_command"] and "--api-key ***" in sprops["launch_command"]
    gate = [tc for tc in root.iter("testcase") if tc.get("classname") == junit.GATE_CLASSNAME]
    assert suite.get("tests") == str(len(summary["items"]) + len(gate))
    assert suite.get("failures") == str(1 + sum(1 for tc in gate if tc.find("failure") is not None))
    cases_by_name = {tc.get("name"): tc for tc in root.iter("testcase")}
    bad = cases_by_name["test_identity[rep1of3]"]
    assert "GET /v1/models" in bad.find("failure").get("message")
    assert "reason: GET /v1/models" in bad.find("system-out").text
    waived = cases_by_name["test_image[rep2of3-img07]"]
    assert waived.find("failure") is None and "WAIVED" in waived.find("system-out").text
    lane = cases_by_name["test_lane[rep2of3-2K]"]
    assert "lane: 2K" in lane.find("system-out").text and "ttft_s=0.4" in lane.find("system-out").text
    # The per-item figures live in summary.json.
    (lane_item,) = [i for i in summary["items"] if i["nodeid"].endswith("test_lane[rep2of3-2K]")]
    props = lane_item["properties"]
    assert lane_item["lane"] == "2K" and props["ttft_s"] == 0.4 and props["timing_source"] == "streamed"
    assert float(props["decode_tok_s"]) == pytest.approx(8 / 0.6)


def test_first_streamed_request_is_the_items_timing():
    props: list = [("qualify_module", "context")]
    single = request_metrics(Timeline.single(0.05), 30, 1)
    merge_answer_properties(props, single, streamed=False)
    assert dict(props)["timing_source"] == "non-streamed" and dict(props)["e2e_s"] == 0.05
    tl = Timeline(t0=0.0, clock=lambda: 0.0)
    tl.chunk(True, True, at_s=0.5)
    tl.finish(at_s=1.5)
    merge_answer_properties(props, request_metrics(tl, 3000, 11), streamed=True, cached_tokens=0)
    tl2 = Timeline(t0=0.0, clock=lambda: 0.0)
    tl2.chunk(True, True, at_s=0.1)
    tl2.finish(at_s=0.2)
    merge_answer_properties(props, request_metrics(tl2, 10, 2), streamed=True)
    d = dict(props)
    assert d["ttft_s"] == 0.5 and d["prompt_tokens"] == 3000 and d["timing_request"] == 2
    assert d["requests"] == 3 and d["requests_e2e_s"] == pytest.approx(1.75)
    assert len(props) == len(d)  # no key twice


def test_redact_command():
    cmd = "vllm serve m --api-key 'abc def' --hf-token=hf_123 --port 8000 --token xyz"
    out = redact_command(cmd, secrets=("8000",))
    assert "abc def" not in out and "hf_123" not in out and "xyz" not in out and "8000" not in out
    assert out.startswith("vllm serve m --api-key *** --hf-token=*** --port ***")


def _write(run, tmp_path: Path) -> Path:
    summary, cases, verdict = run
    d = tmp_path / "bundle"
    d.mkdir()
    (d / "server.log").write_text(f"starting with key {SECRET}\n")
    (d / "metrics-start.prom").write_text("vllm:x_total 1\n")
    bundle.write_bundle(d, copy.deepcopy(summary), cases, (SECRET,), gate=verdict.gate_cases)
    bundle.write_manifest(d, (SECRET,))
    return d


def test_bundle_is_complete_redacted_and_verifiable(run, tmp_path):
    d = _write(run, tmp_path)
    names = sorted(p.name for p in d.iterdir())
    assert {"SHA256SUMS", "junit.xml", "report.md", "summary.json", "server.log", "metrics-start.prom"} <= set(names)
    for path in d.iterdir():
        assert SECRET.encode() not in path.read_bytes(), path.name
    validate(json.loads((d / "summary.json").read_text()))
    assert verify_manifest(d) == []
    if shutil.which("sha256sum"):
        ok = subprocess.run(["sha256sum", "-c", "SHA256SUMS"], cwd=d, capture_output=True, text=True)
        assert ok.returncode == 0, ok.stdout + ok.stderr
    (d / "report.md").write_text("# PASS\n")
    assert verify_manifest(d) == ["report.md: checksum mismatch"]
    if shutil.which("sha256sum"):
        assert subprocess.run(["sha256sum", "-c", "SHA256SUMS"], cwd=d, capture_output=True).returncode != 0


def test_plot_is_drawn_on_a_plain_install_without_matplotlib(run, tmp_path, monkeypatch):
    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name.startswith("matplotlib"):
            raise ImportError("No module named 'matplotlib'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    d = _write(run, tmp_path)
    summary = json.loads((d / "summary.json").read_text())
    assert summary["artifacts"]["plot"] == "ttft-vs-prompt-tokens.png"
    assert summary["artifacts"]["notes"] == []
    png = d / "ttft-vs-prompt-tokens.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "ttft-vs-prompt-tokens.png" in (d / "SHA256SUMS").read_text()
    from PIL import Image

    with Image.open(png) as img:
        assert img.size == (1000, 495)  # no load module in that run: one panel
        colours = {c for _, c in img.getcolors(maxcolors=1 << 16)}
    # Each lane has its own colour, drawn: the first two of the palette.
    from pytest_qualify.evidence.plot import PALETTE

    assert PALETTE[0] in colours and PALETTE[1] in colours


def test_plot_bytes_are_reproducible_and_follow_the_figures(tmp_path):
    from pytest_qualify.evidence.plot import plot_ttft

    points = [{"prompt_tokens": 1024 * i, "ttft_s": 0.1 * i, "lane": f"{i}K", "module": "context"} for i in (1, 2, 3)]
    a = plot_ttft(points, tmp_path / "a.png", "t", False).read_bytes()
    b = plot_ttft(points, tmp_path / "b.png", "t", False).read_bytes()
    c = plot_ttft(points[:2], tmp_path / "c.png", "t", False).read_bytes()
    assert a == b and a != c


@pytest.mark.parametrize(("lo", "hi", "first", "last"), [(0, 245760, 0, 250000), (0, 0.586, 0, 0.6), (0, 3.2, 0, 4)])
def test_plot_ticks_are_round_and_cover_the_data(lo, hi, first, last):
    from pytest_qualify.evidence.plot import nice_ticks

    ticks = nice_ticks(lo, hi)
    assert ticks[0] == first and ticks[-1] == pytest.approx(last) and ticks[-1] >= hi
    assert 3 <= len(ticks) <= 9


def test_cache_flags_blame_a_lane_only_on_its_own_evidence():
    from pytest_qualify.evidence.summary import lanes_section

    def item(rep: int, **props) -> dict:
        return {"module": "context", "lane": "1K", "repetition": rep, "outcome": "passed", "properties": props}

    items = [
        # Concurrent items (pytest -n) hit the cache while the lane ran; the lane's usage says 0.
        item(1, prefix_cache_hit_tokens=64, metrics_attribution="shared", cached_tokens=0),
        # Concurrent, and the server reported no cached-token count: cannot tell.
        item(2, prefix_cache_hit_tokens=64, metrics_attribution="shared"),
        # The lane alone, and its own usage confirms it.
        item(3, prefix_cache_hit_tokens=16, metrics_attribution="exclusive", cached_tokens=16),
    ]
    (lane,) = lanes_section(items, ["1K"])
    assert lane["flags"] == [
        "1K lane, repetition 2: the server counted 64 prefix-cache hit tokens during the lane "
        "(other requests ran concurrently: attribution uncertain)",
        "1K lane, repetition 3: the server counted 16 prefix-cache hit tokens during the lane",
        "1K lane, repetition 3: usage reports 16 cached prompt tokens",
    ]
    assert lane["metrics_attribution"] == "mixed" and lane["prefix_cache_hit_tokens"] == 144


def test_plot_draws_limits_failures_window_edge_and_the_load_panel(tmp_path):
    from PIL import Image

    from pytest_qualify.evidence.plot import FAILED, HEIGHT, LOAD_HEIGHT, LIMIT, MARGIN_RIGHT, WIDTH, plot_ttft

    points = [{"prompt_tokens": 1024, "ttft_s": 0.1, "lane": "1K", "module": "context", "outcome": "passed"},
              {"prompt_tokens": 2048, "ttft_s": 0.5, "lane": "2K", "module": "context", "outcome": "failed"}]
    plain = plot_ttft([{k: v for k, v in p.items() if k != "outcome"} for p in points], tmp_path / "plain.png", "t",
                      False)
    with Image.open(plain) as img:
        plain_colours = {c for _, c in img.getcolors(maxcolors=1 << 16)}
    assert FAILED not in plain_colours and LIMIT not in plain_colours  # nothing marked without outcome or limit
    load = {"levels": [{"concurrency": c, "failed": f, "ttft_s_p50": 0.1 * c, "ttft_s_p95": 0.2 * c,
                        "ttft_s_p99": 0.3 * c, "tpot_s_p50": 0.01, "tpot_s_p95": 0.02, "tpot_s_p99": 0.03}
                       for c, f in ((1, 0), (2, 0), (4, 3))]}
    marked = plot_ttft(points, tmp_path / "marked.png", "t", False, window_tokens=4096,
                       limits=[{"lane": None, "ttft_s": 0.3}], load=load,
                       load_limits=[{"metric": "ttft_s_p95", "limit": 0.5}])
    with Image.open(marked) as img:
        assert img.size == (WIDTH, HEIGHT + LOAD_HEIGHT)
        colours = {c for _, c in img.getcolors(maxcolors=1 << 16)}
        # The legend is in the right margin: the plot area's right edge leaves it free of data.
        legend = img.crop((WIDTH - MARGIN_RIGHT + 10, 40, WIDTH, HEIGHT - 62))
        assert legend.getbbox() is not None
    assert FAILED in colours and LIMIT in colours


def test_leaf_definitions_are_inlined_and_the_others_kept_as_references():
    from pytest_qualify.bundle_format.schema import inline_leaf_refs, schema

    document = {"$defs": {"leaf": {"type": "integer"}, "branch": {"items": {"$ref": "#/$defs/leaf"}}},
                "properties": {"a": {"$ref": "#/$defs/leaf"}, "b": {"$ref": "#/$defs/branch"},
                               "c": {"$ref": "#/$defs/leaf", "minimum": 3}}}
    inlined = inline_leaf_refs(document)
    assert inlined["properties"]["a"] == {"type": "integer"}
    assert inlined["properties"]["b"] == {"$ref": "#/$defs/branch"}  # a definition that refers on
    assert inlined["properties"]["c"] == {"$ref": "#/$defs/leaf", "minimum": 3}  # a reference with siblings
    assert inlined["$defs"]["branch"] == {"items": {"type": "integer"}}
    published = schema()
    assert '"#/$defs/scalar"' in json.dumps(published)  # the published file is left as written
    assert '"#/$defs/scalar"' not in json.dumps(inline_leaf_refs(published))
