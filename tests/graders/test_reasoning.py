"""Reasoning leakage: fields, markers and usage, judged on the content exactly as returned."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from pytest_qualify.graders.reasoning import (
    check_no_reasoning, check_override_had_no_effect, check_reasoning_separated, one_line_working, reasoning_markers,
)


@pytest.mark.parametrize("content", [
    "Blue", "It arrives at 5 pm.", "8", "The answer: thinking about it is optional.", None, "",
    # words the markers are made of, written as prose
    "Analysis: the sky scatters blue light.\nANSWER: Blue", "analysis of the sky: Blue", "My analysis: Blue",
    "The assistant's final answer: Blue", "I thought about it: blue.", "A <reasonable> guess: blue", "<thoughtful> Blue",
    "Here is my thought process: 3 pm + 2 h = 5 pm.\n\nANSWER: 5 pm",  # Granite's first phrase alone is prose
    "Here is my response: Blue", "<answer>Blue</answer>", "**Thinking:** blue light scatters most.\n\nBlue",
    # harmony's words spaced as prose writes them, not where its tokens stood
    "The final analysis: 4", "I ran some analysis on the numbers first.\n\nAnswer: 4", "analysis of the sum: 4",
    "The assistant final answer is 4", "As your assistant, final answer: 4", "Ask the assistant finally: 4",
    "Final analysis\n\nassistant: 4", "analysis: 2 + 2\nfinal: 4",
    # a channel's name as a word of a sentence, or capitalised where it opens a reply
    "Analysis: the answer is blue", "An analysis of the data shows the sky is blue.", "analysis shows the sky is blue",
    "Our analysis shows the sky is blue.", "Analysis\nThe sky is blue.", "Analysis The sky is blue.",
    "analysis: The sky is blue.", "commentary: Blue", "Commentary\n\nThe film is blue.", "analysis of The Times: blue",
])
def test_clean_answers_pass(content):
    verdict = check_no_reasoning(content, None, None)
    assert verdict.ok, verdict.reason


def test_zero_reasoning_tokens_and_empty_field_pass():
    assert check_no_reasoning("Blue", "", 0).ok


@pytest.mark.parametrize(
    "content",
    [
        "<think>\nThe sky is blue.\n</think>\n\nBlue",
        "</think>Blue",
        "Blue<think></think>",
        "<THINK>x</THINK> Blue",
        "<thinking>hmm</thinking>Blue",
        "<|begin_of_thought|>x<|end_of_thought|>Blue",
        "[THINK]x[/THINK]Blue",
        "◁think▷x◁/think▷Blue",
        "<|channel|>analysis<|message|>x<|end|>Blue",
        # think tags by other names (vLLM's reasoning parsers and the families' templates)
        "<seed:think>The user asks.</seed:think>Blue",                     # Seed-OSS
        "<|START_THINKING|>x<|END_THINKING|>Blue",                          # Cohere Command A
        "<thought>x</thought>Blue",                                         # EXAONE
        "<mm:think>x</mm:think>Blue", "<longcat_think>x</longcat_think>Blue", "<|think|>x<|/think|>Blue",
        "<reasoning>x</reasoning>Blue", "<thoughts>x</thoughts>Blue", "<think/>Blue",
        "<think>\nx\n</think>\n<answer>\nBlue\n</answer>",             # Hunyuan
        "<|channel>thought\nx<channel|>Blue",                              # Gemma 4
        "<|inner_prefix|>x<|inner_suffix|>Blue",                            # Apertus
        # harmony, whole and with its special tokens stripped (channel names left in the text)
        "<|channel|>analysis<|message|>x<|end|><|start|>assistant<|channel|>final<|message|>Blue",
        "<|start|>assistant<|channel|>final<|message|>Blue",
        "analysisThe user asks about the sky. Answer briefly.assistantfinalBlue",
        "analysisWe need to answer: blue.assistantfinalBlue",
        "The sky scatters short wavelengths.assistantfinalBlue",
        "commentaryChecking the question.assistantfinalBlue",
        # stripped with a space (or a newline) where each special token stood, vLLM's default
        "analysis User wants the sum. assistant final 4",
        "analysis\nThe user asks for 2+2.\nassistant\nfinal\n4",
        " analysis We need to answer 4 assistant final 4",
        "assistant final 4", "The user asks for 2+2. assistant analysis More thought. assistant final 4",
        "commentary Checking the tool. assistant final Blue",
        # cut off in the analysis channel: no final channel follows, the channel's name opens the content
        "analysis We need to answer the colour question. The sky is blue. The answer is blue.",
        "commentary We need to answer the colour question. The sky is blue.",
        "analysis\nWe need to answer the colour question.", "analysisWe need to answer the colour question.",
        "assistant analysis We need to answer the colour question.", "assistantanalysisWe need to answer.",
        "assistant\nanalysis\nwe need to answer the colour question.", "analysis\r\nThe user asks. The sky is blue.",
        # IBM Granite's two phrases (vLLM's granite parser)
        "Here is my thought process: the sky scatters blue light. Here is my response: Blue",
        "Here's my thought process:\nRayleigh scattering.\n\nHere's my response:\nBlue",
    ],
)
def test_markers_in_content_fail(content):
    verdict = check_no_reasoning(content, None, None)
    assert not verdict.ok and "reasoning markers in the visible content" in verdict.reason


def test_reasoning_field_fails_and_is_shown():
    verdict = check_no_reasoning("Blue", "The user asks about the sky.", None)
    assert not verdict.ok and "reasoning field populated" in verdict.reason and "The user asks" in verdict.reason


def test_reasoning_tokens_fail():
    verdict = check_no_reasoning("Blue", None, 37)
    assert not verdict.ok and "37 reasoning tokens" in verdict.reason


def test_all_problems_are_named_together():
    verdict = check_no_reasoning("<think>x</think>Blue", "x", 5)
    assert verdict.reason.count(";") == 2


def test_thinking_enabled_allows_the_field_but_not_markers():
    assert check_reasoning_separated("Blue", "The sky is blue.").ok
    assert check_reasoning_separated("Blue", None).ok
    assert not check_reasoning_separated("<think>x</think>Blue", "x").ok


# -- thinking enabled, no reasoning back at all: the content holds nothing besides its slot -----------

def _prompts():
    from pytest_qualify.tasks.fixture_data import reasoning_prompts

    return {p.id: p for p in reasoning_prompts()}


def test_no_reasoning_back_and_working_in_the_content_is_a_leak_that_names_the_parser():
    train = _prompts()["train"].contract
    content = "Okay, the user wants the arrival time.\nLet me think step by step: 3 pm + 2 h = 5 pm.\n\nANSWER: 5 pm"
    verdict = check_reasoning_separated(content, None, None, contract=train, parser="qwen3")
    assert not verdict.ok and not verdict.is_format
    assert verdict.reason.startswith("reasoning leak: thinking is enabled and no reasoning came back (no reasoning field, "
                                     "no reasoning tokens), while the visible content holds 2 lines of working")
    assert "'Okay, the user wants the arrival time." in verdict.reason
    assert verdict.reason.endswith("(the reasoning parser 'qwen3' left the reasoning in the content)")
    unnamed = check_reasoning_separated(content, "  \n", 0, contract=train)
    assert not unnamed.ok and "the deployment's reasoning parser left the reasoning in the content" in unnamed.reason


def test_reasoning_returned_or_counted_leaves_the_visible_working_unjudged():
    train = _prompts()["train"].contract
    content = "Okay, the user wants the arrival time.\n\nANSWER: 5 pm"
    assert check_reasoning_separated(content, "3 pm + 2 h = 5 pm.", None, contract=train).ok
    counted = check_reasoning_separated(content, None, 40, contract=train)
    assert counted.ok and "counted in the usage (40 tokens), none returned" in counted.reason
    # Without the prompt's contract, no slot tells the working apart: only markers are judged.
    assert check_reasoning_separated(content, None, None).ok


@pytest.mark.parametrize("prompt_id,content", [
    ("sky", "Blue"), ("sky", "**Blue.**"), ("sky", "Here is the answer:\nBlue"), ("spider", "```\n8\n```"),
    ("train", "ANSWER: 5 pm"), ("train", "**Answer:**\n5 pm"), ("sky", "The sky is blue."),  # one line: a slot
])
def test_no_reasoning_back_and_only_the_slot_in_the_content_is_no_leak(prompt_id, content):
    assert check_reasoning_separated(content, None, None, contract=_prompts()[prompt_id].contract).ok


@given(st.sampled_from(["sky", "train", "spider"]),
       st.sampled_from(["Okay, the user wants", "Let me think step by step.", "Hmm, so", "First, I need to recall"]),
       st.text(alphabet=st.characters(blacklist_characters="<>[]◁▷|:\r\n\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029",
                                      blacklist_categories=("Cs",)), max_size=60),
       st.sampled_from([None, "", " ", "\n\n"]), st.sampled_from([None, 0]))
def test_property_working_lines_before_the_slot_with_no_reasoning_back_always_leak(prompt_id, opener, rest, field, tokens):
    prompt = _prompts()[prompt_id]
    content = f"{opener} {rest}\n\n{prompt.answer.splitlines()[-1]}"
    verdict = check_reasoning_separated(content, field, tokens, contract=prompt.contract, parser="qwen3")
    assert not verdict.ok and verdict.reason.startswith("reasoning leak: "), verdict.reason
    # The same content beside reasoning that did come back is the model's visible answer.
    assert check_reasoning_separated(content, "hidden reasoning", tokens, contract=prompt.contract).ok


# -- one line: the working written on the answer's own line (no line outside the slot) ----------------

@pytest.mark.parametrize("content,working", [
    ("Okay, the user wants the capital of France, so the answer is Paris.",
     "Okay, the user wants the capital of France, so the answer is Paris."),
    ("Let me think step by step: 6*7=42. The answer is: 42", "Let me think step by step: 6*7=42."),
    ("6 * 7 = 42. **ANSWER:** 42", "6 * 7 = 42."),
    ("Six sevens make 42! Final answer: 42", "Six sevens make 42!"),
    ("So the user asked for the product; 42.", "So the user asked for the product; 42."),
    ("Alright, let's see: 6 times 7 is 42.", "Alright, let's see: 6 times 7 is 42."),
    ("I need to compute 6*7, which is 42.", "I need to compute 6*7, which is 42."),
    ("Wait, 6*7 is 42.", "Wait, 6*7 is 42."),
    # no working: a value, a label, a courtesy or a preamble before it, an answer's sentence or tone
    ("Paris.", ""), ("The answer is: Paris", ""), ("ANSWER: 42", ""), ("**Final answer:** 42", ""),
    ("Sure! The answer is: Paris", ""), ("Of course. Answer: 42", ""), ("Here is the answer: Paris", ""),
    ("The capital of France is Paris.", ""), ("I think it's Paris.", ""), ("Hmm, Paris.", ""),
    ("OK, I'll go with Paris.", ""), ("The user manual says 42.", ""), ("Let it be 42.", ""), ("", ""), (None, ""),
])
def test_one_line_working_is_the_reasoning_written_on_the_answers_line(content, working):
    assert one_line_working(content) == working


def test_a_one_line_leak_names_its_working_and_the_parser_and_is_judged_only_with_thinking_on():
    sky = _prompts()["sky"].contract
    content = "Okay, the user wants the colour of a clear daytime sky, so the answer is Blue."
    verdict = check_reasoning_separated(content, None, None, contract=sky, parser="qwen3")
    assert not verdict.ok and not verdict.is_format
    assert ("no reasoning tokens), while the visible content holds working on its answer's own line: "
            "'Okay, the user wants the colour") in verdict.reason
    assert verdict.reason.endswith("(the reasoning parser 'qwen3' left the reasoning in the content)")
    # reasoning returned or counted: the visible answer's own prose; thinking off: no engine reasoning
    assert check_reasoning_separated(content, "The sky scatters blue.", None, contract=sky).ok
    assert check_reasoning_separated(content, None, 18, contract=sky).ok
    assert check_no_reasoning(content, None, None).ok


@given(st.sampled_from(["sky", "train", "spider"]),
       st.sampled_from(["Let me think step by step: {w}.", "Okay, the user wants the answer. {w}.", "{w}.",
                        "Okay, so {w}.", "First, I need to check: {w}!", "The user is asking this; {w}?"]),
       st.text(alphabet=st.characters(whitelist_categories=("Nd",), whitelist_characters=" +=*x"),
               min_size=1, max_size=40).filter(str.strip),
       st.sampled_from(["The answer is: ", "ANSWER: ", "**Final answer:** ", "The final answer is: "]),
       st.sampled_from([None, "", " \n"]), st.sampled_from([None, 0]))
def test_property_a_sentence_of_working_before_the_label_on_one_line_always_leaks(prompt_id, lead, words, label,
                                                                                   field, tokens):
    prompt = _prompts()[prompt_id]
    content = f"{lead.format(w=words.strip())} {label}{prompt.answer.splitlines()[-1].split(': ')[-1]}"
    verdict = check_reasoning_separated(content, field, tokens, contract=prompt.contract, parser="qwen3")
    assert not verdict.ok and verdict.reason.startswith("reasoning leak: "), (content, verdict.reason)


@given(st.sampled_from(["sky", "train", "spider"]),
       st.sampled_from(["", "The answer is: ", "ANSWER: ", "**Answer:** ", "Final answer: ", "Sure! The answer is: ",
                        "Here is the answer: ", "Certainly. ANSWER: "]),
       st.sampled_from(["", ".", "!", "**"]), st.sampled_from([None, "", " "]), st.sampled_from([None, 0]))
def test_property_a_plain_short_answer_on_one_line_never_leaks(prompt_id, label, end, field, tokens):
    prompt = _prompts()[prompt_id]
    content = f"{label}{prompt.answer.splitlines()[-1].split(': ')[-1]}{end}"
    assert check_reasoning_separated(content, field, tokens, contract=prompt.contract, parser="qwen3").ok, content


plain = st.text(alphabet=st.characters(blacklist_characters="<>[]◁▷|:"), max_size=80)
marker = st.sampled_from(["<think>", "</think>", "<thinking>", "</ think>", "[THINK]", "<|begin_of_thought|>", "◁think▷",
                          "<seed:think>", "</seed:think>", "<|START_THINKING|>", "<thought>", "<|channel>", "<channel|>",
                          "<|channel|>analysis", "<|start|>assistant", "assistantfinal", "<|inner_prefix|>"])
@given(plain)
def test_property_text_without_markers_passes(text):
    assume(not text.lstrip().lower().startswith(("thought", "reasoning", "chain of thought", "thinking process")))
    assume(not re.search(r"(?i:assistant(final|analysis|commentary))|^\s*(analysis|commentary)([A-Z]|\s)"
                         r"|(^|[.!?;)\]}\"'`*])\s*assistant\s+(final|analysis|commentary)\b", text))
    assert check_no_reasoning(text, None, None).ok


# A think tag by any name: a tag or template token whose name holds a reasoning stem.
_TAG_NAME = st.builds(lambda prefix, stem, suffix: prefix + stem + suffix,
                      st.sampled_from(["", "seed:", "mm:", "ifm|", "longcat_", "begin_of_", "end_of_", "START_", "x-"]),
                      st.sampled_from(["think", "thinking", "thought", "thoughts", "reasoning", "THINK", "Thinking", "reflect"]),
                      st.sampled_from(["", "_process", ":v2", "_block"]))


@given(plain, _TAG_NAME, st.sampled_from(["<{}>", "</{}>", "<|{}|>", "< {} >", "<{}/>", "<|/{}|>"]), plain)
def test_property_a_think_tag_by_any_name_fails(before, name, shape, after):
    content = before + shape.format(name) + after
    assert reasoning_markers(content), content
    assert not check_no_reasoning(content, None, None).ok


@given(st.sampled_from(["The user asks", "We need to", "User wants", "Let me"]), plain, plain)
def test_property_stripped_harmony_fails_and_prose_analysis_passes(opening, reasoning, answer):
    # The channel names glued to the text are the analysis channel reaching the content...
    stripped = f"analysis{opening} {reasoning}assistantfinal{answer}"
    assert not check_no_reasoning(stripped, None, None).ok
    assert {"analysis", "assistantfinal"} <= set(reasoning_markers(stripped))
    # ...the same words as a reader writes them are not.
    assume(not re.search(r"(?i)assistant(final|analysis|commentary)", reasoning + answer))
    assert check_no_reasoning(f"Analysis: {opening} {reasoning}\n\nFinal: {answer}", None, None).ok
@given(st.sampled_from(["The user asks", "We need to", "User wants", "Let me"]), plain, plain,
       st.sampled_from([" ", "\n", " \n", "\n\n"]))
def test_property_spaced_stripped_harmony_fails_and_the_words_in_prose_pass(opening, reasoning, answer, gap):
    # A space or newline where each special token stood (vLLM's spaces_between_special_tokens)...
    stripped = f"analysis{gap}{opening} {reasoning}.{gap}assistant{gap}final{gap}{answer}"
    verdict = check_no_reasoning(stripped, None, None)
    assert not verdict.ok and "'analysis', 'assistant final'" in verdict.reason
    # ...the same words in the order a reader writes them are not.
    assume(not re.search(r"(?i)assistant\s*(final|analysis|commentary)", reasoning + answer))
    assert check_no_reasoning(f"{opening} {reasoning}. The final analysis:{gap}{answer}", None, None).ok


@given(st.sampled_from(["analysis", "commentary"]), st.sampled_from(["", "assistant", "assistant ", "assistant\n"]),
       st.sampled_from(["", " ", "\n", " \n", "\r\n"]),
       st.sampled_from(["We need to", "The user asks", "User wants", "Let's", "I should"]), plain)
def test_property_a_channel_cut_off_before_its_final_fails(channel, role, gap, opening, reasoning):
    # The reply as generated after the prompt's "<|start|>assistant", stripped of its special tokens
    # and cut off in its first channel: no final channel, no "assistant final" later in the text.
    stripped = f"{role}{channel}{gap}{opening} {reasoning}"
    verdict = check_no_reasoning(stripped, None, None)
    assert not verdict.ok and channel in verdict.reason, (stripped, verdict.reason)


@given(st.sampled_from(["analysis", "commentary"]), st.sampled_from([" ", "\n", ": ", " of "]),
       st.sampled_from(["we need", "shows", "the user", "of the data"]), plain)
def test_property_a_channel_name_in_prose_passes(channel, gap, words, rest):
    # The same words as prose writes them: capitalised where they open a reply, or a word of a
    # sentence (lowercase after the name, or later in the content).
    assume(not re.search(r"(?i:assistant\s*(final|analysis|commentary))|^\s*(analysis|commentary)\s*[A-Z]", rest))
    for content in (f"{channel.capitalize()}{gap}{words.capitalize()} {rest}", f"{channel}{gap}{words} {rest}",
                    f"Our {channel}{gap}{words.capitalize()} {rest}"):
        assert check_no_reasoning(content, None, None).ok, content


@given(plain, marker, plain, st.booleans())
def test_property_a_marker_anywhere_fails(before, mark, after, upper):
    mark = mark.upper() if upper else mark
    content = before + mark + after
    assert reasoning_markers(content)
    assert not check_no_reasoning(content, None, None).ok
    assert not check_reasoning_separated(content, "x").ok
@given(st.text(min_size=1).filter(lambda s: s.strip()), plain)
def test_property_any_reasoning_text_fails(reasoning, content):
    assume(not reasoning_markers(content))
    assert not check_no_reasoning(content, reasoning, None).ok
@given(st.integers(min_value=1, max_value=100_000))
def test_property_any_reasoning_tokens_fail(tokens):
    assert not check_no_reasoning("Blue", None, tokens).ok
@given(st.sampled_from(["Thinking Process", "thought process", "REASONING", "Chain of thought", "Thoughts", "Working"]),
       st.sampled_from(["", "**", "## "]), plain)
def test_property_prose_working_is_not_a_leak(word, decoration, rest):
    # Working written as prose is the visible answer to a prompt that asked for it ("Think it
    # through, then answer briefly"), not the engine's reasoning reaching the caller.
    content = f"{decoration}{word}:{decoration} {rest}"
    assert check_no_reasoning(content, None, None).ok
    assert check_reasoning_separated(content, "hidden reasoning").ok


def test_the_prompt_that_invites_working_keeps_a_working_answer_passing():
    # The module keeps a prompt that asks for visible working; its reference answer shows the
    # working as prose, and that is not a leak.
    from pytest_qualify.tasks.fixture_data import reasoning_prompts

    inviting = [p for p in reasoning_prompts() if "think it through" in p.text.lower()]
    assert inviting, "no reasoning prompt invites visible working"
    for prompt in inviting:
        assert "**Reasoning:**" in prompt.answer
        assert check_no_reasoning(prompt.answer, None, None).ok


# -- the caller's override, against the same request without it --------------------------------------

@dataclass(frozen=True)
class Seen:
    content: str | None = "Blue"
    reasoning: str | None = None
    reasoning_tokens: int | None = None
    finish_reason: str | None = "stop"
    usage: dict[str, Any] = field(default_factory=lambda: {"completion_tokens": 2})


PLAIN = Seen()
TOOK_EFFECT = "the caller's chat_template_kwargs enable_thinking=True took effect, although thinking is disabled and not caller-overridable"


@pytest.mark.parametrize("overridden,sign", [
    (Seen(reasoning="The user asks about the sky."), "reasoning field populated (28 chars: 'The user asks about the sky.')"),
    (Seen(reasoning_tokens=9), "usage reports 9 reasoning tokens"),
    (Seen(content="<think>sky</think>Blue"), "reasoning markers in the visible content: '<think>'"),
    # vLLM 0.26.0 on a random-weight model: whitespace until the budget, no visible answer.
    (Seen(content=None, reasoning="\n" * 256, finish_reason="length", usage={"completion_tokens": 256}),
     "the reasoning field holds 256 characters of whitespace, none without the override; the answer budget was spent on "
     "reasoning (finish_reason 'length' after 256 completion tokens, no visible answer; without the override finish_reason 'stop')"),
    (Seen(content="Bl", reasoning="  ", finish_reason="length"), "the visible answer cut at 2 chars"),
])
def test_an_override_that_took_effect_fails_saying_so(overridden, sign):
    verdict = check_override_had_no_effect(overridden, PLAIN, True)
    assert not verdict.ok and verdict.reason.startswith(TOOK_EFFECT + ": "), verdict.reason
    assert sign in verdict.reason, verdict.reason


@pytest.mark.parametrize("overridden,baseline", [
    (PLAIN, PLAIN),
    # A disabled template's empty think block: whitespace with and without the override, no leak.
    (Seen(reasoning="\n\n"), Seen(reasoning="\n\n")),
    (Seen(reasoning=""), Seen(reasoning=None)),
    (Seen(reasoning_tokens=0), PLAIN),
])
def test_an_override_without_effect_passes(overridden, baseline):
    verdict = check_override_had_no_effect(overridden, baseline, True)
    assert verdict.ok, verdict.reason
    assert check_no_reasoning(overridden.content, overridden.reasoning, overridden.reasoning_tokens).ok


def test_a_budget_the_request_spends_without_the_override_too_is_not_the_overrides():
    cut = Seen(content="Bl", finish_reason="length")
    assert check_override_had_no_effect(cut, cut, True).ok


def test_disabling_thinking_where_it_is_enabled_took_effect_when_the_reasoning_went():
    reasoned = Seen(reasoning="The sky scatters blue light.")
    verdict = check_override_had_no_effect(Seen(), reasoned, False)
    assert not verdict.ok and "enable_thinking=False took effect, although thinking is enabled" in verdict.reason
    assert "no reasoning came back" in verdict.reason
    assert check_override_had_no_effect(reasoned, reasoned, False).ok


@given(st.text(alphabet=" \n\t\r", min_size=1, max_size=300))
def test_property_whitespace_reasoning_is_no_leak_but_new_whitespace_is_the_override(blank):
    # In any item a whitespace-only field holds no reasoning; beside the same request without the
    # override, whitespace the override alone brought is the override taking effect.
    assert check_no_reasoning("Blue", blank, None).ok
    assert check_override_had_no_effect(Seen(reasoning=blank), Seen(reasoning=blank), True).ok
    verdict = check_override_had_no_effect(Seen(reasoning=blank), PLAIN, True)
    assert not verdict.ok and f"holds {len(blank)} characters of whitespace" in verdict.reason
