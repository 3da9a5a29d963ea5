"""The robustness module: its hostile-request generator (property tests) and the stored corpus drawn
from it, the reference server's refusal of every class, the budget, the over-window proof the module
shares with the window bracket, and the ``hostile_500`` fault end to end with a replayable example."""

from __future__ import annotations

import base64
import contextlib
import json
import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_qualify.reference import tokenizer
from pytest_qualify.tasks import hostile, hostile_strategies
from pytest_qualify.tasks.fixture_data import read_text
from pytest_qualify.hooks.collection import suites_dir
from pytest_qualify.profiles import load_profile
from pytest_qualify.reference import handler as reference
from pytest_qualify.reference.faults import FaultError, Faults
from pytest_qualify.reference.validation import HOSTILE_CLASSES, validate_chat

ROBUSTNESS = str(suites_dir() / "test_robustness.py")
PROFILE = load_profile("small")
TARGET = hostile.RequestTarget(PROFILE.deployment.served_name, PROFILE.limits.window_tokens)
SETTINGS = settings(max_examples=60, suppress_health_check=list(HealthCheck))


@contextlib.contextmanager
def reference_server(*faults: str) -> Iterator[httpx.Client]:
    """The reference server's real request handling, in a thread of this process."""
    state = reference.ReferenceState(PROFILE, Faults.parse(faults), None, 0.0, 0.0)
    handler = type("TestHandler", (reference.Handler,), {"state": state, "log_message": lambda *a: None})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{httpd.server_address[1]}", timeout=30) as client:
            yield client
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture(scope="module")
def ref() -> Iterator[httpx.Client]:
    with reference_server() as client:
        yield client


def post(client: httpx.Client, body: bytes) -> httpx.Response:
    return client.post(hostile.CHAT_PATH, content=body, headers={"Content-Type": "application/json"})


# -- the generator ----------------------------------------------------------------------------------


def test_classes_match_the_reference_servers():
    assert hostile.classes() == HOSTILE_CLASSES
    assert set(hostile_strategies.STRATEGIES) == set(HOSTILE_CLASSES)
    assert tuple(hostile.corpus()) == HOSTILE_CLASSES


@SETTINGS
@given(hostile_strategies.strategy("malformed_json", TARGET))
def test_malformed_json_never_parses(example):
    with pytest.raises(ValueError):
        json.loads(example.body)


@pytest.mark.parametrize("kind", [k for k in HOSTILE_CLASSES if k != "malformed_json"])
def test_other_classes_are_json_objects_naming_the_model_or_the_wrong_model_type(kind):
    @SETTINGS
    @given(hostile_strategies.strategy(kind, TARGET))
    def check(example):
        body = json.loads(example.body)
        assert isinstance(body, dict) and "model" in body and "messages" in body
        assert example.kind == kind and example.note

    check()


@SETTINGS
@given(hostile_strategies.variants())
def test_the_valid_base_is_valid(variant):
    validate_chat(hostile.base_body(TARGET, variant))


@given(st.binary(max_size=200))
def test_replay_gives_back_the_exact_bytes(body):
    request = hostile.Hostile("malformed_json", "x", body).replay()
    assert "Authorization" not in request["headers"]
    sent = request["body_utf8"].encode() if "body_utf8" in request else base64.b64decode(request["body_base64"])
    assert sent == body


def test_budget_is_spread_over_the_classes():
    assert hostile.examples_per_class(200, 9) == 23
    assert hostile.examples_per_class(18, 9) == 2
    assert hostile.examples_per_class(1, 9) == 1


def test_the_stored_corpus_is_the_seeded_draw():
    # Nothing is drawn at run time: the corpus the run reads is exactly what the seeded draw gives.
    # After a change to fixtures/robustness.toml or the builders: python -m pytest_qualify.tasks.hostile_strategies
    stored = read_text(hostile.CORPUS_FILE)
    assert stored == hostile_strategies.render(hostile_strategies.draw_corpus()), \
        "fixtures/robustness_corpus.json is not the seeded draw: python -m pytest_qualify.tasks.hostile_strategies"
    assert all(len(recipes) == hostile.CORPUS_PER_CLASS for recipes in hostile.corpus().values())


