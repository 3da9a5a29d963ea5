"""The tool-use request set (``fixtures/tool_use/requests.json``): the user prompt names the request;
the answer is its calls (as ``tool_calls``), or a short text where no tool fits.

Each fault lowers one of the module's measures, on every N-th request of the kind it breaks, counted
by the request's place in the set (so a repetition, or another worker, meets the same requests).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Any

from pytest_qualify.graders.tool_use import UseRequest
from pytest_qualify.graders.tools import canonical_arguments, tool_schemas
from pytest_qualify.reference.oracle import ChatRequest, OracleContext, Reply
from pytest_qualify.reference.oracle_tools import perturb
from pytest_qualify.tasks.tool_use import request_set

PRIORITY = 70
FAULTS = {
    "tool_use_missed_call": "=N: every N-th tool-use request that asks for a call is answered in text with no call "
                            "(trigger recall and F1 fall)",
    "tool_use_spurious_call": "=N: every N-th tool-use request where no tool fits gets a call (trigger precision and F1 fall)",
    "tool_use_schema_break": "=N: every N-th tool-use request's calls lose a required argument (schema accuracy falls, "
                             "exact-argument accuracy with it)",
    "tool_use_wrong_value": "=N: every N-th tool-use request's calls carry one argument value changed, still valid "
                            "under the schema (exact-argument accuracy falls alone)",
}
NO_TOOL_TEXT = "No tool is needed for this; here is the answer in words."


@cache
def _by_prompt() -> dict[str, tuple[int, UseRequest]]:
    return {r.prompt: (i, r) for i, r in enumerate(request_set(), start=1)}


def _every(ctx: OracleContext, fault: str, place: int) -> bool:
    if fault not in ctx.faults:
        return False
    n = max(int(ctx.faults.arg(fault, "1") or 1), 1)
    return place % n == 0


# After the protocol's own oracles: a generated request that repeats a tools-module prompt is
# answered by the tools oracle, whose faults (wrong_tool_args, tool_in_text) must meet that prompt.
PRIORITY = 110

def answer(req: ChatRequest, ctx: OracleContext) -> Reply | None:
    if not req.tools:
        return None
    texts = req.texts("user")
    found = _by_prompt().get(texts[0].strip()) if texts else None
    if found is None:
        return None
    place, request = found
    schemas = tool_schemas(req.tools)
    if not request.expects_call:
        if _every(ctx, "tool_use_spurious_call", place):
            ctx.faults.engage("tool_use_spurious_call")
            # A call valid under its tool's schema: only the choice to call is wrong.
            spurious = ("get_weather", {"city": "Lisbon"}) if "get_weather" in schemas else (next(iter(schemas)), {})
            return Reply(tool_calls=[spurious], faults=("tool_use_spurious_call",))
        return Reply(content=NO_TOOL_TEXT)
    if _every(ctx, "tool_use_missed_call", place):
        ctx.faults.engage("tool_use_missed_call")
        return Reply(content="I would look that up for you.", faults=("tool_use_missed_call",))
    calls: list[tuple[str, Any]] = []
    faults: list[str] = []
    for call in request.calls:
        args = canonical_arguments(call.arguments)
        schema: Mapping[str, Any] = schemas.get(call.name) or {}
        if _every(ctx, "tool_use_schema_break", place):
            required = list(schema.get("required") or [])
            if required and required[0] in args:
                args = {k: v for k, v in args.items() if k != required[0]}
                faults.append("tool_use_schema_break")
        if _every(ctx, "tool_use_wrong_value", place):
            changed = perturb(args, schema)
            if changed != args:
                args = changed
                faults.append("tool_use_wrong_value")
        calls.append((call.name, args))
    for name in dict.fromkeys(faults):
        ctx.faults.engage(name)
    return Reply(tool_calls=calls, faults=tuple(dict.fromkeys(faults)))
