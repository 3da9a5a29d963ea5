"""The protocol's fixture data (``fixtures/``, the package ``pytest_qualify.fixtures``), read in one place.

Suites, the reference server's oracles and the tests load cases here; graders never read files.
Each loader builds the records its grader takes (``graders/triage.Incident``, ``graders/tools``'s
``ToolFixtures`` ...) and checks the data's own consistency, so a broken fixture fails at
collection with the file named, not as a model's wrong answer. Every loader is cached: the data is
read once per process and its records are frozen.
"""

from __future__ import annotations

import json
import tomllib
from functools import cache
from types import MappingProxyType
from typing import Any, Mapping

from pytest_qualify.graders.diff import DiffCase
from pytest_qualify.graders.recall import Conversation, RecallFixtures, grade_recall
from pytest_qualify.graders.contract import Contract, Form, Question
from pytest_qualify.graders.tools import ExpectedCall, RoundTripCase, ToolCase, ToolFixtures
from pytest_qualify.graders.triage import Incident, grade_triage

PACKAGE = "pytest_qualify.fixtures"


class FixtureError(ValueError):
    """A fixture file contradicts itself; the message names the file and the entry."""


# -- files -----------------------------------------------------------------------------------------


@cache
def read_text(path: str) -> str:
    """A fixture file's text; ``path`` is relative to ``fixtures/`` (e.g. ``"triage/incidents.toml"``)."""
    from importlib import resources

    return resources.files(PACKAGE).joinpath(path).read_text(encoding="utf-8")


@cache
def read_toml(path: str) -> Mapping[str, Any]:
    """A fixture TOML file, parsed (read-only at the top level: the cached value is shared)."""
    return MappingProxyType(tomllib.loads(read_text(path)))


@cache
def read_json(path: str) -> Any:
    return json.loads(read_text(path))


# -- short questions (smoke, finish, reasoning) -------------------------------------------------------


def _contract(raw: Mapping[str, Any], where: str) -> Contract:
    try:
        return Contract.of(raw)
    except (ValueError, TypeError) as exc:
        raise FixtureError(f"{where}: bad answer contract: {exc}") from None


def _questions(path: str, section: str, text_key: str) -> tuple[Question, ...]:
    out = []
    for n, raw in enumerate(read_toml(path).get(section, ())):
        qid = raw.get("id", f"q{n + 1}")
        where = f"fixtures/{path}: {section} {qid!r}"
        if "contract" not in raw:
            raise FixtureError(f"{where}: no answer contract")
        question = Question(id=qid, text=raw[text_key], contract=_contract(raw["contract"], where),
                            answer=raw.get("answer", ""))
        truth = question.grade(question.answer)
        if question.answer and not truth:
            raise FixtureError(f"{where}: its own ground truth fails its contract: {truth.reason}")
        out.append(question)
    return tuple(out)


@cache
def smoke_questions() -> tuple[Question, ...]:
    return _questions("smoke.toml", "question", "prompt")


@cache
def finish_prompts() -> tuple[Question, ...]:
    return _questions("finish.toml", "prompt", "text")


@cache
def reasoning_prompts() -> tuple[Question, ...]:
    return _questions("reasoning.toml", "prompt", "text")


# -- deterministic JSON ---------------------------------------------------------------------------


@cache
def json_tasks() -> tuple[Mapping[str, Any], ...]:
    """The tasks of ``fixtures/json_tasks.toml``: id, seed, prompt, schema, expected, accepted, free."""
    tasks = tuple(MappingProxyType(t) for t in read_toml("json_tasks.toml")["task"])
    for task in tasks:
        for key in task.get("accepted", {}):
            if key not in task["expected"]:
                raise FixtureError(f"fixtures/json_tasks.toml: task {task['id']!r}: accepted forms for {key!r}, which is not expected")
    return tasks


def json_task_prompt(task: Mapping[str, Any]) -> str:
    """The prompt a JSON task is asked with: the task, then its contract (the schema's fields)."""
    return f"{task['prompt'].strip()}\n\n{Contract(Form.JSON, schema=task['schema']).instruction()}"


# -- triage ---------------------------------------------------------------------------------------


