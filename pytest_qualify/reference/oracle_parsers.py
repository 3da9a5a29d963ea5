"""Forced answers: a parsers-module request (its prompt names the case) that carries its own
one-text ``structured_outputs`` constraint gets that text as the model's output, read back by the
served parsers as vLLM reads it.

vLLM generates only what the constraint allows; the reference server generates exactly the one
text a ``choice`` of one item or an escaped ``regex`` allows (``tasks/parsers.forced_text``), then
hands it to its emulation of the recipe's parsers (its ``--tool-call-parser`` and
``--reasoning-parser``), following vLLM 0.32's parser engine (``vllm/parser/qwen3.py``,
``parser_engine.py``): with thinking on, the text up to ``</think>`` (or up to a ``<tool_call>``,
the implicit end) is reasoning; ``<tool_call>`` blocks are calls whose ``<parameter=…>`` values lose
one wrapping line break each side and are read by the tool schema's type
(``coerce_to_schema_type``: null, integer, number, boolean, object, array, string, in that order);
the text around the calls is the content, stripped of its surrounding whitespace when a call was
made. The hermes syntax's blocks are JSON. The stream's chunking follows the handler (content held
when it is whitespace alone, as vLLM's qwen3_coder parser holds it).

The plain answer carries the generated ids where asked (``return_token_ids``): the server's
tokenizer's ids of the forced text, each marker (``<think>``, ``</think>``, ``<tool_call>``,
``</tool_call>``) one token of its own, as the Qwen3 tokenizer holds them.

The parsers module's faults: ``parser_shift_argument[=N]`` changes one argument of the calls in one
forced tool-call answer of every N (default 1,000: the N-th, 2N-th, ... this server reads). The steering
proxy imposes it on a real vLLM (:func:`shifted_text`): it forces the caller's text with the
argument changed, as a proxy or a template that rewrote the model's output would.
``parser_markers_spelt`` generates a forced text's markers spelt in other tokens (``<`` ``think``
``>``), as vLLM 0.32 did where the forcing took the text's characters, not the model's own marker
tokens: the plain answer's ids show it, and the streamed answer's parsers, which read the markers by
id, miss them (the reasoning runs to the end, the calls stay text), so the case deviates and measured
the forcing, not the parser.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from pytest_qualify.reference import tokenizer
from pytest_qualify.reference.oracle import ChatRequest, OracleContext, Reply
from pytest_qualify.tasks.parsers import MARKERS, PROMPT_PREFIX, SYNTAX_OF_PARSER, forced_text, render_tool_calls, served

PRIORITY = 5
FAULTS = {"parser_shift_argument": "[=N]: one argument of the forced tool calls comes back changed in 1 forced "
                                   "tool-call answer of N (default 1,000: the N-th, 2N-th, ... the server reads)"}
SERVED_FAULTS = {"parser_markers_spelt": "a forced text's reasoning and tool-call markers are generated spelt in "
                                        "other tokens, not as the model's own marker tokens (the generated ids "
                                        "show it), and the streamed answer's parsers miss them"}
SHIFT_PERIOD = 1000

_TOOL_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)
_FUNCTION = re.compile(r"<function=([^>]*)>(.*?)(?:</function>|$)", re.DOTALL)
_PARAM = re.compile(r"<\s*parameter\s*=\s*([^>]*)>(.*?)(?:<\s*/\s*parameter\s*>|(?=<\s*parameter\s*=))", re.DOTALL)


def answer(req: ChatRequest, ctx: OracleContext) -> Reply | None:
    constraint = req.body.get("structured_outputs")
    # Only the parsers module's requests: elsewhere the reference server stands for an engine that
    # applies no constraint (the steering tests' upstream, where a forced answer must not hold).
    if not isinstance(constraint, Mapping) or not req.last_user_text().startswith(PROMPT_PREFIX):
        return None
    text = forced_text(constraint)
    if text is None:
        return None
    parsers = served(ctx.profile.serve.args)
    syntax = SYNTAX_OF_PARSER.get(parsers.tool_parser or "") if req.tools and req.body.get("tool_choice") != "none" else None
    thinking = _thinking(req, ctx)
    reasoning, content, calls = parse(text, syntax=syntax, reasoning_parser=parsers.reasoning_parser,
                                      thinking=thinking, tools=req.tools)
    ids = tuple(tokenizer.ids(text))
    if "parser_markers_spelt" in ctx.faults and any(marker in text for marker in MARKERS):
        ctx.faults.engage("parser_markers_spelt")
        ids = tuple(tokenizer.spelt_ids(text))
        if req.stream:
            # The streamed parsers find no marker token: no end of the reasoning, no call.
            reasoning, content, calls = (text, None, []) if parsers.reasoning_parser and thinking else (None, text, [])
    if calls and "parser_shift_argument" in ctx.faults and ctx.occurrence("parser-forced-calls") % _period(ctx) == 0:
        ctx.faults.engage("parser_shift_argument")
        name, args = calls[0]
        calls = [(name, shift(args)), *calls[1:]]
        return Reply(content=content, tool_calls=calls, reasoning=reasoning, faults=("parser_shift_argument",),
                     token_ids=ids)
    return Reply(content=content, tool_calls=calls, reasoning=reasoning, token_ids=ids)


def _period(ctx: OracleContext) -> int:
    return max(1, int(ctx.faults.number("parser_shift_argument", SHIFT_PERIOD)))


def _thinking(req: ChatRequest, ctx: OracleContext) -> bool:
    kwargs = req.body.get("chat_template_kwargs") or {}
    if "enable_thinking" in kwargs:
        return bool(kwargs["enable_thinking"])
    return ctx.profile.thinking.enabled


def parse(text: str, *, syntax: str | None, reasoning_parser: str | None, thinking: bool,
          tools: Sequence[Mapping[str, Any]]) -> tuple[str | None, str | None, list[tuple[str, Any]]]:
    """(reasoning, content, calls) as vLLM's parsers read a non-streamed output."""
    reasoning = None
    rest = text
    if reasoning_parser and thinking:
        body = rest[len("<think>"):] if rest.startswith("<think>") else rest
        end = body.find("</think>")
        implicit = body.find("<tool_call>") if syntax else -1
        if end >= 0 and (implicit < 0 or end < implicit):
            reasoning, rest = body[:end], body[end + len("</think>"):]
        elif implicit >= 0:
            reasoning, rest = body[:implicit], body[implicit:]
        else:
            reasoning, rest = body, ""
        reasoning = reasoning or None
    elif reasoning_parser:
        rest = rest.replace("</think>", "")  # a stray end marker is dropped where thinking is off
    if syntax is None or "<tool_call>" not in rest:
        return reasoning, rest or None, []
    calls: list[tuple[str, Any]] = []
    content_parts = [rest[:rest.find("<tool_call>")]]
    last = 0
    for block in _TOOL_BLOCK.finditer(rest):
        if last:
            content_parts.append(rest[last:block.start()])
        last = block.end()
        inner = block.group(1)
        call = _qwen3_call(inner, tools) if syntax == "qwen3_coder" else _hermes_call(inner)
        if call is not None:
            calls.append(call)
    content_parts.append(rest[last:] if last else "")
    content = "".join(content_parts)
    if calls:
        content = content.strip()
    return reasoning, content or None, calls


