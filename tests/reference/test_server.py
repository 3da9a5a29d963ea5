"""The reference server (pytest_qualify/reference/) in process: it labels itself SIMULATED, answers
the protocol's items in their answer contract, refuses what vLLM refuses with vLLM's error shape,
and its fault switches change exactly what they say."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from pytest_qualify.profiles import load_profile
from pytest_qualify.reference.faults import FaultError, Faults
from pytest_qualify.reference.state import ReferenceState
from pytest_qualify.tasks.fixture_data import smoke_questions
from .in_thread import serving

PROFILE = load_profile("small")


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Iterator[str]:
    with serving(ReferenceState(PROFILE, Faults.parse(getattr(request, "param", ())), None, 0.0, 0.0)) as url:
        yield url


def _chat(url: str, content: str, **extra) -> httpx.Response:
    body = {"model": PROFILE.deployment.served_name, "messages": [{"role": "user", "content": content}],
            "max_tokens": 64, "temperature": 0, **extra}
    return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=30)


def test_it_says_it_is_simulated_and_what_it_serves(server):
    assert httpx.get(f"{server}/health", timeout=10).status_code == 200
    models = httpx.get(f"{server}/v1/models", timeout=10).json()["data"]
    entry = next(m for m in models if m["id"] == PROFILE.deployment.served_name)
    assert entry["max_model_len"] == PROFILE.limits.window_tokens
    assert entry["root"] == PROFILE.deployment.model
    assert httpx.get(f"{server}/version", timeout=10).json()["simulated"] is True


@pytest.mark.parametrize("question", smoke_questions(), ids=lambda q: q.id)
def test_it_answers_in_the_items_contract(server, question):
    reply = _chat(server, question.prompt)
    assert reply.status_code == 200, reply.text
    choice = reply.json()["choices"][0]
    assert choice["finish_reason"] == "stop"
    assert question.grade(choice["message"]["content"]).ok


def test_an_over_window_prompt_gets_vllms_400(server):
    count = httpx.post(f"{server}/tokenize", json={"model": PROFILE.deployment.served_name, "prompt": "word " * 50},
                       timeout=10).json()["count"]
    assert count > 0
    reply = _chat(server, "word " * (PROFILE.limits.window_tokens + 10))
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert error["code"] == 400 and "maximum context length" in error["message"]


@pytest.mark.parametrize("server", [("wrong_identity",)], indirect=True)
def test_a_fault_switch_changes_what_it_names(server):
    models = httpx.get(f"{server}/v1/models", timeout=10).json()["data"]
    entry = next(m for m in models if m["id"] == PROFILE.deployment.served_name)
    assert (entry["root"], entry["max_model_len"]) != (PROFILE.deployment.model, PROFILE.limits.window_tokens)


def test_an_unknown_fault_is_refused_by_name():
    with pytest.raises(FaultError, match="unknown fault 'no_such_fault'"):
        Faults.parse(["no_such_fault"])



def _lane_answer(messages, faults: tuple[str, ...], stream: bool) -> str:
    from pytest_qualify.reference import oracle_context
    from pytest_qualify.reference.oracle import ChatRequest, OracleContext

    ctx = OracleContext(PROFILE, Faults.parse(faults))
    return oracle_context.answer(ChatRequest({"messages": messages, "stream": stream}), ctx).content


def test_the_same_context_request_is_answered_the_same_way_and_the_timed_fault_changes_only_the_plain_path():
    # The integrity module asks a lane's timed request again and compares the answers: a conforming
    # reference must give the same text each time (its formatting noise follows the question).
    from pytest_qualify.reference import tokenizer
    from pytest_qualify.reference.oracle_context import near_miss
    from pytest_qualify.tasks.haystack import lane_plan, size_lane

    lanes = PROFILE.limits.lanes
    styles = set()
    for run in ("run-a", "run-b", "run-c", "run-d"):
        plan = lane_plan(run, [x.name for x in lanes], lanes[0].name, 1)
        sized = size_lane(plan, tokenizer.count_chat, lanes[0].prompt_tokens, PROFILE.limits.lane_tolerance_tokens)
        value = plan.target.value
        timed = _lane_answer(sized.messages, (), stream=True)
        assert value in timed
        assert _lane_answer(sized.messages, (), stream=False) == timed == _lane_answer(sized.messages, (), stream=True)
        styles.add(timed.replace(value, "{}"))
        # The fault: the streamed (timed, graded) answer unchanged, the plain one a near miss.
        assert _lane_answer(sized.messages, ("timed_answer_differs",), stream=True) == timed
        assert _lane_answer(sized.messages, ("timed_answer_differs",), stream=False) == timed.replace(value, near_miss(value))
    assert len(styles) > 1  # still varied across questions, so the grader is shown the noise