@cache
def triage_incidents() -> tuple[Incident, ...]:
    """The incidents of ``fixtures/triage/incidents.toml``, with their logs read in."""
    path = "triage/incidents.toml"
    data = read_toml(path)
    categories = tuple(data["categories"])
    schema = json.loads(json.dumps(data["schema"]))  # plain JSON types (the TOML table is read-only)
    incidents = []
    for raw in data["incident"]:
        log = read_text(f"triage/{raw['log']}")
        lines = tuple(line for line in log.splitlines() if line.strip())
        missing = [e for e in raw["evidence"] if e not in lines]
        if missing:
            raise FixtureError(f"fixtures/{path}: incident {raw['id']}: evidence not in {raw['log']}: {missing[0]!r}")
        if raw["category"] not in categories:
            raise FixtureError(f"fixtures/{path}: incident {raw['id']}: category {raw['category']!r} is not one of {categories}")
        if raw["component"] in raw["red_herrings"]:
            raise FixtureError(f"fixtures/{path}: incident {raw['id']}: component {raw['component']!r} is also a red herring")
        incident = Incident(
            id=raw["id"], symptom=raw["symptom"], log_lines=lines, component=raw["component"],
            aliases=tuple(raw.get("aliases", ())), category=raw["category"], categories=categories,
            cause=raw["cause"], evidence=tuple(raw["evidence"]), red_herrings=tuple(raw["red_herrings"]),
            prompt=data["prompt"].format(symptom=raw["symptom"], log=log, categories="; ".join(categories),
                                         schema=json.dumps(schema, separators=(",", ":"))),
            schema=schema,
        )
        truth = grade_triage(json.dumps(incident.truth), incident)
        if not truth:
            raise FixtureError(f"fixtures/{path}: incident {raw['id']}: its own truth fails its grader: {truth.reason}")
        incidents.append(incident)
    return tuple(incidents)


# -- tools ----------------------------------------------------------------------------------------


def _calls(raw: list[Mapping[str, Any]]) -> tuple[ExpectedCall, ...]:
    return tuple(ExpectedCall(c["name"], c["arguments"]) for c in raw)


@cache
def tool_fixtures() -> ToolFixtures:
    """The tool set and the tool cases of ``fixtures/tools/``."""
    tools = read_json("tools/tools.json")
    data = read_json("tools/cases.json")
    where = "fixtures/tools/cases.json"
    fixtures = ToolFixtures(
        tools=tuple(tools),
        system=data["system"],
        cases=tuple(ToolCase(c["id"], c["prompt"], _calls(c["calls"])) for c in data["cases"]),
        irrelevance=tuple(
            Question(c["id"], c["prompt"], _contract(c["contract"], f"{where}: irrelevance case {c['id']!r}"), c["answer"])
            for c in data["irrelevance"]
        ),
        parallel=tuple(ToolCase(c["id"], c["prompt"], _calls(c["calls"])) for c in data["parallel"]),
        round_trip=tuple(
            RoundTripCase(c["id"], c["prompt"], _calls(c["calls"]), c["result"], c["result_field"],
                          (float(c["result_range"][0]), float(c["result_range"][1])),
                          _contract(c["contract"], f"{where}: round trip {c['id']!r}"), dict(c["amount"]))
            for c in data["round_trip"]
        ),
        streaming=tuple(data["streaming"]),
    )
    ids = [c.id for c in fixtures.cases + fixtures.parallel] + [c.id for c in fixtures.irrelevance + fixtures.round_trip]
    if len(ids) != len(set(ids)):
        raise FixtureError("fixtures/tools/cases.json: case ids are not unique")
    for case_id in fixtures.streaming:
        fixtures.tool_case(case_id)  # a streaming entry names an existing case
    for question in fixtures.irrelevance:
        truth = question.grade(question.answer)
        if not truth:
            raise FixtureError(f"{where}: irrelevance case {question.id!r}: its own ground truth fails its contract: {truth.reason}")
    for rt in fixtures.round_trip:
        value = rt.result_range[0]
        truth = rt.final_contract(value).grade(json.dumps({"amount": value, "currency": rt.result.get("to_currency")}))
        if not truth:
            raise FixtureError(f"{where}: round trip {rt.id!r}: a correct final answer fails its contract: {truth.reason}")
    return fixtures


