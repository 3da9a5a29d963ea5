"""Protocol module 2 — deterministic JSON.

Each task of ``fixtures/json_tasks.toml`` is asked twice, identically (``response_format``
json_schema, temperature 0, a fixed seed): the first answer must validate against the schema with
the task's expected values, and the second must be byte-identical to it.
"""

from __future__ import annotations

import tomllib
from importlib import resources

import pytest

from pytest_qualify.checks import require
from pytest_qualify.graders.json_output import JsonAnswerError, check_identical, check_json_answer, parse_json_answer

pytestmark = pytest.mark.qualify_module("json")

TASKS = tomllib.loads(resources.files("pytest_qualify.fixtures").joinpath("json_tasks.toml").read_text())["task"]


@pytest.mark.parametrize("task", TASKS, ids=[t["id"] for t in TASKS])
def test_json_task(task, qualify_client, qualify_profile, qualify_record, qualify_salt, qualify_repetition):
    where = f"task {task['id']}, repetition {qualify_repetition}"
    limits = qualify_profile.limits
    request = dict(
        max_tokens=limits.answer_tokens + limits.reasoning_headroom_tokens,
        temperature=0,
        seed=task["seed"],
        cache_salt=qualify_salt,
        response_format={"type": "json_schema", "json_schema": {"name": task["id"], "schema": task["schema"], "strict": True}},
    )
    messages = [{"role": "user", "content": task["prompt"].strip()}]
    first = qualify_client.chat(messages, **request)
    qualify_record.answer(first)
    second = qualify_client.chat(messages, **request)
    qualify_record.answer(second)
    try:
        qualify_record.props(json_fenced=parse_json_answer(first.content).fenced)
    except JsonAnswerError:
        pass  # the grader below says why
    require(check_json_answer(first.content, task["schema"], task["expected"], unordered=task.get("unordered", ())), where)
    require(check_identical(first.content, second.content), where)
