"""The load module's requests: the protocol's own items (short answers, tool calls, recall, JSON),
each built exactly as its own module asks it, and the decode probe. Data in, requests out; the
grading of each item is ``graders/load.py``, which calls that module's own grader.

The mix interleaves the modules (one item of each in turn), so every level sends the same requests
in the same order and each item's answer under load has its answer at concurrency 1 to be held to.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from itertools import zip_longest
from typing import Any

from pytest_qualify.tasks.fixture_data import (
    json_task_prompt, json_tasks, read_toml, recall_fixtures, smoke_questions, tool_fixtures,
)


@dataclass(frozen=True)
class LoadItem:
    """One item of the mix: its module, its id there, the request as that module sends it (messages
    and the request fields beyond the protocol's budget, temperature, seed and salt) and the case
    its grader takes."""

    module: str
    id: str
    messages: tuple[Mapping[str, Any], ...]
    params: Mapping[str, Any] = field(default_factory=dict)
    tool_turn: bool = False
    case: Any = None

    @property
    def key(self) -> str:
        return f"{self.module}/{self.id}"


def _smoke() -> list[LoadItem]:
    return [LoadItem("smoke", q.id, ({"role": "user", "content": q.prompt},), case=q) for q in smoke_questions()]


def _tools() -> list[LoadItem]:
    fx = tool_fixtures()
    offered = {"tools": list(fx.tools), "tool_choice": "auto"}
    return [LoadItem("tools", c.id, ({"role": "system", "content": fx.system}, {"role": "user", "content": c.prompt}),
                     offered, True, c) for c in fx.cases + fx.parallel]


def _recall() -> list[LoadItem]:
    fx = recall_fixtures()
    return [LoadItem("recall", c.id, tuple(c.messages(fx.system)), case=c) for c in fx.conversations]


def _json() -> list[LoadItem]:
    out = []
    for task in json_tasks():
        fmt = {"type": "json_schema", "json_schema": {"name": task["id"], "schema": task["schema"], "strict": True}}
        out.append(LoadItem("json", task["id"], ({"role": "user", "content": json_task_prompt(task)},),
                            {"seed": task["seed"], "response_format": fmt}, case=task))
    return out


BUILDERS = {"smoke": _smoke, "tools": _tools, "recall": _recall, "json": _json}


@cache
def load_items(mix: tuple[str, ...]) -> tuple[LoadItem, ...]:
    """The mix's items, one module after another in turn (``mix`` order), every item once."""
    groups = [BUILDERS[module]() for module in mix]
    return tuple(item for row in zip_longest(*groups) for item in row if item is not None)


def level_plan(items: Sequence[LoadItem], requests: int) -> list[LoadItem]:
    """The mix requests of one level: the items in turn, ``requests`` of them (the same at every level)."""
    return [items[i % len(items)] for i in range(requests)] if items else []


@dataclass(frozen=True)
class Probe:
    """The decode probe: exactly ``tokens`` output tokens, streamed with usage."""

    tokens: int

    @property
    def messages(self) -> tuple[Mapping[str, Any], ...]:
        return ({"role": "user", "content": str(read_toml("load.toml")["probe"]["prompt"])},)

    @property
    def params(self) -> dict[str, Any]:
        # vLLM's extra sampling parameters: no end of sequence before N tokens, and none at all.
        return {"max_tokens": self.tokens, "min_tokens": self.tokens, "ignore_eos": True, "stream": True,
                "stream_options": {"include_usage": True}}
