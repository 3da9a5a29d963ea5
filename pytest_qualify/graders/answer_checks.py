"""The checks every answer ``qualify_ask`` returns goes through, as one pure function: the visible
answer and its finish state (``finish.py``), then the integrity rules cheap enough for every
answer (``integrity.py``): a streamed answer's chunk structure, and the length of what the
answer's contract reads within the module's band. The fixture calls it once per answer, records what it returns and fails the test
on its failure; nothing here touches pytest."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from pytest_qualify.graders.contract import Contract, measured_span
from pytest_qualify.graders.finish import check_finish
from pytest_qualify.graders.integrity import check_length_band, check_stream_shape

# The properties an answer's checks record (one pair per item: a later answer's replace them).
FINISH_PROPERTIES = ("finish_reason", "finish_check")

# A streamed answer of at least this many tokens whose output all came in one chunk with its finish
# was not streamed as it was decoded (a shorter answer may honestly fit the chunk an engine packs).
INCREMENTAL_MIN_TOKENS = 8


class Band(Protocol):
    """A module's visible-length band (``profiles.LengthBand`` is one)."""

    module: str
    min_chars: int
    max_chars: int


@dataclass(frozen=True)
class AnswerChecks:
    """What the checks found: the properties to record, in order, and the first failure (None:
    every check passed). The checks stop at the first failure, as the test does."""

    properties: tuple[tuple[str, Any], ...]
    failure: str | None = None

    @property
    def ok(self) -> bool:
        return self.failure is None


def check_incremental(answer: Any, required: bool) -> tuple[str | None, str | None]:
    """A streamed answer's output all in one chunk with its finish: the stream was not a stream (its
    time to first token is its end to end). Returns (the finding, the failure when the profile
    requires incremental streaming); (None, None) for a stream that came as decoded, a short
    answer, or an answer not streamed."""
    stream = getattr(answer, "stream", None)
    tokens = answer.completion_tokens if getattr(answer, "usage", None) else None
    if stream is None or not stream.whole_at_finish or tokens is None or tokens < INCREMENTAL_MIN_TOKENS:
        return None, None
    finding = (f"all {tokens} output tokens arrived in one chunk with the finish (not streamed as decoded; "
               "the first chunk's time is the end to end)")
    return finding, (f"stream contract: {finding}; the profile requires incremental streaming" if required else None)


def check_answer(answer: Any, *, tool_turn: bool = False, band: Band | None = None,
                 contract: Contract | None = None, incremental_required: bool = False) -> AnswerChecks:
    """``answer``: a ``client.answer.Answer``; ``tool_turn``: the turn offered tools, so
    ``tool_calls`` may end it; ``band``: the module's length band, if the profile has one;
    ``contract``: the answer contract the module grades the answer under. The band applies only
    to an answer whose contract is named, and measures what that contract reads as the answer
    (``contract.measured_span``: the whole reply where the prompt asks for the value alone, the
    answer line on, never the working a prompt invited). ``incremental_required``: the profile's
    ``[integrity] incremental_streaming = "required"``: a streamed answer that came whole in one
    chunk with its finish fails (otherwise it is recorded as a finding)."""
    verdict = check_finish(answer, expect_tool=tool_turn)
    props: list[tuple[str, Any]] = [("finish_reason", answer.finish_reason),
                                    ("finish_check", "ok" if verdict.ok else verdict.reason)]
    if not verdict.ok:
        return AnswerChecks(tuple(props), f"finish state: {verdict.reason}")
    if answer.stream is not None:
        usage_tokens = answer.completion_tokens if answer.usage else None
        verdict = check_stream_shape(answer.stream, usage_tokens, answer.finish_reason)
        props.append(("stream_check", "ok" if verdict.ok else verdict.reason))
        if not verdict.ok:
            return AnswerChecks(tuple(props), f"stream contract: {verdict.reason}")
        finding, failure = check_incremental(answer, incremental_required)
        if finding is not None:
            props.append(("stream_incremental", finding))
            if failure is not None:
                return AnswerChecks(tuple(props), failure)
    if band is not None and contract is not None and not answer.tool_calls:
        measured, what = measured_span(answer.content, contract)
        verdict = check_length_band(measured, band.min_chars, band.max_chars, band.module, what=what)
        props += [("length_chars", len(measured)), ("length_measured", what)]
        if not verdict.ok:
            return AnswerChecks(tuple(props), f"length band: {verdict.reason}")
    return AnswerChecks(tuple(props))
