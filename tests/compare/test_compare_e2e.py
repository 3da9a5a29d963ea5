"""``python -m pytest_qualify compare`` and ``ab`` end to end: one real timing-stage boot against the
reference server, cloned into boots whose figures carry a known shift (the clone's summary still
validates), then the command's files, calls, attribution and exit codes; and one ``ab`` campaign of
interleaved reference boots where B's server is slower."""

from __future__ import annotations

import html
import json
import math
import shutil
import sys
from pathlib import Path

import pytest

from pytest_qualify.__main__ import main
from pytest_qualify.compare.render import validate as validate_comparison

from .helpers_compare import Template, clone, one_boot, speed

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Template:
    return one_boot(tmp_path_factory.mktemp("boot"))


def make_boot(template: Template, folder: Path, *, factor: float = 1.0, run_id: str, host_kind: str | None = None,
              simulated: bool | None = None, failed: tuple[str, ...] = (), verdict: str | None = None,
              lane_tokens: int | None = None, task_data: str | None = None, repeat: int | None = None,
              load: dict | None = None, workers: int | None = None) -> Path:
    """A sealed boot whose speed is ``factor`` times the template's: rates times it, times divided by it;
    ``load``: parts of the load module's plan changed, ``workers``: the run's xdist workers."""
    s = speed(template.summary, factor)
    s["run"]["id"] = run_id
    if host_kind:
        s["provenance"]["host"]["kind"] = host_kind
    if simulated is not None:
        s["simulated"] = simulated
    for item in s["items"]:
        if f"{item['module']}::{item['item']}" in failed:
            item["outcome"], item["reason"] = "failed", "made to fail"
    if verdict:
        s["verdict"]["result"] = verdict
        if verdict == "INCOMPLETE":
            s["verdict"]["incomplete"] = s["verdict"]["reasons"] = ["the server stopped answering"]
    if lane_tokens:
        s["profile"]["limits"]["lanes"][0]["prompt_tokens"] = lane_tokens
    if task_data:
        s["protocol"]["task_data_sha256"] = task_data
    if repeat:
        s["run"]["repeat"] = repeat
    if load:
        s["profile"]["load"].update(load)
    if workers is not None:
        s["run"]["workers"] = workers
    return clone(template, folder, s)


def arm(template: dict, root: Path, name: str, factors, **kw) -> list[str]:
    return [str(make_boot(template, root / f"{name}{i}", factor=f, run_id=f"{name}{i}", **kw))
            for i, f in enumerate(factors, 1)]


def run(*argv: str, capsys) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_b_separably_slower_on_a_gating_figure_exits_1_with_every_file(template, tmp_path, capsys):
    a = arm(template, tmp_path, "A", (1.0, 1.003, 0.997))
    b = arm(template, tmp_path, "B", (0.95, 0.952, 0.948))
    out = tmp_path / "cmp"
    code, stdout, _ = run("compare", *a, "--vs", *b, "--gate", "load.c1.output_tok_s", "--out", str(out), capsys=capsys)
    assert code == 1, stdout
    c = json.loads((out / "comparison.json").read_text())
    validate_comparison(c)
    fig = {f["id"]: f for f in c["figures"]}
    assert fig["load.c1.output_tok_s"]["call"] == "B worse" and fig["load.c1.output_tok_s"]["gating"]
    assert fig["load.c1.output_tok_s"]["difference_pct"] == pytest.approx(-5.0, abs=0.5)
    # ITL is compared per chunk and per token: the per-token figure is the one that compares across
    # engines that pack several tokens per chunk.
    assert fig["load.c1.itl_token_s_p50"]["title"] == "ITL p50 (per token) at concurrency 1"
    assert fig["load.c1.itl_token_s_p50"]["difference_pct"] == pytest.approx(5.3, abs=0.5)
    assert c["reasons"] == ["B separably worse on gating figure load.c1.output_tok_s"]
    assert c["gating"] == ["load.c1.output_tok_s"] and c["spread"] == "boot-to-boot"
    assert "Welch" in c["method"] and "Holm" in c["method"]
    assert stdout.strip().splitlines()[-1].startswith("COMPARISON: B WORSE (exit 1) ·")
    md, page = (out / "comparison.md").read_text(), (out / "comparison.html").read_text()
    assert "Method: per figure, on log values across boots: Welch" in md and "| **B worse** |" in md
    assert page.count("<svg") == len(c["figures"]) and "SIMULATED" in page
    assert (out / "SHA256SUMS").read_text().count("  comparison.") == 3


def test_a_reference_boot_carries_the_engines_own_tpot_as_a_figure(template):
    """The reference server reports vLLM's per-request TPOT histogram, so a SIMULATED boot has the
    packaged A/B pairs' decode gate (``load.c1.engine_tpot_s_mean``) as a figure, with no reason."""
    from pytest_qualify.compare.figures import figures_of, not_measurable

    level = template.summary["timing"]["load"]["levels"][0]
    assert template.summary["simulated"] is True and level["concurrency"] == 1
    figure = figures_of(template.summary)["load.c1.engine_tpot_s_mean"]
    assert figure.value == level["engine_tpot_s_mean"] and figure.value > 0 and figure.better == "lower"
    assert "load.c1.engine_tpot_s_mean" not in not_measurable(template.summary)


def test_the_same_recipe_is_not_worse_and_swapping_the_arms_flips_the_calls(template, tmp_path, capsys):
    a = arm(template, tmp_path, "A", (1.0, 1.003, 0.997))
    b = arm(template, tmp_path, "B", (0.95, 0.952, 0.948))
    code, _, _ = run("compare", *b, "--vs", *a, "--gate", "load.c1.output_tok_s", "--out", str(tmp_path / "x"),
                     capsys=capsys)
    assert code == 0
    c = json.loads((tmp_path / "x" / "comparison.json").read_text())
    assert {f["id"]: f["call"] for f in c["figures"]}["load.c1.output_tok_s"] == "B better"