def test_the_draw_is_seeded_and_another_seed_draws_otherwise():
    assert hostile_strategies.draw("tools", 10) == hostile_strategies.draw("tools", 10)
    assert hostile_strategies.draw("tools", 10, seed=1) != hostile_strategies.draw("tools", 10)


def test_the_run_never_imports_hypothesis():
    import subprocess
    import sys

    code = ("import sys; from pytest_qualify.tasks import hostile; "
            "t = hostile.RequestTarget('m', 4096); [hostile.examples(k, t, 64) for k in hostile.classes()]; "
            "print('hypothesis' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "False"


@pytest.mark.parametrize("kind", HOSTILE_CLASSES)
def test_every_stored_recipe_builds_a_distinct_request_with_its_one_fault(kind):
    chosen = hostile.examples(kind, TARGET, hostile.CORPUS_PER_CLASS)
    assert len(chosen) >= hostile.CORPUS_PER_CLASS - 4  # a malformed body that parses for this name is skipped
    assert len({e.body for e in chosen}) == len(chosen)
    for example in chosen:
        assert example.kind == kind and example.note and not example.over_window
        if kind == "malformed_json":
            with pytest.raises(ValueError):
                json.loads(example.body)
        else:
            body = json.loads(example.body)
            assert isinstance(body, dict) and "model" in body and "messages" in body


def test_the_examples_are_the_corpus_in_order_and_the_same_on_every_call():
    first = [e.body for e in hostile.examples("tools", TARGET, 10)]
    hostile.examples.cache_clear()
    assert [e.body for e in hostile.examples("tools", TARGET, 10)] == first
    assert first == [hostile.build(r, TARGET).body for r in hostile.corpus()["tools"][:10]]


def test_the_one_over_window_message_is_over_the_window_by_a_clear_margin():
    # Over by a clear margin (each word a token or more), and no larger than it needs to be: the
    # reference tokenizer counts one token a word, so the prompt is 5% over the window.
    example = hostile.over_window(TARGET)
    assert example.over_window and example.kind == "oversized"
    messages = json.loads(example.body)["messages"]
    words = max(len(m["content"].split()) for m in messages)
    tokens = tokenizer.count_chat(messages)
    assert 1.05 * TARGET.window_tokens <= words and tokens <= 1.1 * TARGET.window_tokens + 32, example.note
    assert not any(e.over_window for kind in HOSTILE_CLASSES for e in hostile.examples(kind, TARGET, 23))


def test_the_profile_budget_is_at_most_the_stored_corpus(profile_file):
    from pytest_qualify.profiles import ProfileError

    most = hostile.CORPUS_PER_CLASS * len(HOSTILE_CLASSES)
    profile = profile_file(("robustness",))
    text = profile.read_text()
    profile.write_text(text + f"robustness_examples = {most}\n")
    assert load_profile(str(profile)).robustness_examples == most
    profile.write_text(text + f"robustness_examples = {most + 1}\n")
    with pytest.raises(ProfileError, match="robustness_examples"):
        load_profile(str(profile))


def test_every_class_yields_its_share_of_a_200_request_budget():
    per_class = hostile.examples_per_class(200, len(HOSTILE_CLASSES))
    total = sum(hostile.collect(kind, TARGET, per_class, lambda e: None) for kind in HOSTILE_CLASSES)
    assert total >= 200


# -- the reference server refuses every class ----------------------------------------------------------


def test_the_valid_base_is_answered(ref):
    resp = post(ref, json.dumps(hostile.base_body(TARGET)).encode())
    assert resp.status_code == 200 and resp.json()["choices"][0]["message"]["content"]


@pytest.mark.parametrize("kind", HOSTILE_CLASSES)
def test_reference_refuses_every_hostile_example_with_a_4xx(ref, kind):
    @SETTINGS
    @given(hostile_strategies.strategy(kind, TARGET))
    def check(example):
        resp = post(ref, example.body)
        assert 400 <= resp.status_code < 500, (example.note, resp.status_code, resp.text[:300])
        assert resp.status_code not in (401, 403)

    check()
    for example in hostile.examples(kind, TARGET, hostile.CORPUS_PER_CLASS):  # and every stored one
        resp = post(ref, example.body)
        assert 400 <= resp.status_code < 500 and resp.status_code not in (401, 403), (example.note, resp.status_code)
    assert ref.get("/health").status_code == 200


def test_reference_refuses_the_over_window_message(ref):
    resp = post(ref, hostile.over_window(TARGET).body)
    assert resp.status_code == 400 and str(TARGET.window_tokens) in resp.text


def test_hostile_500_answers_only_its_class_with_500():
    with reference_server("hostile_500=cache_salt") as client:
        salts: list[int] = []
        hostile.collect("cache_salt", TARGET, 10, lambda e: salts.append(post(client, e.body).status_code))
        others: list[int] = []
        hostile.collect("roles", TARGET, 10, lambda e: others.append(post(client, e.body).status_code))
    assert salts == [500] * 10
    assert all(400 <= s < 500 for s in others)


@pytest.mark.parametrize("faulty", HOSTILE_CLASSES)
def test_hostile_500_fails_exactly_its_class(faulty):
    with reference_server(f"hostile_500={faulty}") as client:
        statuses = {kind: [] for kind in HOSTILE_CLASSES}
        for kind in HOSTILE_CLASSES:
            hostile.collect(kind, TARGET, 12, lambda e, kind=kind: statuses[kind].append(post(client, e.body).status_code))
        # The oversized class's over-window message (the one the window bracket's refusal stands for).
        statuses["oversized"].append(post(client, hostile.over_window(TARGET).body).status_code)
    assert 500 in statuses[faulty]
    for kind, codes in statuses.items():
        assert all(400 <= code < 500 for code in codes if kind != faulty), (kind, codes)


def test_hostile_500_needs_a_known_class():
    with pytest.raises(FaultError, match="hostile_500=nope: expected one of malformed_json"):
        Faults.parse(["hostile_500=nope"])


# -- the module end to end -------------------------------------------------------------------------------


def properties(qualify_pytest) -> dict[str, dict[str, str]]:  # type: ignore[no-untyped-def]
    """Each item's figures by its test name (summary.json)."""
    return qualify_pytest.item_properties()


def test_module_passes_with_at_least_200_hostile_requests_all_refused(qualify_pytest):
    result = qualify_pytest(modules=("robustness",), repeat=3, suites=[ROBUSTNESS])
    assert result.ret == 0, result.stdout.str()
    # One item per class and the over-window item, not repeated: stored examples would only be sent again.
    result.assert_outcomes(passed=len(HOSTILE_CLASSES) + 1)
    props = properties(qualify_pytest)
    assert all("rep1of1" in name for name in props)
    # No window bracket in this run: the over-window item sent its one prompt and proved it itself.
    over = props["test_over_window_refused[own-rep1of1]"]
    assert over["hostile_requests"] == "1" and over["over_window_proof"].endswith("test_over_window_refused[own-rep1of1]")
    assert sum(int(p["hostile_requests"]) for p in props.values()) >= 200
    assert all(p["hostile_failures"] == "0" for p in props.values())
    assert not (qualify_pytest.run_dir() / "robustness-failures.jsonl").exists()


def test_budget_comes_from_the_profile(qualify_pytest, profile_file):
    profile = profile_file(("robustness",))
    profile.write_text(profile.read_text() + "robustness_examples = 18\n")
    result = qualify_pytest(profile=profile, suites=[ROBUSTNESS])
    assert result.ret == 0, result.stdout.str()
    assert [p["hostile_requests"] for name, p in properties(qualify_pytest).items()
            if "test_over_window_refused" not in name] == ["2"] * len(HOSTILE_CLASSES)


def test_a_500_fails_its_class_with_a_replayable_example(qualify_pytest):
    result = qualify_pytest(modules=("robustness",), faults=["hostile_500=tools"], suites=[ROBUSTNESS])
    out = result.stdout.str()
    result.assert_outcomes(passed=len(HOSTILE_CLASSES), failed=1)
    jsonl = qualify_pytest.run_dir() / "robustness-failures.jsonl"
    assert ("test_hostile_requests_refused[tools], repetition 1: tools: 23 of 23 hostile requests were not "
            "refused with a 4xx; first: ") in out
    assert "HTTP 500 instead of a 4xx refusal; request body: {\"model\": \"small-chat-4k\"" in out
    assert f"replay: {jsonl} line 1" in out
    lines = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert len(lines) == 23 and {line["class"] for line in lines} == {"tools"}
    first = lines[0]
    assert first["status"] == 500 and first["request"]["path"] == hostile.CHAT_PATH
    # Replay: the recorded bytes get the same 500 from a server with the fault, a 400 without.
    body = first["request"]["body_utf8"].encode()
    with reference_server("hostile_500=tools") as faulty:
        assert post(faulty, body).status_code == 500
    with reference_server() as healthy:
        assert post(healthy, body).status_code == 400


def test_reference_answer_budget_follows_vllm_0_32():
    """max_tokens over the window and a prompt filling the window are refused; otherwise vLLM
    0.32 cuts max_tokens to what fits rather than refusing (observed on the real engine)."""
    from pytest_qualify.reference.oracle import Rejection
    from pytest_qualify.reference.validation import overwindow, validate_budget

    with pytest.raises(Rejection, match="max_tokens=5000 cannot be greater than max_model_len=4096"):
        validate_budget({"max_tokens": 5000}, 100, 4096)
    with pytest.raises(Rejection, match="max_tokens must be at least 1, got 0"):
        validate_budget({"max_tokens": 16}, 4096, 4096)
    validate_budget({"max_tokens": 64}, 4086, 4096)  # clamped by the server, not refused
    assert "at least 4097 input tokens" in overwindow(4096, 4200).message


WINDOW = str(suites_dir() / "test_window.py")


def test_the_window_brackets_refusal_is_the_one_over_window_proof(qualify_pytest):
    # One giant prompt a repetition: the bracket's; the robustness module relies on the first.
    result = qualify_pytest(modules=("robustness", "window"), repeat=2, suites=[ROBUSTNESS, WINDOW])
    assert result.ret == 0, result.stdout.str()
    props = properties(qualify_pytest)
    over = props["test_over_window_refused[window-rep1of1]"]
    assert over["hostile_requests"] == "0" and over["over_window_proofs"] == "2"
    assert over["over_window_proof"] == "suites/test_window.py::test_prompt_over_window_is_refused[rep1of2]"
    proofs = [json.loads(line) for line in (qualify_pytest.run_dir() / "proofs.jsonl").read_text().splitlines()]
    assert [(p["nodeid"].split("::")[-1], p["held"]) for p in proofs] == [
        ("test_prompt_over_window_is_refused[rep1of2]", True), ("test_prompt_over_window_is_refused[rep2of2]", True)]
    assert props["test_prompt_over_window_is_refused[rep1of2]"]["proves"].startswith("a prompt over the window")


def test_the_item_relying_on_a_proof_that_did_not_hold_is_not_pass(qualify_pytest):
    result = qualify_pytest(modules=("robustness", "window"), faults=["hostile_500=oversized"],
                            suites=[ROBUSTNESS, WINDOW])
    out = result.stdout.str()
    assert result.ret == 1, out
    assert ("test_over_window_refused[window], repetition 1: oversized: relied on "
            "suites/test_window.py::test_prompt_over_window_is_refused[rep1of1], where it did not hold: ") in out
    assert "HTTP 500" in out
