"""The tools, recall, diff and triage suites against the reference server.

End to end through pytester (faults of different tests share a run): clean, they pass; each fault
switch fails exactly the tests it breaks, with a reason that names the case and the repetition. In process:
each fault leaves the answers to the other three modules' requests untouched.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from ..helpers import QualifyPytest, suite
from pytest_qualify.graders.tools import canonical_arguments
from pytest_qualify.tasks.fixture_data import diff_cases as load_diff_cases
from pytest_qualify.tasks.fixture_data import recall_fixtures as load_recall_fixtures
from pytest_qualify.tasks.fixture_data import tool_fixtures as load_tool_fixtures
from pytest_qualify.tasks.fixture_data import triage_incidents as load_incidents
from pytest_qualify.hooks.collection import suites_dir
from pytest_qualify.profiles import load_profile
from pytest_qualify.reference import oracle
from pytest_qualify.reference.faults import Faults

MODULES = ("tools", "recall", "diff", "triage")
SUITES = [str(suites_dir() / f"test_{m}.py") for m in MODULES]
FAILED_RE = re.compile(r"^FAILED \S*suites/test_(\w+)\.py::(\w+)\[(\S+?)\]")


def run(qualify_pytest: QualifyPytest, repeat: int, suites: list[str], *faults: str) -> pytest.RunResult:
    return qualify_pytest("-rf", modules=MODULES, repeat=repeat, faults=faults, suites=suites)


def failures(result: pytest.RunResult) -> set[tuple[str, str, str]]:
    """(module, test function, parameters) of every failed test."""
    return {m.groups() for line in result.stdout.lines if (m := FAILED_RE.match(line))}


def gate_row(result: pytest.RunResult, title: str) -> str:
    return next(line for line in result.stdout.lines if line.startswith(title))


def test_clean_run_passes_every_module(qualify_pytest):
    result = run(qualify_pytest, 1, SUITES)
    outcomes = result.parseoutcomes()
    assert result.ret == 0, result.stdout.str()[-3000:]
    assert outcomes["passed"] == 27 + 3 + 3 + 3 and "failed" not in outcomes
    assert "QUALIFICATION: PASS" in result.stdout.str()
    assert "27/27" in gate_row(result, "Automatic tool calling")


TOOL_CALL_TESTS = {"test_tool_call", "test_round_trip", "test_streamed_calls"}

# fault → (module, the test functions it must fail (all their items, or only those of one
# repetition), a phrase of the reason)
FAULTS = {
    "wrong_tool_args": ("tools", TOOL_CALL_TESTS, "wrong_value: argument", None),
    "tool_in_text": ("tools", TOOL_CALL_TESTS, "written as text", None),
    "tool_name_repeated_in_stream": ("tools", {"test_streamed_calls"}, "function name not streamed exactly once", None),
    "irrelevant_tool_call": ("tools", {"test_no_tool_fits"}, "expected no tool call", None),
    "recall_near_miss": ("recall", {"test_recall"}, "holds the near-miss value", None),
    "recall_fail_repetition=2": ("recall", {"test_recall"}, "format: not one JSON object", 2),
    "bad_diff_hunk": ("diff", {"test_unified_diff"}, "corrupt patch", None),
    "triage_red_herring": ("triage", {"test_timeout_triage"}, "is a red herring", None),
}
# Faults that break different tests share a run (a run costs seconds of start-up on a 2-core CI
# box); the run's failures must be exactly the union, each with its own fault's reason.
FAULT_RUNS = [
    (("wrong_tool_args", "recall_near_miss", "bad_diff_hunk", "triage_red_herring"), 1),
    (("tool_in_text", "irrelevant_tool_call"), 1),
    (("tool_name_repeated_in_stream", "recall_fail_repetition=2"), 2),
]


def items_of(functions: set[str], repeat: int = 1) -> set[tuple[str, str, str]]:
    """(module, test function, parameters) of every item of these test functions, from the fixtures."""
    tools = load_tool_fixtures()
    ids = {
        "test_tool_call": ("tools", [c.id for c in tools.cases + tools.parallel]),
        "test_no_tool_fits": ("tools", [c.id for c in tools.irrelevance]),
        "test_round_trip": ("tools", [c.id for c in tools.round_trip]),
        "test_streamed_calls": ("tools", list(tools.streaming)),
        "test_recall": ("recall", [c.id for c in load_recall_fixtures().conversations]),
        "test_unified_diff": ("diff", [c.id for c in load_diff_cases()]),
        "test_timeout_triage": ("triage", [i.id for i in load_incidents()]),
    }
    return {(ids[f][0], f, f"rep{r}of{repeat}-{case}") for f in functions for case in ids[f][1] for r in range(1, repeat + 1)}


def reason_lines(result: pytest.RunResult, module: str) -> list[str]:
    """The gate summary's failure lines of one module."""
    return [line for line in result.stdout.lines if line.startswith(f"  - {module}: ")]


