"""Tool-call tasks from ``fixtures/tools/``: the user prompt names the case; the answer is its calls.

The calls go out as real ``tool_calls`` (the server streams them as deltas). For the round trip the
final answer is read from the ``tool`` message the client sent back, not from the fixture, and
written in the case's contract; a no-tool-fits answer is the case's ground truth in its contract.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from pytest_qualify.tasks.fixture_data import tool_fixtures
from pytest_qualify.graders.tools import ExpectedCall, canonical_arguments, tool_schemas
from pytest_qualify.reference.oracle import ChatRequest, OracleContext, Reply

FAULTS = {
    "wrong_tool_args": "one argument value is wrong in every tool call",
    "tool_in_text": "tool calls are written as fenced JSON in the content instead of tool_calls",
    "irrelevant_tool_call": "a tool is called even when no offered tool fits the request",
}
SERVED_FAULTS = {"tool_name_repeated_in_stream": "streamed tool calls send the function name in two deltas"}


def answer(req: ChatRequest, ctx: OracleContext) -> Reply | None:
    if not req.tools:
        return None
    fixtures = tool_fixtures()
    prompt = _first_user_text(req).strip()
    schemas = tool_schemas(req.tools)
    for case in fixtures.irrelevance:
        if case.prompt.strip() == prompt:
            if "irrelevant_tool_call" in ctx.faults:
                ctx.faults.engage("irrelevant_tool_call")
                return _calls_reply([ExpectedCall(_first_tool(req), {})], schemas, ctx)
            return Reply(content=case.answer)
    for rt in fixtures.round_trip:
        if rt.prompt.strip() == prompt:
            if req.messages and req.messages[-1].get("role") == "tool":
                return Reply(content=_round_trip_answer(req, rt.result_field, ctx))
            return _calls_reply(rt.calls, schemas, ctx)
    for case in fixtures.cases + fixtures.parallel:
        if case.prompt == prompt:
            # Parallel calls go out in reverse order: a correct client must not depend on order.
            calls = case.calls[::-1] if len(case.calls) > 1 else case.calls
            return _calls_reply(calls, schemas, ctx)
    return None


def _first_user_text(req: ChatRequest) -> str:
    texts = req.texts("user")
    return texts[0] if texts else ""


def _first_tool(req: ChatRequest) -> str:
    return str(req.tools[0]["function"]["name"])


def _calls_reply(calls: Sequence[ExpectedCall], schemas: Mapping[str, Any], ctx: OracleContext) -> Reply:
    concrete = []
    for call in calls:
        args = canonical_arguments(call.arguments)
        if "wrong_tool_args" in ctx.faults:
            perturbed = perturb(args, schemas.get(call.name) or {})
            if perturbed != args:
                ctx.faults.engage("wrong_tool_args")
            args = perturbed
        concrete.append((call.name, args))
    if "tool_in_text" in ctx.faults:
        ctx.faults.engage("tool_in_text")
        body = "\n".join(json.dumps({"name": n, "arguments": a}) for n, a in concrete)
        return Reply(content=f"```json\n{body}\n```", finish_reason="stop")
    return Reply(tool_calls=concrete)


def _round_trip_answer(req: ChatRequest, field: str, ctx: OracleContext) -> str:
    """The final answer in the case's contract (one JSON object: amount and currency), using the
    value the tool returned (read from the ``tool`` message); a preamble line or a fence around the
    object varies, as capable models write it."""
    content = req.messages[-1].get("content")
    try:
        result = json.loads(content) if isinstance(content, str) else None
    except ValueError:
        result = None
    if not isinstance(result, dict) or field not in result:
        return "The tool did not return a usable result."
    answer = {"amount": result[field], "currency": result.get("to_currency", "")}
    if ctx.occurrence("round-trip-style") % 2:
        return f"{result.get('amount')} {result.get('from_currency')} converts to {result[field]}:\n```json\n{json.dumps(answer, indent=2)}\n```"
    return json.dumps(answer)


def perturb(args: dict[str, Any], schema: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments with their first scalar value changed, still valid against the schema."""
    out = dict(args)
    props = schema.get("properties") or {}
    for key, value in out.items():
        changed = _perturb_value(value, props.get(key) or {})
        if changed is not None:
            out[key] = changed
            return out
    return out


def _perturb_value(value: Any, schema: Mapping[str, Any]) -> Any:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, str):
        enum = schema.get("enum")
        if enum and len(enum) > 1:
            return enum[(enum.index(value) + 1) % len(enum)] if value in enum else enum[0]
        return _near_miss_string(value)
    if isinstance(value, dict):
        changed = perturb(value, schema)
        return changed if changed != value else None
    if isinstance(value, list) and value:
        first = _perturb_value(value[0], schema.get("items") or {})
        return [first, *value[1:]] if first is not None else None
    return None


def _near_miss_string(text: str) -> str | None:
    """Change the last letter or digit to its neighbour (keeps patterns like ^[A-Z]{3}$ valid)."""
    for i in range(len(text) - 1, -1, -1):
        ch = text[i]
        if ch.isdigit():
            return text[:i] + str((int(ch) + 1) % 10) + text[i + 1:]
        if "a" <= ch.lower() <= "z":
            base = ord("A") if ch.isupper() else ord("a")
            return text[:i] + chr(base + (ord(ch) - base + 1) % 26) + text[i + 1:]
    return None
