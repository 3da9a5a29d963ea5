"""Reasoning leakage: the engine's reasoning reaching the caller. With thinking disabled, no
reasoning anywhere — not in a reasoning field, not as ``<think>``-style or chat-template markers in
the visible content, not counted as reasoning tokens. With thinking enabled, reasoning must stay
out of the visible content, and where none came back at all, the content holds nothing besides
the answer's slot (a parser that stripped the markers leaves the working there).

Prose working is not a leak: a visible answer that starts "**Reasoning:**" or "Thoughts:" is the
model answering a prompt that asked it to think it through, in words the caller was meant to read.
Only what the engine and its template produce for hidden reasoning (fields, tags, markers, usage)
is, in the forms the open model families write it (their chat templates and vLLM's reasoning
parsers): think tags by any name, harmony's channels whole or with their special tokens stripped
("analysis...assistantfinal...", or spaced: "analysis ... assistant final ...", or an analysis
channel cut off before any final one: "analysis We need to..."), Gemma's and Apertus's tokens,
Granite's two phrases. A reasoning field that holds only whitespace holds no reasoning. Nothing is
stripped before grading: the content is judged exactly as the caller would see it.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from typing import Any, Protocol

from pytest_qualify.graders import Verdict
from pytest_qualify.graders.contract import Contract, outside_slot

# What open model families' chat templates and vLLM's reasoning parsers (vllm/reasoning/*.py) put
# round hidden reasoning, as it reads once it reaches the visible content. Think tags by any name:
# an angle-bracket tag or template token whose name holds one of these stems (<think>, </think>,
# <thinking>, <thought> (EXAONE), <seed:think> (Seed-OSS), <mm:think>, <longcat_think>,
# <|begin_of_thought|>, <|START_THINKING|> (Cohere Command A), <reasoning>, <|think|>, ...).
# A stem ends the word it starts: <thoughts> and <reasoning> are tags, <reasonable> is not one.
_TAG_STEMS = r"(?:think(?:ing)?|thoughts?|reason(?:ing)?|reflect(?:ion)?|scratchpad|monologue)(?![a-z])"
_TAG_RE = rf"<\s*\|?\s*/?\s*\|?\s*[\w:.|-]*?{_TAG_STEMS}[\w:.|-]*?\s*\|?\s*/?\s*>"
MARKER_RE = re.compile(
    _TAG_RE
    + r"|\[/?THINK\]"                         # Mistral Magistral
    + r"|◁/?\s*\w*think\w*\s*▷"                # Kimi-VL
    # gpt-oss harmony: its channel tokens (<|channel|>analysis<|message|>..., <|start|>assistant)
    + r"|<\|channel\|>\s*[a-z]*|<\|(?:message|constrain)\|>|<\|start\|>\s*assistant"
    + r"|<\|channel>|<channel\|>"                # Gemma 4: <|channel>thought\n...<channel|>
    + r"|<\|inner_(?:prefix|suffix)\|>",          # Apertus
    re.I,
)
# Harmony with its special tokens stripped (skip_special_tokens) leaves the channel names in the
# text, glued ("analysisThe user asks...assistantfinalBlue") or, where the detokenizer puts a space
# between special tokens (vLLM's default), spaced ("analysis The user asks... assistant final Blue").
# The glued "assistant"+channel never occurs in prose. Spaced, the words are prose's own ("The final
# analysis: 4", "An analysis of the data shows..."), so only harmony's shape counts:
# - the content opening with a lowercase channel name (after the role, where "<|start|>assistant"
#   was generated too), glued or spaced (spaces or newlines) to a capital that starts the channel's
#   text ("analysis We need to...", "commentary\nChecking..."): the reply as generated after the
#   prompt's "<|start|>assistant", so it holds where the reply was cut off in the analysis channel
#   and no final channel follows. Prose capitalises a word that opens a reply ("Analysis: ..."),
#   or writes the name as a word of its sentence ("analysis of the sum: 4", "analysis shows...");
# - the lowercase role and a channel name as words standing where a sentence starts (at the start,
#   or after a sentence's end): "<|start|>assistant" stripped before a channel;
# - a leading lowercase channel name with that role and channel later in the same content.
_CHANNEL = r"(?:final|analysis|commentary)"
_STRIPPED_HARMONY_RE = re.compile(
    rf"(?i:assistant{_CHANNEL})"
    r"|\A\s*(?:assistant\s*)?(?:analysis|commentary)(?=\s*[A-Z])"
    rf"|(?:\A|(?<=[.!?:;)\]}}\"'\u201d\u2019`*]))\s*assistant\s+{_CHANNEL}\b"
    rf"|\A\s*(?:analysis|commentary)(?=\s+\S[\s\S]*?\bassistant\s+{_CHANNEL}\b)"
)
# IBM Granite writes its reasoning between two phrases, not tags (vLLM's granite parser): both, in
# order, are its template's reasoning; the first alone is prose working a prompt may invite.
_GRANITE_RE = re.compile(r"(Here(?:'s|\u2019s| is) my thought process:).*?(Here(?:'s|\u2019s| is) my response:)", re.S)


def reasoning_markers(content: str | None) -> list[str]:
    """The reasoning markers (tags, template tokens, stripped channel names, a template's phrases)
    found in visible content, in the order they stand."""
    if not content:
        return []
    text = unicodedata.normalize("NFKC", content)
    found = [(m.start(), m.group(0)) for m in MARKER_RE.finditer(text)]
    found += [(m.start(), " ".join(m.group(0).split())) for m in _STRIPPED_HARMONY_RE.finditer(text)]
    granite = _GRANITE_RE.search(text)
    if granite is not None:
        found += [(granite.start(1), granite.group(1)), (granite.start(2), granite.group(2))]
    return [marker for _, marker in sorted(found)]


# Working written on the answer's own line, where no line stands outside the slot: what a thinking
# model's reasoning reads like once its markers are gone, never how a reply speaks to its reader.
# - A sentence before an answer label that starts the next sentence ("6*7=42. The answer is: 42"):
#   the working before an ANSWER line, written on that line. A courtesy alone before the label
#   ("Sure! The answer is: Blue") is no working, and a label that does not start a sentence
#   ("Here is the answer: Blue") is a preamble.
# - The prompt's asker in the third person ("Okay, the user wants the colour...", "the user is
#   asking..."): reasoning speaks of the user, a reply speaks to them.
# - A reply that opens with a first-person deliberation ("Let me think step by step", "Okay, so",
#   "Hmm, let me", "Wait,", "First, I need to", "I need to figure out"): how the open families'
#   reasoning starts (Qwen3, DeepSeek-R1), not an answer. A hesitation alone ("Hmm, blue.") or an
#   acknowledgement ("OK, I'll go with blue.") is an answer's tone, not working.
_INLINE_LABEL_RE = re.compile(
    r"(?<=[.!?])[\s*_`]+(?:the\s+)?(?:final\s+)?answer(?:\s+is)?\s*[*_`]*\s*:", re.I)
_COURTESY_RE = re.compile(
    r"(?:(?:sure|certainly|of course|okay|ok|alright|all right|absolutely|yes|no|great question|good question|"
    r"happy to help|here you go|got it)[\s!.,*_]*)+", re.I)
_ABOUT_THE_USER_RE = re.compile(
    r"\bthe user(?:'s|\u2019s)?\s+(?:wants|wanted|asks|asked|is asking|was asking|needs|would like|is looking for|"
    r"requests|requested|mentioned|says|said|provided|gave|question)\b", re.I)
_DELIBERATION_RE = re.compile(
    r"\A[\s*_>#-]*(?:"
    r"(?:okay|ok|alright|all right|so|well|hmm+)[,.!]?\s+(?:so\b|let(?:'s|\u2019s|\s+me|\s+us)\b|first\b|"
    r"I\s+(?:need|have\s+to|should|must)\b|we\s+(?:need|have\s+to)\b)"
    r"|let(?:'s|\u2019s|\s+me|\s+us)\s+(?:think|see|figure|work|recall|check|calculate|compute|start|break|reason|consider)\b"
    r"|wait\s*[,.!]"
    r"|first,?\s+I\s+(?:need|should|have\s+to|must)\b"
    r"|I\s+(?:need|have)\s+to\s+(?:figure|determine|find|recall|work|calculate|compute|think)\b"
    r")", re.I)


def one_line_working(content: str | None) -> str:
    """The working a reply of one line holds on its answer's own line ("" when none): the sentences
    before an answer label that starts a sentence, or the whole line where it speaks of the user in
    the third person or opens with a deliberation. Read only where no line stands outside the slot
    and no reasoning came back with thinking enabled."""
    text = " ".join(unicodedata.normalize("NFKC", content or "").split())
    if not text:
        return ""
    label = _INLINE_LABEL_RE.search(text)
    if label is not None:
        before = text[:label.start()].strip()
        if before and not _COURTESY_RE.fullmatch(before):
            return before
    if _ABOUT_THE_USER_RE.search(text) or _DELIBERATION_RE.match(text):
        return text
    return ""


def _shown(text: str) -> str:
    text = " ".join(text.split())
    return repr(text if len(text) <= 60 else text[:57] + "...")


def check_no_reasoning(content: str | None, reasoning: str | None, reasoning_tokens: int | None = None) -> Verdict:
    """Thinking disabled: accept only when no reasoning shows anywhere."""
    problems = []
    if reasoning is not None and reasoning.strip():
        problems.append(f"reasoning field populated ({len(reasoning)} chars: {_shown(reasoning)})")
    markers = reasoning_markers(content)
    if markers:
        problems.append(f"reasoning markers in the visible content: {', '.join(repr(m) for m in markers[:3])}")
    if reasoning_tokens:
        problems.append(f"usage reports {reasoning_tokens} reasoning tokens")
    if problems:
        return Verdict.reject("; ".join(problems))
    return Verdict.accept("no reasoning in the fields, the content or the usage")


def check_reasoning_separated(
    content: str | None,
    reasoning: str | None,
    reasoning_tokens: int | None = None,
    *,
    contract: Contract | None = None,
    parser: str | None = None,
) -> Verdict:
    """Thinking enabled: reasoning may exist but only in its own field, never in the content.

    Markers in the content are a leak. So is reasoning the parser stripped of its markers or missed
    (vLLM issue #46042): with ``contract`` (the prompt's answer contract) given and no reasoning
    returned at all — the field empty or whitespace, no reasoning tokens in the usage — a thinking
    model's working can only be in the content, and any text there besides the slot
    (:func:`~pytest_qualify.graders.contract.outside_slot`: the lines before the ``ANSWER`` line, a
    whole reply of several lines) is that working: "Okay, the user wants…" then the answer. A reply
    of one line is read too (:func:`one_line_working`): "Let me think step by step: 6*7=42. The
    answer is: 42", "Okay, the user wants the colour, so it is blue." leak; "Blue.", "The answer
    is: Blue" and "ANSWER: 42" do not. Where
    reasoning did come back, visible working beside it is the model's answer, never judged here.
    ``parser`` names the deployment's reasoning parser in the reason (None: not known here)."""
    markers = reasoning_markers(content)
    if markers:
        return Verdict.reject(
            f"reasoning markers in the visible content: {', '.join(repr(m) for m in markers[:3])} "
            "(the reasoning parser did not separate them)"
        )
    returned = bool(reasoning and reasoning.strip())
    if contract is not None and not returned and not reasoning_tokens:
        working = outside_slot(content, contract)
        if working:
            lines = sum(1 for line in working.splitlines() if line.strip())
            held = f"holds {lines} line{'s' if lines != 1 else ''} of working besides its answer slot"
        else:
            working = one_line_working(content)
            held = "holds working on its answer's own line"
        if working:
            who = f"the reasoning parser {parser!r}" if parser else "the deployment's reasoning parser"
            return Verdict.reject(
                f"reasoning leak: thinking is enabled and no reasoning came back (no reasoning field, no reasoning "
                f"tokens), while the visible content {held}: {_shown(working)} ({who} left the reasoning in the content)"
            )
    where = ("in the reasoning field" if returned else
             f"counted in the usage ({reasoning_tokens} tokens), none returned" if reasoning_tokens else "none returned")
    return Verdict.accept(f"visible content free of reasoning markers; reasoning {where}")


class AnswerLike(Protocol):
    """What the override check reads of an answer (client/answer.py ``Answer``)."""

    content: str | None
    reasoning: str | None
    reasoning_tokens: int | None
    finish_reason: str | None
    usage: Mapping[str, Any]


def check_override_had_no_effect(overridden: AnswerLike, baseline: AnswerLike, requested: bool) -> Verdict:
    """A caller's ``chat_template_kwargs.enable_thinking=requested`` against a profile that says
    thinking is not caller-overridable: the answer to the request with it (``overridden``) must
    show what the same request without it (``baseline``) shows.

    Asking for thinking while it is disabled took effect when the overridden answer reports
    reasoning tokens, carries reasoning text or reasoning markers, holds whitespace reasoning the
    baseline did not (vLLM 0.26.0 with a random model fills the field with whitespace until the
    budget), or lost its visible answer to a budget spent on reasoning. A whitespace-only field
    the baseline shows too (a disabled template's empty think block) is no effect. Asking to
    disable thinking while it is enabled took effect when the baseline reasoned and the overridden
    answer did not. The reason says the override took effect, then each sign of it."""
    said = f"the caller's chat_template_kwargs enable_thinking={requested} took effect, although thinking is " \
           f"{'enabled' if not requested else 'disabled'} and not caller-overridable"
    reasoning, before = overridden.reasoning or "", baseline.reasoning or ""
    signs = []
    if requested:
        if overridden.reasoning_tokens:
            signs.append(f"usage reports {overridden.reasoning_tokens} reasoning tokens")
        if reasoning.strip():
            signs.append(f"reasoning field populated ({len(reasoning)} chars: {_shown(reasoning)})")
        elif reasoning != before:
            signs.append(f"the reasoning field holds {len(reasoning)} characters of whitespace, "
                         f"{f'{len(before)}' if before else 'none'} without the override")
        markers = reasoning_markers(overridden.content)
        if markers and not reasoning_markers(baseline.content):
            signs.append(f"reasoning markers in the visible content: {', '.join(repr(m) for m in markers[:3])}")
        if overridden.finish_reason == "length" and reasoning and baseline.finish_reason != "length":
            visible = (overridden.content or "").strip()
            lost = "no visible answer" if not visible else f"the visible answer cut at {len(visible)} chars"
            tokens = (overridden.usage or {}).get("completion_tokens")
            spent = f" after {tokens} completion tokens" if tokens is not None else ""
            signs.append(f"the answer budget was spent on reasoning (finish_reason 'length'{spent}, {lost}; "
                         f"without the override finish_reason {baseline.finish_reason!r})")
    elif before.strip() and not reasoning.strip() and not overridden.reasoning_tokens:
        signs.append(f"no reasoning came back, where the same request without the override returned "
                     f"{len(before)} chars of it")
    if signs:
        return Verdict.reject(f"{said}: {'; '.join(signs)}")
    return Verdict.accept(f"the caller's enable_thinking={requested} had no effect: the answer shows what the "
                          "same request without it shows")
