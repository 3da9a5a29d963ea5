"""The recipe's claims end to end against the reference server: a profile whose claims the SIMULATED
deployment meets passes with every claim held; each fault that breaks a serving figure the way a
real deployment would (a KV pool shrunk by half, a start-up slowed, a decode slowed) breaks exactly
the claims it should, in every direction (at least, at most, within), as a judged FAIL with both
figures in the reason, in every reader; attached to the same server, the facts no endpoint shows
(weight load, launch to ready) are "not verifiable here", and a required one leaves the run
INCOMPLETE."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..helpers import junit_failures, reference_server, run_pytest, suite, write_profile

from pytest_qualify.bundle_format.schema import validate

pytestmark = pytest.mark.e2e

CLAIMS = """
[sweep]
prompt_tokens = [512]
samples = 2
output_tokens = 4
decode_prompt_tokens = 512
decode_tokens = 32
decode_samples = 2

[claims]
source = "a test recipe"

[claims.kv_cache_tokens]
claimed = 8192
direction = "at_least"
required = true
said = "8,192 tokens of KV"

[claims.max_concurrency]
claimed = 2.0
direction = "at_least"
required = true

[claims.kv_cache_gib]
claimed = 1.0
direction = "within"
tolerance = 0.1

[claims.model_memory_gib]
claimed = 1.5
direction = "within"
tolerance = 0.05

[claims.weight_load_s]
claimed = 2.0
direction = "at_most"
tolerance = 0.1
required = true

[claims.startup_s]
claimed = 8
direction = "at_most"
required = true

[claims.decode]
figure = "decode_tok_s"
prompt_tokens = 512
claimed = 300
direction = "at_least"
required = true

