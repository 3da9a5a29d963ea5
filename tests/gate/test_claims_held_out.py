"""A required claim the run cannot produce never ends a qualification PASS: its module missing
from the run (INCOMPLETE naming the claim), its samples all come whole in one chunk ("not
measurable here"), or its profile not requiring the module that measures it (refused at load, a
usage error before any server starts)."""

from __future__ import annotations

import pytest

from pytest_qualify.gate.claims import NOT_IN_RUN, NOT_VERIFIABLE, evaluate_claims
from pytest_qualify.gate.decide import INCOMPLETE, PASS, ItemResult, RunRecord, decide
from pytest_qualify.gate.run_facts import RunFacts
from pytest_qualify.profiles import Claim, Claims, ProfileError, load_profile, module_registry
from pytest_qualify.promotion.stages import Stage

from .profile_files import small_text, write

SWEEP_TTFT = Claim(name="ttft_511", figure="ttft_s", claimed=0.196, direction="at_most", tolerance=0.1,
                   required=True, prompt_tokens=511)
LANE_TTFT = Claim(name="lane", figure="ttft_s", claimed=1.571, direction="at_most", tolerance=0.1, required=True,
                  lane="32K")
DECODE = Claim(name="decode", figure="decode_tok_s", claimed=38.77, direction="at_least", tolerance=0.05,
               required=True, prompt_tokens=2048)


def _record(claims: Claims, *, required=("smoke",), stage: Stage | None = None, timing: dict | None = None) -> RunRecord:
    item = ItemResult(nodeid="suites/test_smoke.py::test_health[rep1of1]", module="smoke", item="test_health",
                      repetition=1, repetitions=1)
    item.record("call", "passed", "")
    return RunRecord(results=(item,), modules=module_registry(), required=tuple(required), stage=stage, claims=claims,
                     facts=RunFacts(simulated=False, timing=timing or {}))


def test_a_required_claim_whose_module_is_not_in_a_qualification_leaves_it_incomplete_naming_the_claim():
    decision = decide(_record(Claims((SWEEP_TTFT, LANE_TTFT))))
    assert decision.verdict == INCOMPLETE
    text = " | ".join(decision.incomplete)
    assert "Recipe claims: TTFT (first chunk) at 511 prompt tokens" in text and "sweep module" in text
    assert "Recipe claims: TTFT (first chunk), 32K lane" in text and "context module" in text
    assert {r.status for r in decision.claims} == {NOT_VERIFIABLE}
    # Not required: listed, decides nothing.
    optional = Claim(**{**SWEEP_TTFT.__dict__, "required": False})
    assert decide(_record(Claims((optional,)))).verdict == PASS


def test_a_stage_that_is_no_qualification_lists_a_required_claim_outside_it():
    preflight = Stage(name="preflight", title="Functional preflight", verdict_label="PREFLIGHT", modules=("smoke",),
                      lanes=("240K",), qualifies=False, accepts_promoted=False)
    decision = decide(_record(Claims((SWEEP_TTFT,)), stage=preflight))
    assert decision.verdict == PASS and decision.claims[0].status == NOT_IN_RUN
    (row,) = evaluate_claims(Claims((SWEEP_TTFT,)), RunFacts(), ("smoke",), qualifies=True)
    assert row.status == NOT_VERIFIABLE and not row.ok and "sweep module" in row.reason


def test_a_claim_whose_samples_all_came_whole_is_not_measurable_here():
    timing = {"sweep": {"points": [{"prompt_tokens": 511, "samples": 0, "ttft_s": None, "prefill_tok_s": None}],
                        "decode": [{"prompt_tokens": 2048, "output_tokens": 128, "samples": 0, "decode_tok_s": None}]}}
    decision = decide(_record(Claims((SWEEP_TTFT, DECODE)), required=("smoke", "sweep"), timing=timing))
    assert decision.verdict == INCOMPLETE
    by = {r.name: r for r in decision.claims}
    assert all(r.measured is None and r.status == NOT_VERIFIABLE for r in by.values())
    assert "not measurable here" in by["ttft_511"].source and "one chunk" in by["ttft_511"].source
    assert "not measurable here" in by["decode"].source and "one chunk" in by["decode"].source


CLAIMS = """
[claims.ttft_2k]
figure = "ttft_s"
prompt_tokens = 2048
claimed = 0.5
direction = "at_most"
tolerance = 0.1
"""


@pytest.mark.parametrize("required", [True, False])
def test_a_profile_whose_required_claim_needs_a_module_it_does_not_require_is_refused_at_load(tmp_path, required):
    text = small_text()
    assert '"sweep"' not in text.split("[modules]", 1)[1]
    path = write(tmp_path, text + CLAIMS + ("required = true\n" if required else ""))
    if not required:
        assert load_profile(path).claims is not None  # listed as not in the run, decides nothing
        return
    with pytest.raises(ProfileError) as exc:
        load_profile(path)
    message = str(exc.value)
    assert "field 'claims.ttft_2k.required' is invalid" in message and "sweep module" in message
    assert "\n" not in message


def test_the_refusal_is_a_usage_error_before_any_server_starts(pytester, tmp_path):
    path = write(tmp_path, small_text() + CLAIMS + "required = true\n")
    # An endpoint nothing answers: reaching it would make the run INCOMPLETE (exit 2), not a usage error.
    result = pytester.runpytest_subprocess(f"--qualify={path}", "--qualify-endpoint", "http://127.0.0.1:9/v1")
    assert result.ret == 4
    err = result.stderr.str()
    assert "claims.ttft_2k.required" in err and "sweep module" in err and len(err.strip().splitlines()) == 1, err
    assert "QUALIFICATION" not in result.stdout.str()
