"""The checks every answer ``qualify_ask`` returns goes through, as one pure function: the visible
answer and its finish state (``finish.py``), then the integrity rules cheap enough for every
answer (``integrity.py``): a streamed answer's chunk structure, and the visible length within the
module's band. The fixture calls it once per answer, records what it returns and fails the test
on its failure; nothing here touches pytest."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from pytest_qualify.graders.finish import check_finish
from pytest_qualify.graders.integrity import check_length_band, check_stream_shape

# The properties an answer's checks record (one pair per item: a later answer's replace them).
FINISH_PROPERTIES = ("finish_reason", "finish_check")


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


def check_answer(answer: Any, *, tool_turn: bool = False, band: Band | None = None) -> AnswerChecks:
    """``answer``: a ``client.answer.Answer``; ``tool_turn``: the turn offered tools, so
    ``tool_calls`` may end it; ``band``: the module's length band, if the profile has one."""
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
    if band is not None and not answer.tool_calls:
        verdict = check_length_band(answer.content, band.min_chars, band.max_chars, band.module)
        props.append(("length_chars", len(answer.content or "")))
        if not verdict.ok:
            return AnswerChecks(tuple(props), f"length band: {verdict.reason}")
    return AnswerChecks(tuple(props))
