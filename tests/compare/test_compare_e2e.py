"""``python -m pytest_qualify compare`` and ``ab`` end to end: one real timing-stage boot against the
reference server, cloned into boots whose figures carry a known shift (the clone's summary still
validates), then the command's files, calls, attribution and exit codes; and one ``ab`` campaign of
interleaved reference boots where B's server is slower."""

from __future__ import annotations

import copy
import shutil
import json
import sys
from pathlib import Path

import pytest

from pytest_qualify.__main__ import main
from pytest_qualify.bundle_format.schema import validate
from pytest_qualify.compare.render import validate as validate_comparison

from .helpers_compare import one_boot

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> dict:
    return one_boot(tmp_path_factory.mktemp("boot"))


def make_boot(template: dict, folder: Path, *, factor: float = 1.0, run_id: str, host_kind: str | None = None,
              simulated: bool | None = None, failed: tuple[str, ...] = (), verdict: str | None = None,
              lane_tokens: int | None = None, task_data: str | None = None) -> Path:
    """A boot whose speed is ``factor`` times the template's: rates times it, times divided by it."""
    s = copy.deepcopy(template)
    s["run"]["id"] = run_id
    for lane in s["timing"]["lanes"]:
        for key in ("ttft_s", "e2e_s"):
            lane[key]["median"] /= factor
        lane["prefill_tok_s"]["median"] *= factor
    for level in s["timing"]["load"]["levels"]:
        for key in ("ttft_s_p50", "tpot_s_p50", "itl_s_p50", "itl_token_s_p50"):
            if level.get(key) is not None:
                level[key] /= factor
        for key in ("output_tok_s", "requests_per_s"):
            level[key] *= factor
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
    validate(s)
    folder.mkdir(parents=True)
    (folder / "summary.json").write_text(json.dumps(s))
    return folder


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
    assert "Method: per figure: Welch" in md and "| **B worse** |" in md
    assert page.count("<svg") == len(c["figures"]) and "SIMULATED" in page
    assert (out / "SHA256SUMS").read_text().count("  comparison.") == 3


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


def test_a_noise_floor_gives_each_figure_its_tolerance(template, tmp_path, capsys):
    from pytest_qualify.bundle_format.workload import of_summary
    from pytest_qualify.compare.noise import NOISE_FILE, noise_floor, write_noise_floor

    a = arm(template, tmp_path, "A", (1.0, 1.02, 0.98))
    b = arm(template, tmp_path, "B", (1.01, 0.99, 1.0))
    run("compare", *a, "--vs", *b, "--out", str(tmp_path / "aa"), capsys=capsys)
    aa = json.loads((tmp_path / "aa" / "comparison.json").read_text())
    floor = noise_floor(aa["figures"], workload=of_summary(template), spread="boot-to-boot")
    path = write_noise_floor(floor, tmp_path)
    assert path.name == NOISE_FILE and 2 < floor["figures"]["load.c1.output_tok_s"]["tolerance_pct"] < 6
    code, _, _ = run("compare", *a, "--vs", *b, "--noise-floor", str(path), "--out", str(tmp_path / "n"), capsys=capsys)
    c = json.loads((tmp_path / "n" / "comparison.json").read_text())
    row = {f["id"]: f for f in c["figures"]}["load.c1.output_tok_s"]
    assert row["tolerance_source"] == "noise floor"
    assert row["tolerance_pct"] == pytest.approx(floor["figures"]["load.c1.output_tok_s"]["tolerance_pct"])


def test_ab_interleaves_reference_boots_and_calls_the_slower_b_worse(tmp_path, capsys):
    """Six boots of the reference server, A, B, B, A, A, B; B's server decodes at half the rate."""
    out = tmp_path / "ab"
    code = main(["ab", "small", "small", "--boots", "3", "--endpoint", "reference", "--out", str(out),
                 "--a-env", "QUALIFY_REFERENCE_DECODE_TOK_S=150", "--b-env", "QUALIFY_REFERENCE_DECODE_TOK_S=150",
                 "--b-env", "QUALIFY_REFERENCE_SPEED=0.5", "--gate", "load.c1.output_tok_s"])
    stdout = capsys.readouterr().out
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
        stdout = capsys.readouterr().out
    finally:
        for s in servers:
            s.terminate()
            s.wait(30)
    assert code == 0, stdout
    assert "the spread is run-to-run, not boot-to-boot" in stdout
    c = json.loads((out / "comparison.json").read_text())
    assert c["spread"] == "run-to-run" and c["arms"]["A"]["identity"]["mode"] == "attach"
    assert "spread is run-to-run, not boot-to-boot" in (out / "comparison.md").read_text()
    # Two endpoints are two arms even of one profile: no noise floor is measured from them.
    assert not (out / "noise-floor.json").exists()


def test_ab_of_a_recipe_against_itself_writes_its_noise_floor(tmp_path, capsys):
    """A/A: the recipe's own boot-to-boot spread, written for a later comparison's tolerance."""
    from pytest_qualify.bundle_format.workload import of_summary
    from pytest_qualify.compare.noise import read_noise_floor

    out = tmp_path / "aa"
    code = main(["ab", "small", "small", "--boots", "2", "--endpoint", "reference", "--out", str(out)])
    stdout = capsys.readouterr().out
    assert code == 0, stdout
    assert "A/A: measuring the noise floor" in stdout and f"noise floor: {out / 'noise-floor.json'}" in stdout
    floor = json.loads((out / "noise-floor.json").read_text())
    assert floor["schema"] == "pytest-qualify/noise-floor" and "two standard deviations" in floor["rule"]
    assert floor["figures"]["load.c1.output_tok_s"]["boots"] == 4
    (boot,) = [p for p in (out / "boots" / "A1").iterdir() if p.is_dir() and not p.name.startswith(".")]
    workload = of_summary(json.loads((boot / "summary.json").read_text()))
    tolerances = read_noise_floor(out / "noise-floor.json", workload)
    assert tolerances["load.c1.output_tok_s"] == floor["figures"]["load.c1.output_tok_s"]["tolerance_pct"]


def test_ab_of_a_fast_but_wrong_b_exits_1_with_its_item_regressions(tmp_path, capsys):
    """B's reference server decodes twice as fast but drops the needle of the longest lane (its
    fault, through B's own pytest options): the timing stage still grades, so B's speed wins it
    nothing: its failed lane items are regressions attributed to B."""
    out = tmp_path / "ab"
    code = main(["ab", "small", "small", "--boots", "2", "--endpoint", "reference", "--out", str(out),
                 "--b-env", "QUALIFY_REFERENCE_SPEED=2",
                 "--b-env", "PYTEST_ADDOPTS=--qualify-reference-fault=drop_needle"])
    stdout = capsys.readouterr().out
    assert code == 1, stdout
    c = json.loads((out / "comparison.json").read_text())
    assert [b["verdict"] for b in c["arms"]["A"]["boots"]] == ["PASS", "PASS"]
    assert [b["verdict"] for b in c["arms"]["B"]["boots"]] == ["FAIL", "FAIL"]
    regressions = [row["item"] for row in c["items"] if row["kind"] == "regression"]
    assert regressions == ["context::test_context_retrieval[3K]"], c["items"]
    assert c["reasons"] == [f"item regression: {regressions[0]} failed only in B"]