[claims.ttft]
figure = "ttft_s"
prompt_tokens = 512
claimed = 2.0
direction = "at_most"
"""


def profile(tmp_path: Path) -> Path:
    path = write_profile(tmp_path, ("sweep",), name="claims.toml")
    path.write_text(path.read_text() + CLAIMS)
    return path


def qualify(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], dict, Path]:
    ev = tmp_path / "ev"
    run = run_pytest(*suite("sweep"), f"--qualify={profile(tmp_path)}", "--qualify-evidence", str(ev),
                     "-p", "no:randomly", *args, cwd=tmp_path, timeout=600)
    (bundle,) = [p for p in ev.iterdir() if p.is_dir()]
    summary = json.loads((bundle / "summary.json").read_text())
    validate(summary)
    return run, summary, bundle


def statuses(summary: dict) -> dict[str, str]:
    return {c["name"]: c["status"] for c in summary["claims"]}


ALL_HELD = {"kv_cache_tokens": "held", "max_concurrency": "held", "kv_cache_gib": "held", "model_memory_gib": "held",
            "weight_load_s": "held", "startup_s": "held", "decode": "held", "ttft": "held"}


def test_a_deployment_meeting_its_claims_passes_with_each_claim_held(tmp_path):
    run, summary, bundle = qualify(tmp_path, "--qualify-endpoint", "reference")
    assert run.returncode == 0, run.stdout[-3000:]
    assert statuses(summary) == ALL_HELD
    # The facts are read from the engine (its SIMULATED log line), shown after start-up and in every reader.
    assert "qualify: SIMULATED serving facts (vLLM" in run.stdout and "KV cache 8,192 tokens" in run.stdout
    facts = summary["serving_facts"]
    assert facts["simulated"] and facts["facts"]["kv_cache_tokens"]["value"] == 8192
    assert facts["facts"]["kv_cache_tokens"]["status"] == "simulated"
    assert summary["timing"]["sweep"]["points"][0]["prompt_tokens"] == 512
    assert summary["timing"]["sweep"]["points"][0]["samples"] == 2
    assert summary["timing"]["sweep"]["decode"][0]["output_tokens"] == 32
    report = (bundle / "report.md").read_text()
    assert "## Serving facts (SIMULATED)" in report and "## Recipe claims" in report
    assert "| Recipe claims: KV cache tokens | 8,192 tokens held (claimed at least 8,192 tokens (−0%)) |" in report
    html = (bundle / "report.html").read_text()
    assert 'id="claim-kv_cache_tokens"' in html and "Serving facts (SIMULATED)" in html


@pytest.mark.parametrize(("fault", "broken"), [
    # Half the KV pool: fewer tokens (at least), less concurrency at the window (at least), and the
    # KV memory outside its band (within).
    ("kv_pool_shrink", {"kv_cache_tokens", "max_concurrency", "kv_cache_gib"}),
    # Ten seconds more before the server listens: launch to ready (at most), and the weight load
    # its log reports (at most).
    ("slow_startup=10", {"startup_s", "weight_load_s"}),
    # Decode twenty times slower: the single-stream decode probe (at least).
    ("slow_decode=20", {"decode"}),
])
def test_each_fault_breaks_exactly_its_claims(tmp_path, fault, broken):
    run, summary, bundle = qualify(tmp_path, "--qualify-endpoint", "reference", "--qualify-reference-fault", fault)
    assert run.returncode == 1, run.stdout[-3000:]
    assert statuses(summary) == {**ALL_HELD, **dict.fromkeys(broken, "broken")}
    assert summary["verdict"]["result"] == "FAIL"
    for row in summary["claims"]:
        if row["name"] in broken:
            # Both figures in the reason, and the gate's test case in JUnit.
            assert row["measured_text"] in row["reason"] and row["claimed_text"] in row["reason"], row
            assert any(row["title"] in r for r in summary["verdict"]["reasons"])
    failures = junit_failures(bundle / "junit.xml")
    assert sum(1 for name in failures if name.startswith("recipe_claims")) == len(broken), sorted(failures)
    assert f"broken (claimed" in (bundle / "report.md").read_text()


@pytest.fixture
def attached(tmp_path: Path) -> Iterator[str]:
    yield from reference_server(profile(tmp_path))


def test_attached_the_facts_no_endpoint_shows_are_not_visible_and_a_required_claim_leaves_the_run_incomplete(
        tmp_path, attached):
    run, summary, _ = qualify(tmp_path, "--qualify-endpoint", attached)
    assert run.returncode == 2, run.stdout[-3000:]
    facts = summary["serving_facts"]["facts"]
    # /metrics shows the KV pool (SIMULATED: the endpoint says it is); nothing shows the start-up.
    assert facts["kv_cache_tokens"]["value"] == 8192 and "/metrics" in facts["kv_cache_tokens"]["source"]
    for key in ("weight_load_s", "startup_s", "model_memory_gib", "compile_s"):
        assert facts[key]["status"] == "not visible here", key
    got = statuses(summary)
    assert got["weight_load_s"] == got["startup_s"] == got["model_memory_gib"] == "not verifiable here"
    assert got["kv_cache_tokens"] == got["decode"] == "held"
    assert summary["verdict"]["result"] == "INCOMPLETE"
    assert any("weight load" in r and "not verifiable here" in r for r in summary["verdict"]["incomplete"])
    # Not required: listed, deciding nothing.
    row = next(c for c in summary["claims"] if c["name"] == "model_memory_gib")
    assert row["ok"] and not row["required"]


def test_the_recipes_profile_runs_on_the_reference_server_and_says_simulated(tmp_path):
    ev = tmp_path / "ev"
    run = run_pytest("--qualify=a1-spark-recipe", "--qualify-endpoint", "reference", "--qualify-evidence", str(ev),
                     "-p", "no:randomly", cwd=tmp_path, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:]
    last = run.stdout.strip().splitlines()[-1]
    assert last.startswith("QUALIFICATION: PASS (exit 0)") and "SIMULATED" in last, last
    (bundle,) = [p for p in ev.iterdir() if p.is_dir()]
    summary = json.loads((bundle / "summary.json").read_text())
    assert {c["status"] for c in summary["claims"]} == {"held"} and len(summary["claims"]) == 13
    assert all("SIMULATED" in c["source"] for c in summary["claims"]), [c["source"] for c in summary["claims"]]
    assert [p["prompt_tokens"] for p in summary["timing"]["sweep"]["points"]] == [511, 2042, 8208, 144_950, 253_840]
    assert all(p["samples"] == 3 and p["measured_prompt_tokens"] == [p["prompt_tokens"]]
               for p in summary["timing"]["sweep"]["points"])
    assert summary["timing"]["sweep"]["decode"][0]["output_tokens"] == 256
    assert summary["artifacts"]["plot"] and (bundle / summary["artifacts"]["plot"]).stat().st_size > 0