def test_every_fault_is_exercised():
    assert sorted(f for run_faults, _ in FAULT_RUNS for f in run_faults) == sorted(FAULTS)


@pytest.mark.parametrize("faults, repeat", FAULT_RUNS, ids=["+".join(f.split("=")[0] for f in r[0]) for r in FAULT_RUNS])
def test_each_fault_fails_exactly_its_tests(qualify_pytest, faults, repeat):
    expected: dict[tuple[str, str, str], str] = {}  # item -> the fault that must fail it
    for fault in faults:
        module, functions, _, only = FAULTS[fault]
        for item in items_of(functions, repeat):
            if only is None or item[2].startswith(f"rep{only}of"):
                assert item not in expected, f"{fault} and {expected[item]} both target {item}"
                expected[item] = fault
    modules = sorted({FAULTS[f][0] for f in faults})
    result = run(qualify_pytest, repeat, [s for m in modules for s in suite(m)], *faults)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert failures(result) == set(expected)
    out = result.stdout.str()
    assert "QUALIFICATION: FAIL" in out
    for (_, _, params), fault in expected.items():
        rep, case = params.split("-", 1)
        phrase = FAULTS[fault][2]
        # The reason names the case and the repetition, and says what went wrong.
        assert re.search(rf"(case|conversation|incident) {case}, repetition {rep[3]}\b.*{re.escape(phrase)}", out), (fault, params)
    for module in modules:
        assert len(reason_lines(result, module)) == len([i for i in expected if i[0] == module])
    if "recall_fail_repetition=2" in faults:
        assert "3/6" in gate_row(result, "Session recall")


# -- isolation: a fault of one module changes no answer of the other three ----------------------


def module_requests() -> dict[str, list[dict[str, Any]]]:
    """Request bodies as the suites send them, per module (the round trip's second turn included)."""
    tools = load_tool_fixtures()
    offered = {"tools": list(tools.tools), "tool_choice": "auto"}

    def chat(messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        return {"model": "m", "messages": messages, **extra}

    def ask(prompt: str) -> list[dict[str, Any]]:
        return [{"role": "system", "content": tools.system}, {"role": "user", "content": prompt}]

    tool_requests = [chat(ask(c.prompt), **offered) for c in tools.cases + tools.parallel + tools.irrelevance]
    for rt in tools.round_trip:
        tool_requests.append(chat(ask(rt.prompt), **offered))
        tool_requests.append(chat(ask(rt.prompt) + [
            {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function", "function": {
                "name": rt.calls[0].name, "arguments": json.dumps(canonical_arguments(rt.calls[0].arguments))}}]},
            {"role": "tool", "tool_call_id": "c1", "content": json.dumps({**rt.result, rt.result_field: 123.45})},
        ], **offered))
    recall = load_recall_fixtures()
    return {
        "tools": tool_requests,
        "recall": [chat(c.messages(recall.system)) for c in recall.conversations],
        "diff": [chat([{"role": "user", "content": c.prompt}]) for c in load_diff_cases()],
        "triage": [chat([{"role": "user", "content": i.prompt}]) for i in load_incidents()],
    }


ORACLE_FAULTS = {
    "wrong_tool_args": "tools", "tool_in_text": "tools", "irrelevant_tool_call": "tools",
    "recall_near_miss": "recall", "recall_fail_repetition=2": "recall",
    "bad_diff_hunk": "diff", "triage_red_herring": "triage",
}


@pytest.mark.parametrize("fault", sorted(ORACLE_FAULTS))
def test_fault_changes_only_its_own_module(fault):
    profile = load_profile("small")
    clean = oracle.OracleContext(profile, Faults.parse([]))
    faulty = oracle.OracleContext(profile, Faults.parse([fault]))
    changed = set()
    # Three rounds, as in --repeat 3: faults that count occurrences act on some rounds only.
    for _ in range(3):
        for module, bodies in module_requests().items():
            for body in bodies:
                request = oracle.ChatRequest(body)
                if oracle.answer(request, clean) != oracle.answer(request, faulty):
                    changed.add(module)
    assert changed == {ORACLE_FAULTS[fault]}