def _hermes_call(inner: str) -> tuple[str, Any] | None:
    try:
        parsed = json.loads(inner.strip())
    except ValueError:
        return None
    if not isinstance(parsed, dict) or "name" not in parsed:
        return None
    return str(parsed["name"]), parsed.get("arguments", {})


def _properties(tools: Sequence[Mapping[str, Any]], name: str) -> Mapping[str, Any]:
    for tool in tools:
        function = tool.get("function") or {}
        if function.get("name") == name:
            return (function.get("parameters") or {}).get("properties") or {}
    return {}


def _qwen3_call(inner: str, tools: Sequence[Mapping[str, Any]]) -> tuple[str, Any] | None:
    match = _FUNCTION.search(inner)
    if match is None:
        return None
    name = match.group(1).strip()
    props = _properties(tools, name)
    args: dict[str, Any] = {}
    for param in _PARAM.finditer(match.group(2)):
        value = param.group(2)
        if value.startswith("\n"):
            value = value[1:]
        if value.endswith("\n"):
            value = value[:-1]
        key = param.group(1)
        schema = props.get(key)
        args[key] = coerce(value, schema) if isinstance(schema, Mapping) else value
    return name, args


def _types(schema: Mapping[str, Any]) -> list[str]:
    kind = schema.get("type")
    if isinstance(kind, list):
        return [str(k) for k in kind]
    if isinstance(kind, str):
        return [kind]
    if "enum" in schema:
        return ["string"]
    if "properties" in schema:
        return ["object"]
    if "items" in schema:
        return ["array"]
    return ["string"]


