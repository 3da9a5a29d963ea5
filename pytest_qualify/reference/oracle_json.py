"""Deterministic JSON: tasks from ``fixtures/json_tasks.toml`` answered with their ground truth.

A task is recognised by its prompt and a ``json_schema`` response format; the answer is the task's
expected and free fields in the schema's property order, as guided decoding would produce them.
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any

from pytest_qualify.tasks.fixture_data import json_task_prompt, json_tasks
from pytest_qualify.reference.oracle import ChatRequest, OracleContext, Reply

PRIORITY = 40
FAULTS = {
    "json_nondeterministic": "every second answer to the same JSON task carries a different value",
    "json_invalid": "answers to JSON tasks are cut off half way (invalid JSON)",
}


@cache
def tasks_by_prompt() -> dict[str, dict[str, Any]]:
    return {json_task_prompt(t): t for t in json_tasks()}


def truth(task: dict[str, Any]) -> dict[str, Any]:
    values = {**task.get("free", {}), **task["expected"]}
    order = list(task["schema"].get("properties", {}))
    return {k: values[k] for k in sorted(values, key=lambda k: order.index(k) if k in order else len(order))}


def answer(req: ChatRequest, ctx: OracleContext) -> Reply | None:
    fmt = req.response_format
    if not fmt or fmt.get("type") != "json_schema":
        return None
    task = tasks_by_prompt().get(req.last_user_text().strip())
    if task is None:
        return None
    value = truth(task)
    # The layout varies by task (compact, indented), as engines differ: the grader reads values.
    text = json.dumps(value, indent=2 if [t["id"] for t in json_tasks()].index(task["id"]) % 2 else None)
    n = ctx.occurrence(f"json:{task['id']}")
    if "json_nondeterministic" in ctx.faults and n % 2 == 0:
        ctx.faults.engage("json_nondeterministic")
        # Another value, not another layout: the module compares parsed answers.
        last = list(value)[-1]
        text = json.dumps({**value, last: _other(value[last])}, indent=1)
    if "json_invalid" in ctx.faults:
        ctx.faults.engage("json_invalid")
        text = text[: len(text) // 2]
    return Reply(content=text)


def _other(value: Any) -> Any:
    """A different value of the same JSON type."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, str):
        return value + " (revised)"
    if isinstance(value, list):
        return list(reversed(value)) + value[:1]
    return value