def test_gate_rows_are_attributed_item_by_item_with_a_reference_deployment(template, tmp_path, capsys):
    q1, q2, k1 = "smoke::test_short_answer[q1]", "smoke::test_short_answer[q2]", "context::test_context_retrieval[1K]"
    a = arm(template, tmp_path, "A", (1.0, 1.0), failed=(q1,))
    b = arm(template, tmp_path, "B", (1.0, 1.0), failed=(q1, q2, k1))
    r = arm(template, tmp_path, "R", (1.0, 1.0), failed=(k1,))
    code, stdout, _ = run("compare", *a, "--vs", *b, "--reference", *r, "--out", str(tmp_path / "c"), capsys=capsys)
    c = json.loads((tmp_path / "c" / "comparison.json").read_text())
    kinds = {row["item"]: row["kind"] for row in c["items"]}
    assert kinds == {q1: "shared", q2: "regression", k1: "shared with the reference deployment"}
    assert code == 1 and c["reasons"] == [f"item regression: {q2} failed only in B"]
    fixed = arm(template, tmp_path, "F", (1.0, 1.0))
    code, _, _ = run("compare", *a, "--vs", *fixed, "--out", str(tmp_path / "f"), capsys=capsys)
    assert code == 0
    assert json.loads((tmp_path / "f" / "comparison.json").read_text())["items"][0]["kind"] == "fixed"


@pytest.mark.parametrize("change, words", [
    ({"lane_tokens": 999}, "the bundles measured different workloads: lanes: A A1"),
    ({"simulated": False}, "SIMULATED and real runs cannot be compared"),
    ({"host_kind": "1 x NVIDIA H200"}, "boots ran on different kinds of host"),
    ({"task_data": "0" * 64}, "task data (the suites, fixtures and media its requests are built from)"),
])
def test_unlike_bundles_are_a_usage_error_naming_what_differs(template, tmp_path, capsys, change, words):
    a = arm(template, tmp_path, "A", (1.0, 1.0))
    b = arm(template, tmp_path, "B", (1.0, 1.0), **change)
    code, _, err = run("compare", *a, "--vs", *b, "--out", str(tmp_path / "c"), capsys=capsys)
    assert code == 4 and words in err, err
    assert not (tmp_path / "c").exists()


def test_mixed_hosts_compare_when_told(template, tmp_path, capsys):
    a = arm(template, tmp_path, "A", (1.0, 1.0))
    b = arm(template, tmp_path, "B", (1.0, 1.0), host_kind="1 x NVIDIA H200")
    code, _, _ = run("compare", *a, "--vs", *b, "--allow-mixed-hosts", "--out", str(tmp_path / "c"), capsys=capsys)
    assert code == 0
    c = json.loads((tmp_path / "c" / "comparison.json").read_text())
    assert c["arms"]["B"]["host_kinds"] == ["1 x NVIDIA H200"]


def test_too_few_or_unfinished_boots_are_incomplete(template, tmp_path, capsys):
    a = arm(template, tmp_path, "A", (1.0, 1.0))
    b = arm(template, tmp_path, "B", (1.0,)) + arm(template, tmp_path, "Bx", (1.0,), verdict="INCOMPLETE")
    code, stdout, _ = run("compare", *a, "--vs", *b, "--out", str(tmp_path / "c"), capsys=capsys)
    c = json.loads((tmp_path / "c" / "comparison.json").read_text())
    assert code == 2 and c["result"] == "INCOMPLETE"
    assert any("did not finish (verdict INCOMPLETE)" in r for r in c["reasons"])
    code, _, _ = run("compare", *a, "--vs", *arm(template, tmp_path, "C", (1.0, 1.0)), "--boots", "3",
                     "--out", str(tmp_path / "d"), capsys=capsys)
    assert code == 2


def test_a_gate_naming_no_figure_is_a_usage_error(template, tmp_path, capsys):
    a = arm(template, tmp_path, "A", (1.0, 1.0))
    b = arm(template, tmp_path, "B", (1.0, 1.0))
    code, _, err = run("compare", *a, "--vs", *b, "--gate", "load.c9.*", "--out", str(tmp_path / "c"), capsys=capsys)
    assert code == 4 and "gating figure 'load.c9.*' names no figure" in err


@pytest.mark.parametrize("how", ["the same folder twice in one arm", "the same folder in both arms",
                                 "a copy of a boot (its run id)"])
def test_one_boot_named_twice_is_a_usage_error(template, tmp_path, capsys, how):
    a = arm(template, tmp_path, "A", (1.0, 1.003, 0.997))
    b = arm(template, tmp_path, "B", (0.95, 0.952, 0.948))
    if how == "the same folder twice in one arm":
        argv = [a[0], a[0], a[0], "--vs", *b]  # three "boots" of zero spread made of one
    elif how == "the same folder in both arms":
        argv = [*a, "--vs", *b[:2], a[2]]
    else:
        copy_of = tmp_path / "copy"
        shutil.copytree(b[0], copy_of)
        argv = [*a, "--vs", *b, str(copy_of)]
    code, stdout, err = run("compare", *argv, "--boots", "3", "--out", str(tmp_path / "c"), capsys=capsys)
    assert code == 4, stdout + err
    assert "is the same boot as" in err and "may be named once" in err, err
    assert not (tmp_path / "c").exists()