def coerce(value: str, schema: Mapping[str, Any]) -> Any:
    """vLLM's ``coerce_to_schema_type``: the first of null, integer, number, boolean, object, array,
    string that the schema allows and the text reads as; the text itself when none does."""
    types = {t.strip().lower() for t in _types(schema)}
    for kind in ("null", "integer", "number", "boolean", "object", "array", "string"):
        if kind not in types:
            continue
        if kind == "null" and value.lower() == "null":
            return None
        if kind == "string":
            return value
        if kind == "integer":
            try:
                return int(value)
            except ValueError:
                continue
        if kind == "number":
            try:
                number = float(value)
            except ValueError:
                continue
            if not math.isfinite(number):
                continue
            return number if number != int(number) else int(number)
        if kind == "boolean":
            lower = value.lower().strip()
            if lower in ("true", "1"):
                return True
            if lower in ("false", "0"):
                return False
            continue
        if kind in ("object", "array"):
            try:
                parsed = json.loads(value)
            except ValueError:
                continue
            if isinstance(parsed, dict if kind == "object" else list):
                return parsed
    return value


def shift(args: Any) -> Any:
    """The arguments with one value changed (the first scalar met, depth first), whatever its type."""
    if isinstance(args, dict):
        if not args:
            return {"shifted": 1}
        key = next(iter(args))
        return {**args, key: shift(args[key])}
    if isinstance(args, list):
        return [shift(args[0]), *args[1:]] if args else [1]
    if isinstance(args, bool):
        return not args
    if isinstance(args, (int, float)):
        return args + 1
    if isinstance(args, str):
        return args + "x"
    return "x"


def shifted_text(body: Mapping[str, Any], ctx: OracleContext, syntax: str) -> tuple[str, str | None,
                                                                                 list[tuple[str, Any]]] | None:
    """For the steering proxy: where ``parser_shift_argument`` engages on this request (a caller's
    own one-text constraint holding tool calls and no reasoning, the 1,000th, 2,000th, ... such),
    the text to force instead, with the first call's arguments shifted, and its content and calls;
    else None (the request goes through as it came)."""
    if "parser_shift_argument" not in ctx.faults or not isinstance(body.get("structured_outputs"), Mapping):
        return None
    text = forced_text(body["structured_outputs"])
    if text is None or not body.get("tools"):
        return None
    kwargs = body.get("chat_template_kwargs") or {}
    thinking = bool(kwargs.get("enable_thinking", ctx.profile.thinking.enabled))
    reasoning, content, calls = parse(text, syntax=syntax, reasoning_parser=served(ctx.profile.serve.args).reasoning_parser,
                                      thinking=thinking, tools=list(body["tools"]))
    if not calls or reasoning is not None or ctx.occurrence("parser-forced-calls") % _period(ctx):
        return None
    ctx.faults.engage("parser_shift_argument")
    shifted = [(calls[0][0], shift(calls[0][1])), *calls[1:]]
    rendered = render_tool_calls(shifted, syntax)
    return (f"{content}\n{rendered}" if content else rendered), content, shifted
