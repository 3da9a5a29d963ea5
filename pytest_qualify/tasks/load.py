"""The load module's requests: the protocol's own items (short answers, tool calls, recall, JSON),
each built exactly as its own module asks it, the decode probe, and the sender of one concurrency
level (its outcome per request: an answer, or why there was none). Data in, requests out; the
grading of each item is ``graders/load.py``, which calls that module's own grader.

The mix interleaves the modules (one item of each in turn), so every level sends the same requests
in the same order and each item's answer under load has its answer at concurrency 1 to be held to.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from itertools import zip_longest
from typing import Any

from pytest_qualify.client.errors import EndpointError, RequestTimeout, ServerGone, error_message
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
    schemas: Mapping[str, Any] = field(default_factory=dict)  # a tool turn's tool schemas, for its grader

    @property
    def key(self) -> str:
        return f"{self.module}/{self.id}"


def _smoke() -> list[LoadItem]:
    return [LoadItem("smoke", q.id, ({"role": "user", "content": q.prompt},), case=q) for q in smoke_questions()]


def _tools() -> list[LoadItem]:
    fx = tool_fixtures()
    offered = {"tools": list(fx.tools), "tool_choice": "auto"}

    def messages(case: Any) -> tuple[Mapping[str, Any], ...]:
        return ({"role": "system", "content": fx.system}, {"role": "user", "content": case.prompt})

    plain = [LoadItem("tools", c.id, messages(c), offered, True, c, fx.schemas) for c in fx.cases + fx.parallel]
    # The cases the tools module also streams, streamed here too: the streamed path under load.
    streamed = [LoadItem("tools", f"{case.id}@stream", messages(case), {**offered, "stream": True}, True, case,
                         fx.schemas)
                for case in map(fx.tool_case, fx.streaming)]
    # Each streamed case right after the plain ones it follows in the module, so a short level has both.
    return [plain[0], *streamed, *plain[1:]]


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
    """The decode probe: exactly ``tokens`` output tokens, streamed with usage on every chunk
    (vLLM's ``continuous_usage_stats``: each chunk's tokens, so an inter-token latency is the gap
    over the tokens it brought, on an engine that packs several tokens into one chunk too)."""

    tokens: int

    @property
    def messages(self) -> tuple[Mapping[str, Any], ...]:
        return ({"role": "user", "content": str(read_toml("load.toml")["probe"]["prompt"])},)

    @property
    def params(self) -> dict[str, Any]:
        # vLLM's extra sampling parameters: no end of sequence before N tokens, and none at all.
        return {"max_tokens": self.tokens, "min_tokens": self.tokens, "ignore_eos": True, "stream": True,
                "stream_options": {"include_usage": True, "continuous_usage_stats": True}}


# -- sending a level ------------------------------------------------------------------------------


@dataclass
class Sent:
    """One request of a level: the job, and what came back (an answer, or why there was none)."""

    index: int
    job: LoadItem | Probe
    answer: Any = None
    error: str = ""


def _why(exc: BaseException) -> str:
    if isinstance(exc, EndpointError):
        return f"HTTP {exc.status}: {error_message(exc.body)}"
    if isinstance(exc, RequestTimeout):
        return f"timed out: {exc}"
    if isinstance(exc, ServerGone):
        return f"dropped (no answer): {exc}"
    return f"{type(exc).__name__}: {exc}"


def spread_probes(plan: list[LoadItem], probe: Probe, probes: int) -> list[LoadItem | Probe]:
    """The mix with the probes spread evenly through it, so the probes see the level's load."""
    jobs: list[LoadItem | Probe] = list(plan)
    step = max(1, (len(plan) + probes) // probes)
    for n in range(probes):
        jobs.insert(min(len(jobs), n * step + step // 2), probe)
    return jobs


def send_level(new_client: Callable[[], Any], level: int, jobs: list[LoadItem | Probe], budget: int,
               salt: str) -> tuple[list[Sent], float, int]:
    """Send the level's jobs from ``level`` clients (``new_client()`` each: one connection per client)
    released together; each takes the next job when its last one is answered. Returns what came
    back (every job, with its answer or why there was none), the level's wall time and the most
    requests that were in flight at once."""
    sent = [Sent(i, job) for i, job in enumerate(jobs)]
    lock = threading.Lock()
    state = {"next": 0, "in_flight": 0, "max": 0}
    start = threading.Barrier(level + 1)

    def worker() -> None:
        client = new_client()
        try:
            start.wait()
            while True:
                with lock:
                    if state["next"] >= len(sent):
                        return
                    one = sent[state["next"]]
                    state["next"] += 1
                    state["in_flight"] += 1
                    state["max"] = max(state["max"], state["in_flight"])
                request = {"max_tokens": budget, "temperature": 0, "seed": 1,
                           "cache_salt": f"{salt}-c{level}-{one.index}", **one.job.params}
                stream = bool(request.pop("stream", False))
                try:
                    one.answer = client.chat(list(one.job.messages), stream=stream, **request)
                except Exception as exc:  # every request's fate is judged below, none is lost
                    one.error = _why(exc)
                finally:
                    with lock:
                        state["in_flight"] -= 1
        finally:
            client.close()

    threads = [threading.Thread(target=worker, name=f"load-c{level}-{n}", daemon=True) for n in range(level)]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    return sent, time.perf_counter() - t0, state["max"]