def test_a_noise_floor_lends_its_variance_and_degrees_of_freedom(template, tmp_path, capsys):
    """An A/A campaign's noise floor of the same workload and host: the comparison pools its
    variance and adds its degrees of freedom, so 3 boots a side decide what they alone could not.
    A noise floor of another host kind, or of another workload, is refused."""
    from pytest_qualify.bundle_format.workload import of_summary
    from pytest_qualify.compare.noise import NOISE_FILE, noise_floor, write_noise_floor

    aa = [str(make_boot(template, tmp_path / f"N{i}", factor=f, run_id=f"N{i}"))
          for i, f in enumerate((1.0, 1.02, 0.98, 1.01, 0.99, 1.0, 1.02, 0.98, 1.01, 0.99), 1)]
    run("compare", *aa[:5], "--vs", *aa[5:], "--out", str(tmp_path / "aa"), capsys=capsys)
    figures = json.loads((tmp_path / "aa" / "comparison.json").read_text())["figures"]
    kind = template.summary["provenance"]["host"]["kind"]
    floor = noise_floor(figures, workload=of_summary(template.summary), spread="boot-to-boot", host_kinds=[kind])
    path = write_noise_floor(floor, tmp_path)
    assert path.name == NOISE_FILE and floor["figures"]["load.c1.output_tok_s"]["df"] == 8
    a = arm(template, tmp_path, "A", (1.0, 1.03, 0.97))
    b = arm(template, tmp_path, "B", (0.94, 0.97, 0.91))
    gate = ("--gate", "load.c1.output_tok_s", "--tolerance", "2")
    code, _, _ = run("compare", *a, "--vs", *b, *gate, "--out", str(tmp_path / "w"), capsys=capsys)
    alone = {f["id"]: f for f in json.loads((tmp_path / "w" / "comparison.json").read_text())["figures"]}
    code_floor, _, _ = run("compare", *a, "--vs", *b, *gate, "--noise-floor", str(path), "--out", str(tmp_path / "n"),
                           capsys=capsys)
    c = json.loads((tmp_path / "n" / "comparison.json").read_text())
    row = {f["id"]: f for f in c["figures"]}["load.c1.output_tok_s"]
    assert alone["load.c1.output_tok_s"]["analysis"] == "welch" and code == 2
    assert row["analysis"] == "pooled with the noise floor" and row["df"] == pytest.approx(12)
    assert code_floor == 1 and row["call"] == "B worse" and c["decision"]["analysis"] == "pooled with the noise floor"
    assert c["noise_floor"]["load.c1.output_tok_s"]["df"] == 8
    (tmp_path / "other").mkdir()
    write_noise_floor(dict(floor, host_kinds=["1 x NVIDIA H100 80GB HBM3"]), tmp_path / "other")
    code, _, err = run("compare", *a, "--vs", *b, "--noise-floor", str(tmp_path / "other" / NOISE_FILE),
                       "--out", str(tmp_path / "x"), capsys=capsys)
    assert code == 4 and "was measured on 1 x NVIDIA H100 80GB HBM3" in err and len(err.strip().splitlines()) == 1


def test_ab_interleaves_reference_boots_and_calls_the_slower_b_worse(tmp_path, capsys):
    """Six boots of the reference server, A, B, B, A, A, B; B's server decodes at half the rate."""
    out = tmp_path / "ab"
    code = main(["ab", "small", "small", "--boots", "3", "--warm-up", "0", "--endpoint", "reference", "--out", str(out),
                 "--a-env", "QUALIFY_REFERENCE_DECODE_TOK_S=150", "--b-env", "QUALIFY_REFERENCE_DECODE_TOK_S=150",
                 "--b-env", "QUALIFY_REFERENCE_SPEED=0.5", "--gate", "load.c1.output_tok_s"])
    captured = capsys.readouterr()
    stdout = captured.out + captured.err
    assert "order A, B, B, A, A, B" in stdout
    assert code == 1, stdout
    c = json.loads((out / "comparison.json").read_text())
    assert {f["id"]: f["call"] for f in c["figures"]}["load.c1.output_tok_s"] == "B worse"
    assert sorted(p.name for p in (out / "boots").iterdir()) == ["A1", "A2", "A3", "B1", "B2", "B3"]
    assert all(b["verdict"] == "PASS" for arm_ in c["arms"].values() for b in arm_["boots"])
    assert not (out / "noise-floor.json").exists()


def test_ab_refuses_profiles_of_different_workloads_before_any_server_starts(tmp_path, capsys):
    code = main(["ab", "small", "262k", "--boots", "2", "--endpoint", "reference", "--out", str(tmp_path / "x")])
    err = capsys.readouterr().err
    assert code == 4 and "the two profiles measure different workloads: lanes: A (small)" in err
    assert not (tmp_path / "x").exists()
    assert sys.executable


@pytest.mark.parametrize("edit, words", [
    (("probes_per_level = 6", "probes_per_level = 8"),
     "load decode probes per level (the TTFT, TPOT and ITL p50s are over them): A (tiny-cpu-ab) 6, B (tiny-cpu-ab) 8"),
    (("samples = 5", "samples = 3"),
     "sweep samples per size (the TTFT is their median): A (tiny-cpu-ab) 5, B (tiny-cpu-ab) 3"),
    (("decode_tokens = 64", "decode_tokens = 128"),
     "sweep decode probe length in tokens: A (tiny-cpu-ab) 64, B (tiny-cpu-ab) 128"),
])
def test_ab_refuses_profiles_whose_statistics_differ_before_any_server_starts(tmp_path, capsys, edit, words):
    """The CPU pair's arm A against itself with one plan setting changed: the same figure ids, another
    statistic (a p50 over more probes, a median over fewer samples, a longer decode probe)."""
    from pytest_qualify.profiles import builtin_profiles

    text = Path(builtin_profiles()["tiny-cpu-ab"]).read_text()
    assert text.count(edit[0]) == 1
    b = tmp_path / "b.toml"
    b.write_text(text.replace(*edit))
    code = main(["ab", "tiny-cpu-ab", str(b), "--endpoint", "reference", "--out", str(tmp_path / "x")])
    captured = capsys.readouterr()
    assert code == 4 and len(captured.err.strip().splitlines()) == 1, captured.err
    assert "ab: the two profiles measure different workloads: " + words in captured.err, captured.err
    assert not captured.out and not (tmp_path / "x").exists()


