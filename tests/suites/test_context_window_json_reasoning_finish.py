"""End to end through pytester against the reference server: the context, window, JSON, reasoning and
finish modules pass on a conforming server, and each fault fails exactly its module's tests, with a
reason that names the lane, case or repetition."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest

from ..helpers import QualifyPytest, write_profile
from pytest_qualify.hooks.collection import suites_dir

MODULES = ["context", "window", "json", "reasoning", "finish"]
SUITES = [str(suites_dir() / f"test_{m}.py") for m in MODULES]
# Test function -> module, for the suites above.
MODULE_OF = {
    "test_context_retrieval": "context",
    "test_prompt_that_fits_is_answered": "window",
    "test_prompt_over_window_is_refused": "window",
    "test_json_task": "json",
    "test_no_reasoning_leak": "reasoning",
    "test_thinking_override": "reasoning",
    "test_finish_state": "finish",
}


@dataclass(frozen=True)
class Case:
    name: str  # test id with parameters, e.g. test_context_retrieval[2K-rep1of1]
    outcome: str  # passed | failed | skipped
    message: str
    properties: dict[str, str]

    @property
    def module(self) -> str:
        return MODULE_OF[self.name.split("[")[0]]


def run(qualify_pytest: QualifyPytest, prof: str, *args: str, faults: tuple[str, ...] = (), repeat: int = 1,
        suites: list[str] = SUITES) -> tuple[pytest.RunResult, list[Case]]:
    result = qualify_pytest(*args, profile=prof, faults=faults, repeat=repeat, suites=suites)
    cases = []
    # The items' figures from summary.json (xunit2 JUnit has no testcase properties); the gate's
    # own run-level test cases are not items.
    figures = qualify_pytest.item_properties() if qualify_pytest.evidence.is_dir() else {}
    for key, tc in qualify_pytest.cases().items():
        if key.startswith("qualify.gate::"):
            continue
        failure = tc.find("failure")
        if failure is None:
            failure = tc.find("error")
        outcome = "failed" if failure is not None else ("skipped" if tc.find("skipped") is not None else "passed")
        props = figures.get(tc.get("name"), {})
        # The element text too: pytest 9.2 shortens a long ``message`` attribute.
        message = ((failure.get("message") or "") + "\n" + (failure.text or "")).removeprefix("Failed: ") if failure is not None else ""
        cases.append(Case(tc.get("name"), outcome, message, props))
    return result, cases


def failed(cases: list[Case]) -> dict[str, str]:
    return {c.name: c.message for c in cases if c.outcome != "passed"}


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> str:
    return str(write_profile(tmp_path_factory.mktemp("profiles"), MODULES))


def test_conforming_server_passes_every_module_with_evidence(qualify_pytest, small):
    result, cases = run(qualify_pytest, small, repeat=2)
    assert result.ret == 0, result.stdout.str()[-3000:]
    result.stdout.fnmatch_lines(["*QUALIFICATION: PASS*"])
    assert {c.module for c in cases} == set(MODULES) and all(c.outcome == "passed" for c in cases)
    lanes = {"1K": 1024, "2K": 2048, "3K": 3072}
    context = [c for c in cases if c.module == "context"]
    assert len(context) == 6
    for c in context:
        p = c.properties
        assert abs(int(p["prompt_tokens"]) - lanes[p["lane"]]) <= 32
        assert int(p["tokenize_calls"]) <= 6 and p["needle_key"] and p["haystack_seed"]
        assert float(p["needle_depth"]) in (0.1, 0.3, 0.5, 0.7, 0.9)
        assert p["finish_check"] == "ok" and p["finish_reason"] == "stop" and p["cached_tokens"] == "0"
        assert "ttft_s" in p and "e2e_s" in p
    # A fresh haystack for every lane and repetition.
    assert len({c.properties["haystack_seed"] for c in context}) == 6
    window = {c.name: c.properties for c in cases if c.module == "window"}
    assert int(window["test_prompt_that_fits_is_answered[rep1of2]"]["fit_prompt_tokens"]) == 4096 - 256
    assert int(window["test_prompt_over_window_is_refused[rep1of2]"]["over_prompt_tokens"]) == 4097
    assert window["test_prompt_over_window_is_refused[rep1of2]"]["overwindow_status"] == "400"


def test_240k_lane_lands_within_tolerance_in_six_tokenize_calls(qualify_pytest, tmp_path):
    prof = write_profile(tmp_path, ["context"], base="262k", lanes=[("240K", 245_760)])
    result, cases = run(qualify_pytest, prof, suites=[SUITES[0]])
    assert result.ret == 0, result.stdout.str()[-3000:]
    (case,) = cases
    assert abs(int(case.properties["prompt_tokens"]) - 245_760) <= 256
    assert int(case.properties["tokenize_calls"]) <= 6
    # The server's own request log agrees: the lane cost at most six /tokenize round trips.
    (log,) = qualify_pytest.evidence.glob("*/server.log")
    assert 1 <= log.read_text().count('"POST /tokenize ') <= 6


CONTEXT = [f"test_context_retrieval[{lane}-REP]" for lane in ("1K", "2K", "3K")]
JSON = [f"test_json_task[REP-{t}]" for t in ("order", "meeting", "review", "speed", "prime")]
OVERRIDE = ["test_thinking_override[REP-plain]", "test_thinking_override[REP-streamed]"]
REASONING = [f"test_no_reasoning_leak[REP-{p}-{s}]" for p in ("sky", "train", "spider") for s in ("plain", "streamed")] + OVERRIDE
FINISH = [f"test_finish_state[REP-{p}-{s}]" for p in ("planet", "sum", "opposite") for s in ("plain", "streamed")]
OVER = ["test_prompt_over_window_is_refused[REP]"]

OVERRIDE_TOOK_EFFECT = (r"the caller's chat_template_kwargs enable_thinking=True took effect, although thinking is disabled "
                        r"and not caller-overridable: ")
# Each fault: the tests it must fail (REP: in every repetition; every other test must pass) and what
# each reason must say.
FAULTS = {
    "drop_needle=2K": (["test_context_retrieval[2K-REP]"],
                       r"^2K lane, repetition \d: answer .* gives distractor value '[\w-]+' \(key '\w+'\), not needle value '[\w-]+'"),
    "fail_repetition=2": ([f"test_context_retrieval[{lane}-rep2of2]" for lane in ("1K", "2K", "3K")],
                          r"^(1K|2K|3K) lane, repetition 2: answer .* lacks needle value '[\w-]+' \(key '\w+'\): .* one character off"),
    "cached_tokens": (CONTEXT, r"^(1K|2K|3K) lane, repetition \d: \d+ of \d+ prompt tokens came from the prefix cache"),
    "json_nondeterministic": (JSON, r"^task \w+, repetition \d: two answers to the same request parse to different values: field"),
    "json_invalid": (JSON, r"^task \w+, repetition \d: format: content is not valid JSON"),
    "leak_reasoning": (REASONING, r"(prompt \w+|enable_thinking=True).*repetition \d.*: reasoning field populated"),
    "leak_think_tag": (REASONING, r"repetition \d.*: reasoning markers in the visible content: '<think>'"),
    "thinking_overridable": (OVERRIDE, r"^chat_template_kwargs enable_thinking=True with thinking disabled and not overridable, "
                                       r"(not )?streamed, repetition \d: " + OVERRIDE_TOOK_EFFECT + r"reasoning field populated"),
    # vLLM 0.26.0's way of honouring it: whitespace until the budget, no visible answer.
    "thinking_override_blank": (OVERRIDE, r"^chat_template_kwargs enable_thinking=True with thinking disabled and not overridable, "
                                          r"(not )?streamed, repetition \d: " + OVERRIDE_TOOK_EFFECT
                                          + r"the reasoning field holds 256 characters of whitespace, none without the override; "
                                            r"the answer budget was spent on reasoning \(finish_reason 'length' after 256 completion "
                                            r"tokens, no visible answer; without the override finish_reason"),
    "finish_length": (FINISH, r"^finish state: answer budget exhausted \(finish_reason 'length' after \d+ completion tokens\)"),
    "empty_answer": (FINISH, r"^finish state: empty answer: no visible content"),
    "overwindow_500": (OVER, r"^window 4096, repetition \d: over-window prompt \(4097 tokens, window 4096\) got HTTP 500, expected 400"),
    "overwindow_accept": (OVER, r"^window 4096, repetition \d: over-window prompt \(4097 tokens, window 4096\) was answered \(HTTP 200\)"),
}
# Faults of different modules share a run (a run costs seconds of start-up on a 2-core CI box).
# Each failing test's reason must be its own module's fault: a fault leaking into another module
# would fail that module's tests with a reason of the wrong kind, or fail tests no fault targets.
FAULT_RUNS = [
    (("drop_needle=2K", "json_nondeterministic", "leak_reasoning", "finish_length", "overwindow_500"), 1),
    (("cached_tokens", "json_invalid", "leak_think_tag", "empty_answer", "overwindow_accept"), 1),
    (("fail_repetition=2", "thinking_overridable"), 2),
    (("thinking_override_blank",), 1),
]


def _key(name: str) -> str:
    # Parameter order in ids follows pytest's parametrization order; compare the parts as a set.
    base, _, params = name.partition("[")
    return base + "[" + "-".join(sorted(params.rstrip("]").split("-"))) + "]"


@pytest.mark.parametrize("faults, repeat", FAULT_RUNS, ids=["+".join(f.split("=")[0] for f in r[0]) for r in FAULT_RUNS])
def test_each_fault_fails_exactly_its_tests_with_its_reason(qualify_pytest, small, faults, repeat):
    result, cases = run(qualify_pytest, small, faults=faults, repeat=repeat)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*QUALIFICATION: FAIL*"])
    expected: dict[str, str] = {}
    for fault in faults:
        names, reason = FAULTS[fault]
        for name in names:
            for one in {name.replace("REP", f"rep{rep}of{repeat}") for rep in range(1, repeat + 1)}:
                assert _key(one) not in expected, f"{fault} and another fault in the run target {one}"
                expected[_key(one)] = reason
    bad = {_key(n): m for n, m in failed(cases).items()}
    assert set(bad) == set(expected), f"unexpected: {sorted(set(bad) - set(expected))}; missing: {sorted(set(expected) - set(bad))}"
    for name, message in bad.items():
        assert re.search(expected[name], message), f"{name}: {message}"


def test_every_fault_of_these_modules_is_exercised():
    from pytest_qualify.reference import oracle_context, oracle_finish, oracle_json, oracle_reasoning

    names = {f.split("=")[0] for run_faults, _ in FAULT_RUNS for f in run_faults}
    mods = (oracle_context, oracle_json, oracle_reasoning, oracle_finish)
    own = {name for mod in mods for name in (*getattr(mod, "FAULTS", {}), *getattr(mod, "SERVED_FAULTS", {}))}
    # timed_answer_differs is the integrity module's to catch (tests/suites/test_integrity.py);
    # leak_reasoning_unmarked and leak_reasoning_one_line need thinking enabled (tests/suites/test_reasoning_thinking_on.py).
    assert own - {"timed_answer_differs", "leak_reasoning_unmarked", "leak_reasoning_one_line"} | {"overwindow_500", "overwindow_accept"} == names


def test_salt_ignoring_prefix_cache_is_caught_by_context(qualify_pytest, small):
    # The server-wide fault: context prompts share a short template prefix, which a cache that
    # ignores cache_salt serves from an earlier request.
    result, cases = run(qualify_pytest, small, faults=("ignore_cache_salt",), repeat=2, suites=[SUITES[0]])
    bad = failed(cases)
    assert len(bad) >= 5, sorted(bad)  # every context request after the very first one
    assert all("came from the prefix cache" in m for m in bad.values())


def test_window_hang_and_dead_server_fail_with_a_reason(qualify_pytest, tmp_path):
    prof = write_profile(tmp_path, ["window"], request_s=3, per_1k_prompt_tokens_s=0.0)
    window = [SUITES[1], "-k", "over_window"]
    # The over-window request is the first chat request: it hangs, then the server dies on it.
    result, cases = run(qualify_pytest, prof, faults=("hang_after=0",), suites=window)
    (case,) = cases
    assert case.outcome == "failed" and re.search(r"time[sd]? ?out", case.message, re.I), case.message
    result, cases = run(qualify_pytest, prof, faults=("die_after=0",), suites=window)
    (case,) = cases
    assert case.outcome == "failed" and re.search(r"died|gone|refuse|connection", case.message, re.I), case.message
