"""Steering, the forcing (pure): the oracle's answer as the text a model must generate, the
``structured_outputs`` constraint that allows exactly it, the request vLLM gets, and its token budget.

A text is a one-item ``choice`` (or an escaped ``regex`` when it spans lines); tool calls are written
in the served model's own tool-call syntax, so that vLLM's tool parser produces them; a
``response_format`` task's JSON is forced instead of the response format (vLLM refuses both at once).
A caller's ``max_tokens`` below the forced answer is kept where the caller wants the cut; a limit the
answer fits, but a random model's longer spelling might not, is raised.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_qualify.request_key import request_key as same_request
from pytest_qualify.tasks import parsers as served_text
from pytest_qualify.tasks.parsers import SYNTAXES as TOOL_CALL_SYNTAXES, regex_escape  # noqa: F401 (re-exported)

# A random-weight model spells a forced text in about twice its minimal token count (measured:
# 344 tokens against 178 for 700 characters); the margin covers the end-of-sequence token and the
# odd worse case.
TOKENS_FACTOR = 2.0
TOKENS_MARGIN = 16


class SteerError(ValueError):
    """The oracle's answer cannot be forced on vLLM (a reasoning text, an empty answer)."""


def text_constraint(text: str) -> dict[str, Any]:
    """The ``structured_outputs`` value that allows exactly ``text`` (``tasks/parsers.py``, the one
    writer of a forced text's constraint); an empty answer cannot be forced."""
    try:
        return served_text.text_constraint(text)
    except ValueError as exc:
        raise SteerError(str(exc)) from None


def render_tool_calls(calls: Sequence[tuple[str, Any]], syntax: str) -> str:
    """The model's own text for these calls in the served syntax (``tasks/parsers.py``, the one
    writer of it); arguments that are not a JSON object or an unknown syntax cannot be forced."""
    try:
        return served_text.render_tool_calls(calls, syntax)
    except (ValueError, json.JSONDecodeError) as exc:
        raise SteerError(str(exc)) from None


def _arguments(args: Any) -> dict[str, Any]:
    value = json.loads(args) if isinstance(args, str) else args
    if not isinstance(value, dict):
        raise SteerError(f"tool-call arguments must be a JSON object, got {value!r:.80}")
    return value


@dataclass(frozen=True)
class Forced:
    """One forced answer: the exact text vLLM must generate and what its parsers must make of it."""

    text: str
    content: str | None  # the visible content expected back (None: none, a tool turn)
    calls: tuple[tuple[str, dict[str, Any]], ...] = ()
    structured_outputs: Mapping[str, Any] = field(default_factory=dict)
    faults: tuple[str, ...] = ()  # the answer faults that made this answer (the oracle's Reply.faults)


def force(content: str | None, tool_calls: Sequence[tuple[str, Any]], reasoning: str | None,
          syntax: str) -> Forced:
    """The forced answer for an oracle's reply (its content, tool calls and reasoning)."""
    if reasoning:
        raise SteerError("a reasoning text cannot be forced: the constraint applies only after reasoning ends")
    calls = tuple((str(name), _arguments(args)) for name, args in tool_calls)
    if calls:
        rendered = render_tool_calls(calls, syntax)
        text = f"{content}\n{rendered}" if content else rendered
        return Forced(text, content or None, calls, text_constraint(text))
    text = content or ""
    return Forced(text, text, (), text_constraint(text))


def steered_body(body: Mapping[str, Any], forced: Forced, *, strip_chat_template_kwargs: bool,
                 max_tokens: int | None) -> tuple[dict[str, Any], list[str]]:
    """The request vLLM gets, and what was changed (for the log): the constraint added, a
    ``response_format`` replaced by it, ``max_tokens`` raised to fit the answer, the caller's
    ``chat_template_kwargs`` stripped (as the router in front of the deployment does)."""
    out = dict(body)
    changes = ["structured_outputs " + next(iter(forced.structured_outputs))]
    if "response_format" in out:
        fmt = out.pop("response_format")
        kind = fmt.get("type") if isinstance(fmt, Mapping) else None
        changes.append(f"response_format {kind} replaced by structured_outputs (vLLM refuses both: HTTP 400)")
    out["structured_outputs"] = dict(forced.structured_outputs)
    if strip_chat_template_kwargs and "chat_template_kwargs" in out:
        changes.append(f"chat_template_kwargs {json.dumps(out.pop('chat_template_kwargs'))[:120]} stripped")
    if max_tokens is not None:
        key = "max_completion_tokens" if "max_completion_tokens" in out and "max_tokens" not in out else "max_tokens"
        changes.append(f"{key} {out.get(key)} raised to {max_tokens}")
        out[key] = max_tokens
    return out, changes


def tokens_needed(minimal_tokens: int) -> int:
    """The completion budget a forced answer of ``minimal_tokens`` needs on a random model."""
    return int(minimal_tokens * TOKENS_FACTOR) + TOKENS_MARGIN


def requested_max_tokens(body: Mapping[str, Any]) -> int | None:
    value = body.get("max_tokens", body.get("max_completion_tokens"))
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def kept_for_cut(asked: int | None, spent_tokens: int | None) -> int | None:
    """The caller's limit when the caller asked for a cut answer, else None.

    The reference server cuts an answer longer than the caller's ``max_tokens`` and says ``length``;
    the proxy follows it where the caller shows it wants the cut: the limit is below what vLLM spent
    on this same request's forced answer earlier in the run under the caller's own, larger limit
    (``spent_tokens``: temperature 0 spells it the same way again; the integrity module asks a tool
    call whole, then halves its tokens to cut it). With nothing spent yet a short limit is a budget,
    not a cut: no tokenizer tells which (a 16-token media budget fits the oracle's answer in the
    reference server's tokens, not in a BPE's), so it is raised as a random model's spelling needs
    (:func:`raised_max_tokens`)."""
    return asked if asked is not None and spent_tokens is not None and asked < spent_tokens else None


def raised_max_tokens(asked: int | None, need: int, room: int) -> int | None:
    """A raised ``max_tokens`` when the caller's (``asked``, None: vLLM's default, the whole
    ``room`` left in the window) may be short of ``need`` for a random model's spelling of an answer
    that fits it, else None; never past the window (vLLM refuses a prompt plus max_tokens over it)."""
    if asked is not None and asked >= need:
        return None
    if asked is None:
        return None if room <= need else need
    return min(need, room) if min(need, room) > asked else None


def request_key(body: Mapping[str, Any]) -> str:
    """The key under which the tokens vLLM spent on a request's forced answer are kept: the same
    request (``request_key.py``) whatever its token limit."""
    return same_request(body, without_limit=True)