def test_attach_mode_compares_two_running_endpoints_run_by_run(tmp_path, capsys):
    """Two reference servers that keep running: each sample is a run, and every output says the
    spread is run-to-run, not boot-to-boot."""
    import subprocess
    import urllib.request

    from pytest_qualify.server.lifecycle import free_port

    from ..fake_vllm import wait_for

    servers, urls = [], []
    try:
        for _ in range(2):
            port = free_port()
            servers.append(subprocess.Popen([sys.executable, "-m", "pytest_qualify.reference", "--port", str(port),
                                             "--profile", "small"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            urls.append(f"http://127.0.0.1:{port}")

        def healthy(url: str) -> bool:
            try:
                return urllib.request.urlopen(url + "/health", timeout=1).status == 200
            except OSError:
                return False

        assert all(wait_for(lambda u=u: healthy(u), 60) for u in urls)
        out = tmp_path / "attach"
        code = main(["ab", "small", "small", "--boots", "2", "--attach", *urls, "--out", str(out)])
        captured = capsys.readouterr()
        stdout = captured.out + captured.err
    finally:
        for s in servers:
            s.terminate()
            s.wait(30)
    assert code in (0, 2), stdout  # the same recipe: never B WORSE
    assert "the spread is run-to-run, not boot-to-boot" in stdout
    c = json.loads((out / "comparison.json").read_text())
    assert c["spread"] == "run-to-run" and c["arms"]["A"]["identity"]["mode"] == "attach"
    assert "spread is run-to-run, not boot-to-boot" in (out / "comparison.md").read_text()
    # Two endpoints are two arms even of one profile: no noise floor is measured from them.
    assert not (out / "noise-floor.json").exists()


def test_ab_of_a_recipe_against_itself_warms_up_and_writes_its_noise_floor(tmp_path, capsys):
    """A/A: each arm's first boot warms the caches and is no sample (boots/warm-up-A1, -B1); the
    recipe's own boot-to-boot variance is written for a later comparison. The same recipe is never
    B WORSE: exit 0, or 2 with the boots that would decide it."""
    from pytest_qualify.bundle_format.workload import of_summary
    from pytest_qualify.compare.noise import read_noise_floor

    out = tmp_path / "aa"
    code = main(["ab", "small", "small", "--boots", "2", "--endpoint", "reference", "--out", str(out)])
    stdout = capsys.readouterr().out
    assert code in (0, 2), stdout
    assert "after 1 warm-up boot(s) per arm (not samples)" in stdout
    assert "A/A: measuring the noise floor" in stdout and f"noise floor: {out / 'noise-floor.json'}" in stdout
    assert sorted(p.name for p in (out / "boots").iterdir()) == ["A1", "A2", "B1", "B2", "warm-up-A1", "warm-up-B1"]
    c = json.loads((out / "comparison.json").read_text())
    assert [len(c["arms"][x]["boots"]) for x in "AB"] == [2, 2]
    assert [len(c["arms"][x]["warm_up_boots"]) for x in "AB"] == [1, 1]
    assert "warmed its caches and are no sample" in c["warm_up"]
    assert "Warm-up: each arm's first 1 boot(s)" in (out / "comparison.md").read_text()
    floor = json.loads((out / "noise-floor.json").read_text())
    assert floor["schema"] == "pytest-qualify/noise-floor" and "degrees of freedom" in floor["rule"]
    assert floor["figures"]["load.c1.output_tok_s"]["boots"] == 4 and floor["figures"]["load.c1.output_tok_s"]["df"] == 2
    (boot,) = [p for p in (out / "boots" / "A1").iterdir() if p.is_dir() and not p.name.startswith(".")]
    summary = json.loads((boot / "summary.json").read_text())
    rows = read_noise_floor(out / "noise-floor.json", of_summary(summary), host_kinds=floor["host_kinds"],
                            spread="boot-to-boot")
    assert rows["load.c1.output_tok_s"].df == 2


def test_ab_of_a_fast_but_wrong_b_exits_1_with_its_item_regressions(tmp_path, capsys):
    """B's reference server decodes twice as fast but drops the needle of the longest lane (its
    fault, through B's own pytest options): the timing stage still grades, so B's speed wins it
    nothing: its failed lane items are regressions attributed to B."""
    out = tmp_path / "ab"
    code = main(["ab", "small", "small", "--boots", "2", "--warm-up", "0", "--endpoint", "reference", "--out", str(out),
                 "--b-env", "QUALIFY_REFERENCE_SPEED=2",
                 "--b-env", "PYTEST_ADDOPTS=--qualify-reference-fault=drop_needle"])
    captured = capsys.readouterr()
    stdout = captured.out + captured.err
    assert code == 1, stdout
    c = json.loads((out / "comparison.json").read_text())
    assert [b["verdict"] for b in c["arms"]["A"]["boots"]] == ["PASS", "PASS"]
    assert [b["verdict"] for b in c["arms"]["B"]["boots"]] == ["FAIL", "FAIL"]
    regressions = [row["item"] for row in c["items"] if row["kind"] == "regression"]
    assert regressions == ["context::test_context_retrieval[3K]"], c["items"]
    assert c["reasons"] == [f"item regression: {regressions[0]} failed only in B"]


# -- the decision's three answers ---------------------------------------------------------------


def test_cant_tell_is_undecided_with_the_boots_that_would_decide_it(template, tmp_path, capsys):
    """Three boots a side at a 10% boot-to-boot spread, the same centre: not separable is not "not
    worse": exit 2, each undecided gating figure with the boots per arm that would decide it, in the
    last line, the JSON and both pages."""
    a = arm(template, tmp_path, "A", (1.0, 1.1, 0.9))
    b = arm(template, tmp_path, "B", (1.01, 1.08, 0.92))
    out = tmp_path / "u"
    code, stdout, _ = run("compare", *a, "--vs", *b, "--gate", "load.c1.tpot_s_p50", "--out", str(out), capsys=capsys)
    c = json.loads((out / "comparison.json").read_text())
    validate_comparison(c)
    assert code == 2 and c["result"] == "UNDECIDED" and c["exit_code"] == 2
    (undecided,) = c["decision"]["undecided"]
    need = undecided["boots_to_decide"]
    assert undecided["figure"] == "load.c1.tpot_s_p50" and need is not None and need > 3
    assert c["decision"]["boots_per_arm_to_decide"] == need
    (reason,) = c["reasons"]
    assert reason.startswith("gating figure load.c1.tpot_s_p50 undecided") and f"{need} boots per arm would decide it" in reason
    last = stdout.strip().splitlines()[-1]
    assert last.startswith(f"COMPARISON: UNDECIDED (exit 2) · 1 gating figure(s) undecided: {need} boots per arm")
    md, page = (out / "comparison.md").read_text(), (out / "comparison.html").read_text()
    assert md.startswith("# Comparison: UNDECIDED (exit 2)") and "which is not \"not worse\"" in md
    assert "class='verdict v-INCOMPLETE'>UNDECIDED<" in page


def test_b_slightly_slower_inside_the_tolerance_is_shown_not_worse(template, tmp_path, capsys):
    a = arm(template, tmp_path, "A", (1.0, 1.002, 0.998, 1.001))
    b = arm(template, tmp_path, "B", (0.99, 0.992, 0.988, 0.991))
    code, stdout, _ = run("compare", *a, "--vs", *b, "--gate", "load.c1.output_tok_s", "--out", str(tmp_path / "c"),
                          capsys=capsys)
    c = json.loads((tmp_path / "c" / "comparison.json").read_text())
    row = {f["id"]: f for f in c["figures"]}["load.c1.output_tok_s"]
    assert code == 0 and c["result"] == "B NOT WORSE" and row["decision"] == "not worse"
    assert row["degradation_bound_pct"] < 5 and c["decision"]["not_worse"] == ["load.c1.output_tok_s"]


@pytest.mark.parametrize("a_factors, b_factors, gates, result, exit_code, verdict_class", [
    ((1.0, 1.003, 0.997), (0.95, 0.952, 0.948), ("load.c1.output_tok_s",), "B WORSE", 1, "v-FAIL"),
    ((1.0, 1.002, 0.998, 1.001), (0.99, 0.992, 0.988, 0.991), ("load.c1.output_tok_s",), "B NOT WORSE", 0, "v-PASS"),
    ((1.0, 1.1, 0.9), (1.01, 1.08, 0.92), ("load.c1.tpot_s_p50", "load.c1.output_tok_s"), "UNDECIDED", 2,
     "v-INCOMPLETE"),
], ids=["worse", "not-worse", "undecided"])
def test_every_reader_of_a_comparison_reads_one_decision(template, tmp_path, capsys, a_factors, b_factors, gates,
                                                         result, exit_code, verdict_class):
    """The exit status, the last line, the page head printed above it, comparison.json,
    comparison.md and comparison.html say the same answer; UNDECIDED names, in the JSON, both pages
    and the last line, the boots per arm that would decide each undecided gating figure."""
    a = arm(template, tmp_path, "A", a_factors)
    b = arm(template, tmp_path, "B", b_factors)
    out = tmp_path / "c"
    code, stdout, _ = run("compare", *a, "--vs", *b, *(x for g in gates for x in ("--gate", g)), "--out", str(out),
                          capsys=capsys)
    c = json.loads((out / "comparison.json").read_text())
    validate_comparison(c)
    md, page = (out / "comparison.md").read_text(), (out / "comparison.html").read_text()
    head = f"{result} (exit {exit_code})"
    assert code == exit_code and c["result"] == result and c["exit_code"] == exit_code, stdout
    lines = stdout.strip().splitlines()
    assert lines[-1].startswith(f"COMPARISON: {head}") and lines[0] == f"# Comparison: {head}", stdout
    assert md.startswith(f"# Comparison: {head}\n")
    assert f"class='verdict {verdict_class}'>{result}</span> <span class=muted>exit {exit_code}</span>" in page
    decision = c["decision"]
    if result == "B WORSE":
        assert decision["worse"] == list(gates) and "B separably worse on gating figure load.c1.output_tok_s" in md
    if result == "B NOT WORSE":
        assert decision["not_worse"] == list(gates) and not decision["worse"] and not decision["undecided"]
    undecided = {u["figure"]: u["boots_to_decide"] for u in decision["undecided"]}
    if result != "UNDECIDED":
        assert not undecided and " undecided: " not in lines[-1]
        return
    assert set(undecided) == set(gates) and all(n is not None and n > 3 for n in undecided.values()), undecided
    assert decision["boots_per_arm_to_decide"] == max(undecided.values())
    assert f"2 gating figure(s) undecided: {max(undecided.values())} boots per arm would decide them" in lines[-1]
    rows = {f["id"]: f for f in c["figures"]}
    for figure, n in undecided.items():
        assert rows[figure]["decision"] == "undecided" and rows[figure]["boots_to_decide"] == n
        # The reason, in both pages and above the last line, and the figure's row of the table.
        reason = next(r for r in c["reasons"] if r.startswith(f"gating figure {figure} undecided"))
        assert f": {n} boots per arm would decide it (" in reason
        assert f"- {reason}" in md and f"- {reason}" in stdout and html.escape(reason) in page
        (row,) = [line for line in md.splitlines() if f"(`{figure}`" in line]
        assert row.endswith(f"| **{rows[figure]['call']}** | {n} | yes |"), row


# -- held-out classes: the bundle verified, the workload whole, the numbers sane ------------------


def test_a_bundle_whose_summary_was_edited_and_resealed_is_refused(template, tmp_path, capsys):
    """A summary's figures edited and its SHA256SUMS line redone, the statement left alone: the
    statement no longer agrees, and compare refuses the bundle in one line naming it."""
    from pytest_qualify.bundle_format.manifest import sha256_file

    a = arm(template, tmp_path, "A", (1.0, 1.01, 0.99))
    b = arm(template, tmp_path, "B", (1.0, 1.01, 0.99))
    forged = Path(b[0])
    summary = json.loads((forged / "summary.json").read_text())
    summary["timing"]["load"]["levels"][0]["output_tok_s"] *= 2
    (forged / "summary.json").write_text(json.dumps(summary))
    lines = [f"{sha256_file(forged / 'summary.json')}  summary.json" if line.endswith("  summary.json") else line
             for line in (forged / "SHA256SUMS").read_text().splitlines()]
    (forged / "SHA256SUMS").write_text("\n".join(lines) + "\n")
    code, _, err = run("compare", *a, "--vs", *b, "--out", str(tmp_path / "c"), capsys=capsys)
    assert code == 4 and len(err.strip().splitlines()) == 1, err
    assert f"bundle {forged}" in err and "provenance.intoto.json" in err and "summary.json has sha256" in err
    assert not (tmp_path / "c").exists()


def test_a_bundle_with_no_sha256sums_is_refused(template, tmp_path, capsys):
    a = arm(template, tmp_path, "A", (1.0, 1.01, 0.99))
    b = arm(template, tmp_path, "B", (1.0, 1.01, 0.99))
    (Path(a[1]) / "SHA256SUMS").unlink()
    code, _, err = run("compare", *a, "--vs", *b, "--out", str(tmp_path / "c"), capsys=capsys)
    assert code == 4 and len(err.strip().splitlines()) == 1 and f"bundle {a[1]}: no SHA256SUMS" in err, err


def test_a_repeat_2_run_is_not_the_workload_of_repeat_1_runs(template, tmp_path, capsys):
    a = arm(template, tmp_path, "A", (1.0, 1.01, 0.99))
    b = arm(template, tmp_path, "B", (1.0, 1.01, 0.99), repeat=2)
    code, _, err = run("compare", *a, "--vs", *b, "--out", str(tmp_path / "c"), capsys=capsys)
    assert code == 4 and "repeat (repetitions per item; the load figures are a repetition's worst): A A1 --repeat 1" in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "c").exists(), err


@pytest.mark.parametrize("change, words", [
    ({"load": {"probes_per_level": 8}},
     "load decode probes per level (the TTFT, TPOT and ITL p50s are over them): A A1 4, B B1 8"),
    ({"load": {"requests_per_level": 24}},
     "load mix requests per level (the level's throughput is over them and the probes): A A1 12, B B1 24"),
    ({"load": {"mix": ["smoke"]}},
     "load mix (the modules whose items make each level's requests): A A1 [smoke, tools, recall, json], B B1 [smoke]"),
    ({"load": {"goodput_tpot_s_max": 0.5}}, "load goodput's TPOT limit (s): A A1 0.05, B B1 0.5"),
    ({"workers": 2}, "xdist workers (other items share the server while one is timed): A A1 -n 0, B B1 -n 2"),
])
def test_a_setting_that_changes_a_statistic_is_another_workload(template, tmp_path, capsys, change, words):
    """Beside --repeat: the load module's plan (a p50 over 8 probes, a throughput over another mix or
    count of requests, goodput under another limit) and the xdist workers sharing the server while a
    request is timed each make another statistic under the same figure id: refused in one line."""
    assert template.summary["run"]["workers"] == 0
    a = arm(template, tmp_path, "A", (1.0, 1.01, 0.99))
    b = arm(template, tmp_path, "B", (1.0, 1.01, 0.99), **change)
    code, _, err = run("compare", *a, "--vs", *b, "--out", str(tmp_path / "c"), capsys=capsys)
    assert code == 4 and len(err.strip().splitlines()) == 1, err
    assert "compare: the bundles measured different workloads: " + words in err, err
    assert not (tmp_path / "c").exists()


def test_a_boot_records_the_plans_its_profile_plans_and_an_earlier_bundle_is_held_to_the_rest(template):
    """summary.json's profile section holds the load and sweep plans in the shape a profile plans
    them, so ab's check before any boot and compare's check of the bundles read one workload; a
    bundle of an earlier release, whose summary holds no plan, is compared on what it names."""
    import copy

    from pytest_qualify.bundle_format.workload import differences, load_plan, of_summary, sweep_plan
    from pytest_qualify.profiles import load_profile

    small = load_profile("small")
    assert template.summary["profile"]["load"] == load_plan(small.load)
    assert template.summary["profile"]["sweep"] == sweep_plan(small.sweep)
    assert differences(of_summary(template.summary), small.workload("timing")) == []
    changed = copy.deepcopy(template.summary)
    changed["profile"]["load"]["probes_per_level"] = 8
    earlier = copy.deepcopy(template.summary)
    del earlier["profile"]["load"], earlier["profile"]["sweep"], earlier["run"]["workers"]
    assert differences(of_summary(template.summary), of_summary(changed)) != []
    assert differences(of_summary(earlier), of_summary(changed)) == []
    # A noise floor written before the sweep plan and the workers were part of the workload.
    floor = {k: v for k, v in of_summary(template.summary).items() if k not in ("sweep", "workers")}
    assert differences(floor, of_summary(template.summary)) == []


@pytest.mark.parametrize("argv, words", [
    (["--boots", "0"], "--boots 0: at least 2 boots per arm"),
    (["--boots", "1"], "--boots 1: at least 2 boots per arm"),
    (["--tolerance", "0"], "--tolerance 0: the tolerance must be above 0%"),
    (["--tolerance", "-3"], "--tolerance -3: the tolerance must be above 0%"),
    # A tolerance no difference reaches calls any spread equivalent: noise would read B NOT WORSE.
    (["--tolerance", "inf"], "--tolerance inf: at most 100%"),
    (["--tolerance", "1000"], "--tolerance 1000: at most 100%"),
])
def test_boots_and_tolerance_that_cannot_decide_are_usage_errors(template, tmp_path, capsys, argv, words):
    a = arm(template, tmp_path, "A", (1.0, 1.01))
    b = arm(template, tmp_path, "B", (1.0, 1.01))
    code, _, err = run("compare", *a, "--vs", *b, *argv, "--out", str(tmp_path / "c"), capsys=capsys)
    assert code == 4 and words in err and len(err.strip().splitlines()) == 1, err
    code = main(["ab", "small", "small", "--endpoint", "reference", *argv, "--out", str(tmp_path / "ab")])
    captured = capsys.readouterr()
    assert code == 4 and words in captured.err and len(captured.err.strip().splitlines()) == 1, captured.err
    assert not captured.out and not (tmp_path / "ab").exists()  # refused before any boot


def test_cold_first_bundles_are_warm_up_and_no_sample(template, tmp_path, capsys):
    """Each arm's first boot on the machine ran with cold caches, B's far slower (a cold compile
    cache): named as warm-up, it is verified, listed and left out of every figure."""
    a = arm(template, tmp_path, "A", (0.5, 1.0, 1.002, 0.998, 1.001))
    b = arm(template, tmp_path, "B", (0.2, 1.0, 1.002, 0.998, 1.001))
    code, stdout, _ = run("compare", *a, "--vs", *b, "--warm-up", "1", "--gate", "load.c1.output_tok_s",
                          "--out", str(tmp_path / "c"), capsys=capsys)
    c = json.loads((tmp_path / "c" / "comparison.json").read_text())
    assert code == 0, stdout
    assert [w["run_id"] for w in c["arms"]["A"]["warm_up_boots"]] == ["A1"]
    assert [bt["run_id"] for bt in c["arms"]["B"]["boots"]] == ["B2", "B3", "B4", "B5"]
    assert {f["id"]: f for f in c["figures"]}["load.c1.output_tok_s"]["b"]["boots"] == 4
    assert "the first 1 bundle(s) of each arm warmed the caches" in c["warm_up"]
    code, _, _ = run("compare", *a, "--vs", *b, "--gate", "load.c1.output_tok_s", "--out", str(tmp_path / "d"),
                     capsys=capsys)
    assert code != 0  # counted as samples, the cold boots decide nothing in B's favour
    code, _, err = run("compare", *a[:1], "--vs", *b, "--warm-up", "1", "--out", str(tmp_path / "e"), capsys=capsys)
    assert code == 4 and "no sample would be left" in err


# -- ab with boots written by a stand-in runner: warm-up order, --until-decided ------------------


class Boots:
    """Runs a boot by writing a sealed clone of the template into the boot's evidence folder, at a
    speed drawn per boot (seeded by the boot's name): ``ab`` itself decides, looks and stops."""

    def __init__(self, template: Template, *, b_speed: float, jitter: float, seed: int = 0,
                 b_lane_source: str | None = None):
        import random

        self.template, self.b_speed, self.jitter, self.seed = template, b_speed, jitter, seed
        self.b_lane_source = b_lane_source  # where B's lanes took their TTFT, where not the template's
        self.random = random
        self.names: list[str] = []

    def __call__(self, cmd: list[str], cwd: Path, env: dict[str, str]) -> tuple[int, str, str]:
        name = env["QUALIFY_REFERENCE_BOOT_SEED"]
        self.names.append(name)
        rng = self.random.Random(f"{self.seed}:{name}")
        factor = (self.b_speed if name.removeprefix("warm-up-").startswith("B") else 1.0) * math.exp(rng.gauss(0, self.jitter))
        if name.startswith("warm-up"):
            factor *= 0.3  # a cold boot
        evidence = Path(cmd[cmd.index("--qualify-evidence") + 1])
        s = speed(self.template.summary, factor)
        s["run"]["id"] = f"run-{name}-{self.seed}"
        if self.b_lane_source and name.removeprefix("warm-up-").startswith("B"):
            for lane in s["timing"]["lanes"]:  # as the summary writes it: each repetition, and the text
                lane["ttft_sources"] = [{**r, "source": self.b_lane_source} for r in lane["ttft_sources"]]
                lane["ttft_source"] = self.b_lane_source
        clone(self.template, evidence / s["run"]["id"], s)
        return 0, f"TIMING: PASS (stage timing; not a qualification) (exit 0) · evidence {evidence}", ""


def ab(argv: list[str], runner: Boots) -> int:
    import argparse

    from pytest_qualify.compare.cli import ab_main, add_parsers

    parser = argparse.ArgumentParser(prog="python -m pytest_qualify")
    add_parsers(parser.add_subparsers(dest="command", required=True))
    return ab_main(parser.parse_args(["ab", *argv]), runner=runner)


def test_ab_warms_each_arm_up_first_and_never_samples_it(template, tmp_path, capsys):
    runner = Boots(template, b_speed=1.0, jitter=0.002)
    code = ab(["small", "small", "--boots", "2", "--endpoint", "reference", "--gate", "load.c1.output_tok_s",
               "--out", str(tmp_path / "w")], runner)
    assert runner.names == ["warm-up-A1", "warm-up-B1", "A1", "B1", "B2", "A2"]
    c = json.loads((tmp_path / "w" / "comparison.json").read_text())
    assert code in (0, 2) and [len(c["arms"][x]["boots"]) for x in "AB"] == [2, 2]
    assert all(v > 0.9 * c["figures"][0]["a"]["values"][0] for f in c["figures"] if f["id"] == "load.c1.output_tok_s"
               for v in f["a"]["values"] + f["b"]["values"])  # no cold boot among the samples
    capsys.readouterr()


def test_until_decided_adds_pairs_and_stops_when_b_is_worse(template, tmp_path, capsys):
    """B 15% slower at 6% boot-to-boot jitter: three boots a side cannot tell; the campaign adds a
    pair a look, each look at its Pocock share of the alpha, and stops at B WORSE before its maximum."""
    runner = Boots(template, b_speed=0.85, jitter=0.06, seed=4)
    out = tmp_path / "seq"
    code = ab(["small", "small", "--boots", "3", "--warm-up", "0", "--until-decided", "--max-boots", "12",
               "--endpoint", "reference", "--gate", "load.c1.output_tok_s", "--out", str(out)], runner)
    stdout = capsys.readouterr().out
    c = json.loads((out / "comparison.json").read_text())
    validate_comparison(c)
    seq = c["sequential"]
    assert code == 1 and c["result"] == "B WORSE", stdout
    assert seq["spending"] == "pocock" and "Lan-DeMets" in seq["method"] and "Lan-DeMets" in c["method"]
    assert [look["boots_per_arm"] for look in seq["looks"]] == list(range(3, seq["stopped_at_boots"] + 1))
    assert 3 < seq["stopped_at_boots"] < 12 and [look["result"] for look in seq["looks"]][:-1] == \
        ["UNDECIDED"] * (len(seq["looks"]) - 1)
    assert len(c["arms"]["A"]["boots"]) == len(c["arms"]["B"]["boots"]) == seq["stopped_at_boots"]
    assert "look 1/10 at 3 boots per arm" in stdout
    # The pairs keep the campaign's alternation past the first look: A4 after B4, then A5 before B5.
    assert runner.names[6:10] == ["B4", "A4", "A5", "B5"]


def test_until_decided_needs_its_bound(template, tmp_path, capsys):
    runner = Boots(template, b_speed=1.0, jitter=0.01)
    assert ab(["small", "small", "--until-decided", "--out", str(tmp_path / "x")], runner) == 4
    assert ab(["small", "small", "--max-boots", "6", "--out", str(tmp_path / "x")], runner) == 4
    assert ab(["small", "small", "--boots", "4", "--until-decided", "--max-boots", "3", "--out", str(tmp_path / "x")],
              runner) == 4
    assert runner.names == [] and "--until-decided needs --max-boots" in capsys.readouterr().err


def test_until_decided_stops_at_the_first_look_when_a_gating_figure_is_left_out_by_its_sources(template, tmp_path,
                                                                                             capsys):
    """B's lanes took their TTFT from the engine's /metrics, A's from the client's chunks: the gating
    TTFT is not compared at any number of boots, so the campaign adds none past its first look."""
    lane = template.summary["timing"]["lanes"][0]["lane"]
    assert template.summary["timing"]["lanes"][0]["ttft_sources"]
    assert {r["source"] for r in template.summary["timing"]["lanes"][0]["ttft_sources"]} == {"client chunks"}
    runner = Boots(template, b_speed=1.0, jitter=0.002, b_lane_source="engine /metrics")
    out = tmp_path / "src"
    code = ab(["small", "small", "--boots", "2", "--warm-up", "0", "--until-decided", "--max-boots", "6",
               "--endpoint", "reference", "--gate", f"lane.{lane}.ttft_s", "--out", str(out)], runner)
    capsys.readouterr()
    c = json.loads((out / "comparison.json").read_text())
    assert code == 2 and c["result"] == "UNDECIDED" and c["decision"]["left_out"] == [f"lane.{lane}.ttft_s"]
    assert runner.names == ["A1", "B1", "B2", "A2"] and c["sequential"]["stopped_at_boots"] == 2
    assert "engine /metrics: B " in c["figures_left_out_reasons"][f"lane.{lane}.ttft_s"]
    assert any(r.startswith(f"gating figure lane.{lane}.ttft_s not compared: its boots measured it from different "
                            "sources") for r in c["reasons"])


def test_paired_boots_cancel_the_machines_drift(template, tmp_path, capsys):
    """A machine that slows 5% a pair; B 3% slower than A in every pair. Unpaired, the drift reads as
    spread and the call is undecided; --paired decides B worse on the adjacent pairs. Every
    comparison shows the pairs' estimate beside the deciding analysis."""
    drift = (1.0, 0.95, 0.90, 0.855)
    a = arm(template, tmp_path, "A", drift)
    b = arm(template, tmp_path, "B", tuple(d * 0.97 * j for d, j in zip(drift, (1.0, 1.002, 0.998, 1.001))))
    gate = ("--gate", "load.c1.output_tok_s", "--tolerance", "1")
    code, _, _ = run("compare", *a, "--vs", *b, *gate, "--out", str(tmp_path / "u"), capsys=capsys)
    unpaired = json.loads((tmp_path / "u" / "comparison.json").read_text())
    row = {f["id"]: f for f in unpaired["figures"]}["load.c1.output_tok_s"]
    assert code == 2 and row["analysis"] == "welch" and row["paired_difference_pct"] == pytest.approx(-3.0, abs=0.3)
    assert "adjacent pairs" in (tmp_path / "u" / "comparison.md").read_text()
    code, _, _ = run("compare", *a, "--vs", *b, *gate, "--paired", "--out", str(tmp_path / "p"), capsys=capsys)
    c = json.loads((tmp_path / "p" / "comparison.json").read_text())
    row = {f["id"]: f for f in c["figures"]}["load.c1.output_tok_s"]
    assert code == 1 and row["analysis"] == "paired" and row["call"] == "B worse"
    assert c["decision"]["analysis"] == "paired (adjacent boots)" and row["df"] == pytest.approx(3)
    code, _, _ = run("compare", *a, "--vs", *b[:3], *gate, "--paired", "--out", str(tmp_path / "x"), capsys=capsys)
    assert code == 2 and "do not pair up" in json.loads((tmp_path / "x" / "comparison.json").read_text())["reasons"][0]
