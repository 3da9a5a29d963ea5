"""The parsers module's stored corpus: generated again it is the stored file, it covers what the
module must prove (every JSON type and nesting, the strings the syntax must carry, parallel calls,
calls after content and reasoning, reasoning splits, held-back content), and every case is forced
as written (``tasks/parsers.py``)."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest

from pytest_qualify.tasks import parsers
from pytest_qualify.tasks.fixture_data import read_text
from pytest_qualify.tasks.parsers_corpus import COUNTS, LONG_STRING_CHARS, dumps, generate

CORPUS = parsers.corpus()


def test_the_stored_corpus_is_what_the_generator_draws():
    # The same draw in this pytest session as in the command that stored it (the generator keeps the
    # project's own source out of what hypothesis draws). A hypothesis release that draws other
    # examples shows here: regenerate with `python -m pytest_qualify.tasks.parsers_corpus`, commit it.
    assert dumps(generate()) == read_text(parsers.CORPUS_FILE)


def test_the_generator_draws_valid_cases_of_each_kind():
    drawn = generate({kind: 3 for kind in COUNTS})
    assert [c.kind for c in drawn] == [kind for kind in COUNTS for _ in range(3)]
    assert dumps(drawn).count("\n") == len(drawn)


def _values(case: parsers.ParserCase) -> list[Any]:
    out: list[Any] = []

    def walk(value: Any, depth: int) -> None:
        out.append((value, depth))
        if isinstance(value, dict):
            for item in value.values():
                walk(item, depth + 1)
        elif isinstance(value, list):
            for item in value:
                walk(item, depth + 1)

    for call in case.calls:
        walk(dict(call.arguments), 0)
    return out


def test_the_corpus_covers_what_the_module_must_prove():
    kinds = Counter(c.kind for c in CORPUS)
    assert dict(kinds) == COUNTS
    assert sum(len(c.calls) for c in CORPUS) >= 2000
    assert kinds["reasoning"] >= 100 and kinds["held"] >= 100
    values = [v for c in CORPUS for v in _values(c)]
    types = {type(v).__name__ for v, _ in values}
    assert {"dict", "list", "str", "int", "float", "bool", "NoneType"} <= types
    assert max(d for _, d in values) >= 3  # nested objects and arrays
    strings = [v for v, _ in values if isinstance(v, str)]
    assert "" in strings and any(len(s) == LONG_STRING_CHARS for s in strings)
    for needle in ("<", ">", "&", '"', "'", "\\", "\n", "\t", "🎉", "中文"):
        assert any(needle in s for s in strings), needle
    assert any(s in ("0", "007", "-1", "3.14", "1e3") for s in strings)  # numbers as strings
    assert any(len(c.calls) >= 3 for c in CORPUS if c.kind == "parallel")
    tool_names = {call.name for c in CORPUS for call in c.calls}
    assert tool_names == {t["function"]["name"] for t in parsers.corpus_tools()}


def test_the_held_content_cases_cover_what_parsers_hold():
    held = [c.content for c in CORPUS if c.kind == "held"]
    assert sum(1 for h in held if not h.strip()) >= 20
    assert any(h != h.strip() and h.strip() for h in held)
    for start in ("<", "<tool", "```"):
        assert any(h.lstrip().startswith(start) for h in held), start


@pytest.mark.parametrize("syntax", parsers.SYNTAXES)
def test_every_case_is_forced_as_written(syntax):
    for case in CORPUS:
        text = parsers.model_text(case, syntax)
        assert parsers.forced_text(parsers.text_constraint(text)) == text
        body = parsers.forced_body(case, syntax, parsers.corpus_tools(), {"<tool_call>": 7})
        assert body["max_tokens"] > len(text.encode("utf-8"))
        assert body["logit_bias"] == {"7": parsers.MARKER_BIAS}
        assert ("chat_template_kwargs" in body) == case.thinking


def test_the_texts_own_tokens_are_biased_below_the_markers():
    case = CORPUS[0]
    # The text's encoding holds the marker's id too (a tokenizer reads "<tool_call>" as its token):
    # the marker keeps the higher bias, every other id of the text gets the text's.
    body = parsers.forced_body(case, "qwen3_coder", parsers.corpus_tools(), {"<tool_call>": 7},
                               text_ids=[12, 7, 12, 40, 3])
    assert body["logit_bias"] == {"3": parsers.TEXT_BIAS, "7": parsers.MARKER_BIAS, "12": parsers.TEXT_BIAS,
                                  "40": parsers.TEXT_BIAS}
    assert 0 < parsers.TEXT_BIAS < parsers.MARKER_BIAS <= 100
    # No tokenizer and no marker: no bias at all.
    assert "logit_bias" not in parsers.forced_body(case, "qwen3_coder", parsers.corpus_tools(), {})


def test_ask_case_biases_the_encoding_of_the_text_it_forces():
    case = CORPUS[0]
    asked_with, tokenized = [], []

    def chat(messages, stream=False, **params):
        asked_with.append(params)
        raise StopAsking

    def tokenize(text):
        tokenized.append(text)
        return [5, 6]

    with pytest.raises(StopAsking):
        parsers.ask_case(chat, case, "qwen3_coder", {}, thinking_off=False, label="x", model="m", tokenize=tokenize)
    assert tokenized == [parsers.model_text(case, "qwen3_coder")]
    assert asked_with[0]["logit_bias"] == {"5": parsers.TEXT_BIAS, "6": parsers.TEXT_BIAS}


def test_marker_ids_are_the_markers_the_tokenizer_holds_as_one_token():
    vocab = {"<think>": [11], "</think>": [12], "<tool_call>": [3, 4], "</tool_call>": []}
    assert parsers.marker_ids(lambda text: vocab[text]) == {"<think>": 11, "</think>": 12}


class StopAsking(Exception):
    pass


def test_a_value_holding_the_syntax_is_refused():
    with pytest.raises(parsers.ParserCaseError, match="parameter"):
        parsers.ParserCase.of({"id": "x", "kind": "call", "calls": [
            {"name": "send_message", "arguments": {"to": "a", "body": "x</parameter>y"}}]})
    with pytest.raises(parsers.ParserCaseError, match="kind"):
        parsers.ParserCase.of({"id": "x", "kind": "other", "content": "a"})


def test_the_sample_and_the_groups():
    sample = parsers.sample(CORPUS)
    assert Counter(c.kind for c in sample) == {k: n for k, n in parsers.SAMPLE_PER_KIND.items() if n}
    groups = parsers.shards(CORPUS, 100)
    assert sum(len(g) for g in groups) == len(CORPUS)
    assert all(len({c.kind for c in g}) == 1 and len(g) <= 100 for g in groups)


@pytest.mark.parametrize("args, thinking, overridable, plain, reasoning", [
    (["--tool-call-parser", "qwen3_coder", "--reasoning-parser", "qwen3"], False, False, True, False),
    (["--tool-call-parser", "qwen3_coder", "--reasoning-parser", "qwen3"], False, True, True, False),
    (["--tool-call-parser", "qwen3_coder", "--reasoning-parser", "qwen3", "--structured-outputs-config",
      json.dumps({"enable_in_reasoning": True})], False, True, True, True),
    (["--tool-call-parser", "qwen3_coder", "--reasoning-parser", "qwen3", "--structured-outputs-config",
      json.dumps({"enable_in_reasoning": True})], True, False, False, True),
    (["--tool-call-parser=hermes"], False, True, True, False),
    (["--tool-call-parser", "mistral"], False, False, False, False),
    ([], False, False, False, False),
])
def test_the_plan_says_what_the_deployment_can_be_made_to_emit(args, thinking, overridable, plain, reasoning):
    plan = parsers.plan(args, thinking, overridable)
    assert (plan.plain_cases, plan.reasoning_cases) == (plain, reasoning)
    assert bool(plan.left_out) == (not plain or not reasoning)
    if not reasoning and overridable and "--reasoning-parser" in args:
        assert "enable_in_reasoning" in " ".join(plan.left_out)


# -- the item's judgement: a deviation of the parsers fails it; one that measured the forcing does not --

def _asked(case_id: str, *, exact: bool = True, unforced: str | None = None) -> parsers.Asked:
    from pytest_qualify.graders.parsers import CaseOutcome

    case = parsers.ParserCase.of({"id": case_id, "kind": "call", "note": "a note", "calls": [
        {"name": "send_message", "arguments": {"to": "a", "body": "b"}}]})
    outcome = CaseOutcome(case_id, plain=None if exact else "content is 'x'", streamed=None, parity=None,
                          incremental=None)
    return parsers.Asked(case, outcome, {}, unforced)


def test_a_shard_with_no_deviation_is_judged_and_holds():
    judgement = parsers.judge_shard([_asked("a"), _asked("b", unforced=None)])
    assert judgement.failure("cases.jsonl") is None and judgement.not_judged() is None
    # A case that came back exactly measured the parser whatever its ids said.
    assert parsers.judge_shard([_asked("a", unforced="'<think>' is 1 time(s) ...")]).not_judged() is None


def test_a_shard_whose_only_deviations_measured_the_forcing_is_not_judged():
    spelt = "'<tool_call>' is 1 time(s) in the forced text but its token 7 was generated 0 time(s)"
    judgement = parsers.judge_shard([_asked("a"), _asked("b", exact=False, unforced=spelt)])
    assert judgement.failure("cases.jsonl") is None
    assert judgement.not_judged() == (f"1 of 2 forced cases were not generated as the model's own marker tokens, so "
                                      f"they measured the forcing, not the parser: b: {spelt}")


def test_a_deviation_of_the_parsers_fails_the_shard_beside_unforced_ones():
    judgement = parsers.judge_shard([_asked("a", exact=False), _asked("b", exact=False, unforced="spelt")])
    assert judgement.not_judged() is None
    failure = judgement.failure("cases.jsonl")
    assert failure is not None and failure.startswith(
        "1 of 2 forced cases did not come back exactly (replay: cases.jsonl); 1 more were not generated as the "
        "model's own marker tokens (not judged); a (a note): ")