# -- integrity ------------------------------------------------------------------------------------


@cache
def integrity_samples() -> tuple[Any, ...]:
    """The integrity module's sampled requests (``fixtures/integrity.toml``), each built exactly as
    its own module asks it, so its answers can be compared with that module's."""
    from pytest_qualify.graders.integrity import Sample

    out = []
    for raw in read_toml("integrity.toml")["sample"]:
        module, item = raw["module"], raw["item"]
        if module in ("finish", "reasoning"):
            questions = {q.id: q for q in (finish_prompts() if module == "finish" else reasoning_prompts())}
            if item not in questions:
                raise FixtureError(f"fixtures/integrity.toml: {module} has no prompt {item!r}")
            out.append(Sample(module, item, ({"role": "user", "content": questions[item].prompt},), {}, False,
                              contract=questions[item].contract))
        elif module == "tools":
            tools = tool_fixtures()
            try:
                case = tools.tool_case(item)
            except (KeyError, ValueError, StopIteration):
                raise FixtureError(f"fixtures/integrity.toml: tools has no case {item!r}") from None
            messages = ({"role": "system", "content": tools.system}, {"role": "user", "content": case.prompt})
            forced = raw.get("tool_choice", "")
            if forced and forced not in tools.schemas:
                raise FixtureError(f"fixtures/integrity.toml: tool_choice {forced!r} is not a tool of the tool set")
            choice: Any = {"type": "function", "function": {"name": forced}} if forced else "auto"
            out.append(Sample(module, item, messages, {"tools": list(tools.tools), "tool_choice": choice}, True,
                              forced))
        else:
            raise FixtureError(f"fixtures/integrity.toml: sample module {module!r} is not one that streams "
                               "(finish, reasoning, tools)")
    return tuple(out)


# -- recall ---------------------------------------------------------------------------------------


@cache
def recall_fixtures() -> RecallFixtures:
    """The conversations of ``fixtures/recall/conversations.toml``; each one's ground truth must
    pass its own contract, and each near miss must name a graded field."""
    path = "recall/conversations.toml"
    data = read_toml(path)
    conversations = []
    for c in data["conversation"]:
        where = f"fixtures/{path}: conversation {c['id']!r}"
        contract = _contract(c["contract"], where)
        if contract.form is not Form.JSON:
            raise FixtureError(f"{where}: a recall contract is one JSON object (form 'json'), not {contract.form.value!r}")
        conv = Conversation(
            id=c["id"],
            turns=tuple((t["user"], t["assistant"]) for t in c["turn"]),
            question=c["question"],
            contract=contract,
            truth=MappingProxyType(dict(c["truth"])),
            near_misses=MappingProxyType(dict(c.get("near_miss", {}))),
        )
        stray = [name for name in (*conv.truth, *conv.near_misses) if name not in contract.fields]
        if stray:
            raise FixtureError(f"{where}: {stray[0]!r} is not a graded field of the contract")
        truth = grade_recall(json.dumps(dict(conv.truth)), contract)
        if not truth:
            raise FixtureError(f"{where}: its own ground truth fails its contract: {truth.reason}")
        conversations.append(conv)
    return RecallFixtures(data["system"], tuple(conversations))


# -- diff -----------------------------------------------------------------------------------------


@cache
def diff_cases() -> tuple[DiffCase, ...]:
    """The cases of ``fixtures/diff/cases.toml`` with their source and expected files read in."""
    data = read_toml("diff/cases.toml")
    cases = []
    for c in data["case"]:
        source = read_text(f"diff/{c['source']}")
        prompt = data["prompt"].format(path=c["path"], lang=c["lang"], source=source, request=c["request"])
        cases.append(DiffCase(c["id"], c["path"], c["lang"], c["request"], source,
                              read_text(f"diff/{c['expected']}"), prompt))
    return tuple(cases)


# -- robustness, haystack -------------------------------------------------------------------------


def robustness() -> Mapping[str, Any]:
    return read_toml("robustness.toml")


def haystack(name: str) -> Mapping[str, Any]:
    """A file of ``fixtures/haystack/`` (``filler.toml``, ``needles.toml``)."""
    return read_toml(f"haystack/{name}")
