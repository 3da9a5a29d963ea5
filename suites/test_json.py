"""Protocol module 2 — deterministic JSON.

Each task of ``fixtures/json_tasks.toml`` is asked twice (``response_format`` json_schema,
temperature 0, a fixed seed), each time with its own cache salt so that both answers are fresh
computations (a prefix-cache hit is computed on another path, and vLLM does not promise the same
bits across that): the first answer must validate against the schema with the task's expected
values (or their accepted forms), and the second must parse to the same value.
"""

from __future__ import annotations

import pytest

from pytest_qualify.checks import require
from pytest_qualify.tasks.fixture_data import json_task_prompt, json_tasks
from pytest_qualify.graders.json_output import JsonAnswerError, check_json_answer, check_same_value, parse_json_answer

pytestmark = pytest.mark.qualify_module("json")

TASKS = json_tasks()


@pytest.mark.parametrize("task", TASKS, ids=[t["id"] for t in TASKS])
def test_json_task(task, qualify_ask, qualify_record, qualify_repetition):
    where = f"task {task['id']}, repetition {qualify_repetition}"
    request = dict(
        seed=task["seed"],
        response_format={"type": "json_schema", "json_schema": {"name": task["id"], "schema": task["schema"], "strict": True}},
    )
    prompt = json_task_prompt(task)  # the task and its contract, also enforced by response_format
    # Two fresh computations (own cache salts), compared as parsed values below.
    first = qualify_ask(prompt, salt_suffix="-first", **request)
    second = qualify_ask(prompt, salt_suffix="-second", **request)
    try:
        qualify_record.props(json_fenced=parse_json_answer(first.content).fenced)
    except JsonAnswerError:
        pass  # the grader below says why
    require(check_json_answer(first.content, task["schema"], task["expected"], unordered=task.get("unordered", ()),
                              accepted=task.get("accepted", {})), where)
    require(check_same_value(first.content, second.content), where)
