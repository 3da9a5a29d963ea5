"""The answer-style corpus: for every protocol module, correct answers written the way capable
production models write them (markdown, fences, prose around the value, synonyms, units, casing,
unicode minus, qualifiers) that must pass, and near misses (a distractor, a hedge, an off-by-one, a
substring trap) that must fail for the stated reason. The gate is a hard 100%: one grader that
rejects a correct answer blocks a good deployment, one that accepts a near miss lets a broken one
through. Each answer is graded by the same call its suite makes, on the suite's own fixture data.
"""

from __future__ import annotations

import difflib
import json
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from pytest_qualify import fixture_data
from pytest_qualify.client import Answer
from pytest_qualify.corpus import load_manifest
from pytest_qualify.graders import Verdict
from pytest_qualify.graders.diff import grade_diff_answer
from pytest_qualify.graders.finish import check_finish
from pytest_qualify.graders.json_output import check_json_answer
from pytest_qualify.graders.media import grade_item, grade_limit_refusal, grade_refusal
from pytest_qualify.graders.needle import grade_needle
from pytest_qualify.graders.reasoning import check_no_reasoning
from pytest_qualify.graders.recall import grade_recall
from pytest_qualify.graders.text import ShortQuestion, grade_short_answer, states
from pytest_qualify.graders.tools import RawCall, grade_calls
from pytest_qualify.graders.triage import grade_triage
from pytest_qualify.graders.window import check_overwindow_refusal

MIN_CORRECT = 8
MIN_NEAR_MISSES = 5


@dataclass(frozen=True)
class Styles:
    """One module's corpus: ``grade`` is the suite's own grading call over one answer."""

    module: str
    grade: Callable[[Any], Verdict]
    correct: Sequence[Any]
    near_misses: Sequence[tuple[Any, str]]  # (answer, what the reason must say)
    notes: dict[str, str] = field(default_factory=dict)


def _short(question: ShortQuestion) -> Callable[[str], Verdict]:
    return lambda content: grade_short_answer(content, question.accept, question.reject)


# -- smoke: "What is the capital of France? Answer with one word." ----------------------------------

CAPITAL = fixture_data.smoke_questions()[0]
SMOKE = Styles(
    "smoke", _short(CAPITAL),
    correct=[
        "Paris", "Paris.", "**Paris**", "PARIS", "The capital of France is Paris.", "`Paris`",
        "Answer: Paris", "Paris (Île-de-France)", "paris 🇫🇷", "Paris — not Lyon.",
    ],
    near_misses=[
        ("Lyon", "states none of ['paris']"),
        ("Paris or Lyon", "names 'lyon' as well as 'paris'"),
        ("Parisian", "states none of"),  # substring trap: "paris" inside a longer word
        ("Not Paris.", "states none of"),
        ("Versailles (Paris is only the second city)", "states none of ['paris'] (it names 'versailles')"),
        ("", "empty answer"),
    ],
)

# -- json: the meeting, review and order tasks ---------------------------------------------------------

TASKS = {t["id"]: t for t in fixture_data.json_tasks()}


def _json(task_id: str) -> Callable[[str], Verdict]:
    task = TASKS[task_id]
    return lambda content: check_json_answer(content, task["schema"], task["expected"],
                                             unordered=task.get("unordered", ()), accepted=task.get("accepted", {}))


def _task(answer: tuple[str, str]) -> Verdict:
    task_id, content = answer
    return _json(task_id)(content)


MEETING = {"day": "Thursday", "time": "14:30", "room": "B12", "attendees": ["Ana", "Joel", "Priya"]}
JSON = Styles(
    "json", _task,
    correct=[
        ("meeting", json.dumps(MEETING)),
        ("meeting", "```json\n" + json.dumps(MEETING, indent=2) + "\n```"),
        ("meeting", json.dumps({**MEETING, "room": "Room B12"})),
        ("meeting", json.dumps({**MEETING, "attendees": ["Priya", "Ana", "Joel"], "room": "room b12"})),
        ("meeting", json.dumps(dict(reversed(list(MEETING.items()))))),
        ("review", json.dumps({"sentiment": "negative", "product": "the kettle"})),
        ("review", json.dumps({"sentiment": "negative", "product": "Kettle"})),
        ("review", '{\n  "sentiment": "negative",\n  "product": "electric kettle"\n}'),
        ("meeting", json.dumps({**MEETING, "room": "B-12"})),
        ("order", json.dumps({"order_id": 88213, "customer": "Dana Whitfield", "item": "KX-220 desk lamp", "quantity": 3,
                              "unit_price": 19.50, "currency": "EUR", "city": "Lisbon, Portugal"})),
        ("order", json.dumps({"order_id": 88213, "customer": "dana whitfield", "item": "desk lamp", "quantity": 3,
                              "unit_price": 19.5, "currency": "EUR", "city": "Lisbon"})),
    ],
    near_misses=[
        (("meeting", json.dumps({**MEETING, "room": "B21"})), "field 'room' is 'B21'"),
        (("meeting", json.dumps({**MEETING, "attendees": ["Ana", "Joel"]})), "field 'attendees'"),
        (("review", json.dumps({"sentiment": "negative", "product": "support line"})), "field 'product' is 'support line'"),
        (("review", json.dumps({"sentiment": "neutral", "product": "kettle"})), "field 'sentiment'"),
        (("order", json.dumps({"order_id": 88213, "customer": "Dana Whitfield", "item": "lamp", "quantity": 3,
                               "unit_price": 195, "currency": "EUR", "city": "Lisbon"})), "field 'unit_price' is 195"),
        (("meeting", "Here is the JSON:\n" + json.dumps(MEETING)), "not valid JSON"),
        (("meeting", json.dumps({**MEETING, "room": "B12 or B21"})), "field 'room'"),
        (("review", json.dumps({"sentiment": "negative", "product": "kettles and support"})), "field 'product'"),
    ],
)

# -- context: the needle ------------------------------------------------------------------------------

NEEDLE, DISTRACTORS = "1234567", {"crimson": "1234576", "jade": "7654321"}
CONTEXT = Styles(
    "context", lambda content: grade_needle(content, NEEDLE, DISTRACTORS, key="amber"),
    correct=[
        "1234567", "**1234567**", "The access code for the amber vault is 1234567.", "1,234,567", "`1234567`",
        "Code: 1 234 567", "```\n1234567\n```", "The amber vault's access code is **1234567** (from the document).",
        "1234567.00",
    ],
    near_misses=[
        ("1234567 or maybe 1234568", "names '1234568' as well"),
        ("0001234567", "lacks needle value"),
        ("1234567-8", "lacks needle value"),
        ("1234576", "gives distractor value '1234576' (key 'crimson')"),
        ("12345678", "lacks needle value"),
        ("1234568", "'1234568' is one character off"),
        ("The amber code is 1234567; the crimson one is 1234576.", "gives distractor value '1234576'"),
    ],
)

# -- window: the over-window refusal and the short question after it ------------------------------------

WINDOW_TOKENS, OVER = 262144, 262200
FOLLOW_UP = fixture_data.window_follow_up()


def _window(answer: tuple[Any, str]) -> Verdict:
    status, message = answer
    if status == "follow-up":
        return grade_short_answer(message, FOLLOW_UP.accept, FOLLOW_UP.reject)
    return check_overwindow_refusal(status, message, WINDOW_TOKENS, OVER)


WINDOW = Styles(
    "window", _window,
    correct=[
        (400, f"This model's maximum context length is {WINDOW_TOKENS} tokens. However, your prompt contains at least {OVER} input tokens."),
        (400, f"This model's maximum context length is {WINDOW_TOKENS:,} tokens. However, your request has {OVER:,} input tokens."),
        (400, f"The decoder prompt (length {OVER}) is longer than the maximum model length of {WINDOW_TOKENS}."),
        (400, f"Input too long: max_model_len={WINDOW_TOKENS}, got {OVER}"),
        ("follow-up", "Rome"), ("follow-up", "**Rome**"), ("follow-up", "The capital of Italy is Rome."),
        ("follow-up", "Rome (Roma)."),
    ],
    near_misses=[
        ((None, ""), "was answered (HTTP 200)"),
        ((500, "Internal Server Error"), "got HTTP 500, expected 400"),
        ((400, "Bad request"), "does not name the window"),
        ((400, f"Bad request: {WINDOW_TOKENS}"), "does not say it is about the length limit"),
        ((400, f"maximum context length is {WINDOW_TOKENS - 1} tokens"), "does not name the window"),
        (("follow-up", "Romania"), "states none of ['rome']"),
        (("follow-up", "Milan"), "states none of"),
    ],
)

# -- tools ------------------------------------------------------------------------------------------

TOOLS = fixture_data.tool_fixtures()


def _calls(answer: tuple[str, Sequence[tuple[str, dict[str, Any]]]]) -> Verdict:
    case_id, calls = answer
    raw = [RawCall(name, json.dumps(args)) for name, args in calls]
    return grade_calls(raw, TOOLS.tool_case(case_id).calls, TOOLS.schemas)


EVENT = {"title": "Design review", "date": "2026-04-09", "start_time": "15:30", "duration_minutes": 45}
OSTERIA = {"restaurant": "Osteria Nonna", "date": "2026-02-14", "time": "20:00", "party_size": 2}
BACKUP = {"title": "Nightly backup job exceeds 4 hours", "priority": "high", "component": "database"}
LOGIN = {"title": "Login fails with 502 after deploy", "priority": "urgent", "component": "backend",
         "labels": ["regression", "auth"]}
TOOL_STYLES = Styles(
    "tools", _calls,
    correct=[
        ("calendar_design_review", [("create_calendar_event", {**EVENT, "attendees": []})]),
        ("restaurant_osteria_two", [("book_restaurant", {**OSTERIA, "seating": "indoor"})]),
        ("ticket_backup_database", [("create_ticket", {**BACKUP, "labels": ["backup"]})]),
        ("ticket_backup_database", [("create_ticket", {**BACKUP, "assignee": None, "labels": None})]),
        ("weather_lisbon_now", [("get_weather", {"city": "Lisbon, Portugal", "unit": "celsius"})]),
        ("weather_lisbon_now", [("get_weather", {"city": "Lisbon", "unit": "celsius", "days": None})]),
        ("weather_denver_forecast", [("get_weather", {"city": "Denver, CO", "unit": "fahrenheit", "days": 5})]),
        ("weather_denver_forecast", [("get_weather", {"city": "Denver, Colorado, USA", "unit": "fahrenheit", "days": 5})]),
        ("weather_tokyo_rain", [("get_weather", {"city": "Tokyo, JP", "days": 3})]),
        ("thermostat_bedroom_cool", [("set_thermostat", {"room": "bedroom", "temperature": 68, "unit": "fahrenheit"})]),
        ("thermostat_bedroom_cool", [("set_thermostat", {"room": "Bedroom", "temperature": 68.0, "unit": "fahrenheit", "mode": "cool"})]),
        ("ticket_login_regression", [("create_ticket", {**LOGIN, "labels": ["auth", "regression"], "title": "Login fails with 502 after deploy."})]),
        ("ticket_typo_assignee", [("create_ticket", {"title": "Typo on pricing page", "priority": "low", "component": "frontend",
                                                     "assignee": {"name": "Mei Lin", "team": "Web team"}, "labels": []})]),
        ("thermostat_living_room_heat", [("set_thermostat", {"room": "Living Room", "temperature": 21.5, "unit": "celsius",
                                                             "mode": "heat"})]),
        ("flights_bos_sea", [("search_flights", {"origin": "BOS", "destination": "SEA", "departure_date": "2026-05-14",
                                                 "passengers": {"adults": 1, "children": 0}, "cabin": "economy"})]),
        ("parallel_weather_paris_nairobi", [("get_weather", {"city": "Nairobi, Kenya", "unit": "celsius"}),
                                            ("get_weather", {"city": "Paris, France", "unit": "celsius", "days": 1})]),
    ],
    near_misses=[
        (("ticket_login_regression", [("create_ticket", {**LOGIN, "title": "Login fails with 50.2 after deploy"})]),
         "wrong_value: argument title"),
        (("restaurant_osteria_two", [("book_restaurant", {**OSTERIA, "seating": "bar"})]), "unexpected_param: argument seating='bar'"),
        (("weather_lisbon_now", [("get_weather", {"city": "Lisbon, Ohio", "unit": "celsius"})]), "wrong_value: argument city"),
        (("weather_denver_forecast", [("get_weather", {"city": "Denver or Boulder", "unit": "fahrenheit", "days": 5})]),
         "wrong_value: argument city"),
        (("weather_denver_forecast", [("get_weather", {"city": "Denver", "unit": "fahrenheit", "days": 4})]), "wrong_value: argument days"),
        (("thermostat_bedroom_cool", [("set_thermostat", {"room": "bedroom", "temperature": 68, "unit": "fahrenheit", "mode": "heat"})]),
         "wrong_value: argument mode"),
        (("weather_lisbon_now", [("get_weather", {"city": "Lisbon", "unit": "celsius"}), ("get_weather", {"city": "Lisbon"})]),
         "wrong_count"),
        (("ticket_backup_database", [("create_ticket", {**BACKUP, "labels": ["frontend"]})]), "wrong_value: argument labels"),
        (("calendar_design_review", [("create_calendar_event", {**EVENT, "reminder": "1h"})]), "unexpected_param: argument reminder"),
    ],
)

# -- recall: the lab-samples conversation --------------------------------------------------------------

LAB = next(c for c in fixture_data.recall_fixtures().conversations if c.id == "lab_samples")
RECALL = Styles(
    "recall", lambda content: grade_recall(content, LAB.facts, LAB.near_misses),
    correct=[
        "Batch B-1907, freezer 12, –80 °C, study lead Dr. Okafor.",
        "Batch B-1907 went into freezer 12 at −80 °C; the study lead is Dr. Okafor.",
        "- **Batch:** B-1907\n- **Freezer:** 12\n- **Temperature:** -80°C\n- **Study lead:** Dr. Okafor",
        "You stored batch B1907 first, in freezer #12 at minus 80 degrees Celsius. Study lead: Dr Okafor.",
        "B-1907 | freezer 12 | -80 °C | Okafor",
        "The first batch was **B-1907** (not B-1970), kept in freezer 12 at -80 °C under Dr. Okafor.",
        "Batch b-1907, Freezer 12, 80 below zero, lead: DR. OKAFOR.",
        "```\nbatch: B-1907\nfreezer: 12\ntemperature: -80 C\nlead: Dr. Okafor\n```",
    ],
    near_misses=[
        ("Batch B-1970, freezer 21, -20 °C, Dr. Okoro.", "lacks batch 'B-1907'"),
        ("Batch B-1907, freezer 12, 80 °C, Dr. Okafor.", "lacks temperature '-80'"),
        ("Batch B-1907, freezer 12 or 21, -80 °C, Dr. Okafor.", "states the near-miss freezer '21'"),
        ("Batch B-19070, freezer 12, -80 °C, Dr. Okafor.", "lacks batch 'B-1907'"),
        ("Batch B-1907, freezer 12, -80 °C, Dr. Okafor (or maybe Dr. Okoro).", "states the near-miss lead 'Okoro'"),
        ("Batch B-1907, freezer 13, -80 °C, Dr. Okafor.", "lacks freezer '12'"),
    ],
)

# -- diff: the python_function case ---------------------------------------------------------------------

DIFF_CASE = next(c for c in fixture_data.diff_cases() if c.id == "python_function")


def _unified(target: str, *, prefixes: bool = True, path: str = DIFF_CASE.path) -> str:
    old, new = (f"a/{path}", f"b/{path}") if prefixes else (path, path)
    return "".join(difflib.unified_diff(DIFF_CASE.source.splitlines(True), target.splitlines(True), old, new))


GOOD_DIFF = _unified(DIFF_CASE.expected)
DIFF = Styles(
    "diff", lambda content: grade_diff_answer(content, DIFF_CASE.source, DIFF_CASE.path, DIFF_CASE.expected),
    correct=[
        GOOD_DIFF,
        f"```diff\n{GOOD_DIFF}```",
        f"```\n{GOOD_DIFF}```",
        _unified(DIFF_CASE.expected, prefixes=False),
        f"Here is the diff:\n\n```diff\n{GOOD_DIFF}```\n\nIt validates the percent and rounds the result.",
        f"diff --git a/{DIFF_CASE.path} b/{DIFF_CASE.path}\n{GOOD_DIFF}",
        GOOD_DIFF.rstrip("\n"),
        f"```patch\n{GOOD_DIFF}```",
    ],
    near_misses=[
        (_unified(DIFF_CASE.expected.replace("<= 100", "< 100")), "differs from the expected file"),
        (_unified(DIFF_CASE.expected.replace("), 2)", "), 3)")), "differs from the expected file"),
        (_unified(DIFF_CASE.expected.replace("        raise ValueError", "    raise ValueError")), "differs from the expected file"),
        ("I added the range check and the rounding as requested.", "no unified diff"),
        ("".join(difflib.unified_diff(DIFF_CASE.expected.splitlines(True), DIFF_CASE.source.splitlines(True),
                                      f"a/{DIFF_CASE.path}", f"b/{DIFF_CASE.path}")), "rejects the diff"),
        # Context the model misremembered: git finds no place the hunk fits.
        (GOOD_DIFF.replace(' """Price after a percentage discount."""', ' """Price after discount."""'), "rejects the diff"),
    ],
)

# -- triage -------------------------------------------------------------------------------------------

INCIDENTS = {i.id: i for i in fixture_data.triage_incidents()}
POOL, GC, LOCK = INCIDENTS["checkout_pool"], INCIDENTS["inventory_gc"], INCIDENTS["billing_lock"]


def _triage(answer: tuple[str, Any]) -> Verdict:
    incident_id, content = answer
    return grade_triage(content if isinstance(content, str) else json.dumps(content), INCIDENTS[incident_id])


def _pool(**changes: str) -> dict[str, str]:
    return {"component": "checkout-service", "category": "connection-pool exhaustion",
            "cause": "The orders-pool DB connection pool is at capacity (active=20, idle=0) because connections are not returned.",
            "evidence_line": POOL.evidence[0], **changes}


def _gc(**changes: str) -> dict[str, str]:
    return {"component": "inventory-service", "category": "garbage-collection pauses",
            "cause": "The JVM's old generation is nearly full, causing repeated 8-10 s full collections.",
            "evidence_line": GC.evidence[0], **changes}


def _lock(**changes: str) -> dict[str, str]:
    return {"component": "billing-db", "category": "lock contention",
            "cause": "The ALTER TABLE on invoices holds an exclusive lock, so invoice inserts wait until they time out.",
            "evidence_line": "22:30:14.690", **changes}


TRIAGE = Styles(
    "triage", _triage,
    correct=[
        ("checkout_pool", _pool()),
        ("checkout_pool", _pool(cause="checkout-service cannot get a database connection: no free connections remain in orders-pool.")),
        ("checkout_pool", _pool(component="checkout-service (orders-pool)")),
        ("checkout_pool", _pool(evidence_line="... POST /checkout failed: could not acquire database connection")),
        ("inventory_gc", _gc()),
        ("inventory_gc", _gc(evidence_line="... heap used 7.8G of 8.0G ...")),
        ("inventory_gc", "The cart timeouts come from inventory-service GC.\n\n```json\n" + json.dumps(_gc(), indent=2) + "\n```"),
        ("billing_lock", _lock()),
        ("billing_lock", _lock(component="billing-db (PostgreSQL)", category="Lock Contention",
                               evidence_line="statement from deploy-bot: ALTER TABLE invoices ADD COLUMN tax_region ...")),
        ("checkout_pool", _pool(cause="orders-pool is exhausted; orders-db itself is healthy with no slow queries.")),
        ("checkout_pool", _pool(category="connection-pool exhaustion (connection leak)",
                                evidence_line="leak detection: connection held 41000ms without release")),
        ("inventory_gc", _gc(component="inventory-service (JVM)", evidence_line=GC.evidence[1].replace("  ", " "))),
    ],
    near_misses=[
        (("checkout_pool", _pool(component="payments-service")), "'payments-service' is a red herring"),
        (("inventory_gc", _gc(category="slow downstream dependency")), "category 'slow downstream dependency' is wrong"),
        (("checkout_pool", _pool(evidence_line=next(line for line in POOL.log_lines if "[api-gateway] upstream" in line))),
         "does not show the cause"),
        (("checkout_pool", _pool(component="checkout-service or orders-db")), "'orders-db' is a red herring"),
        (("billing_lock", _lock(cause="An ALTER TABLE holds the lock; alternatively the disk is slow.")), "states 'disk is slow'"),
        # The keyword grader's false passes: the category, not a substring of the cause, decides now.
        (("billing_lock", {"component": "billing-db", "cause": "Inserts in the middle of the run are blocked",
                           "evidence_line": LOCK.evidence[0]}), "lacks category"),
        (("checkout_pool", {"component": "checkout-service", "cause": "Requests cannot complete successfully",
                            "evidence_line": POOL.evidence[0]}), "lacks category"),
        (("checkout_pool", _pool(component="checkout-db")), "is not 'checkout-service'"),
    ],
)

# -- multimodal -----------------------------------------------------------------------------------------

ITEMS = {item.id: item for item in load_manifest().items}


def _item(answer: tuple[str, str]) -> Verdict:
    item_id, content = answer
    item = ITEMS[item_id]
    return grade_item(item.id, content, required=item.required, forbidden=item.forbidden,
                      interval_s=item.interval_s, tolerance_s=item.tolerance_s)


MULTIMODAL = Styles(
    "multimodal", _item,
    correct=[
        ("image-12", "bottom half (not the top half)"),
        ("image-12", "**Bottom.**"),
        ("image-12", "The red circle is in the bottom half of the image."),
        ("image-11", "4"), ("image-11", "Four."), ("image-11", "There are **4** green squares."),
        ("video-13", "The banner shows ALERT between the 2-second and 3-second marks."),
        ("video-13", "It reads \"Alert\", visible from second 2 to second 3."),
        ("video-13", "The word is alert, shown from 0:02 to 0:03."),
        ("video-13", "**ALERT** — visible 2–3 s."),
    ],
    near_misses=[
        (("image-12", "Top."), "forbidden word 'top' present"),
        (("image-12", "Top half, or maybe the bottom half."), "forbidden word 'top' present"),
        (("image-12", "Bottom.\n\nTop."), "forbidden word 'top' present"),
        (("image-11", "6"), "forbidden word '6' present"),
        (("image-11", "5 green squares"), "missing required word '4'"),
        (("video-13", "The banner shows ALERT from 2 to 4 seconds."), "is not 2–3 s"),
        (("video-13", "ALERT, visible 2–3 s or 4–5 s."), "an answer must name one interval"),
        (("video-13", "The banner reads NONALERT from 2 to 3 s."), "missing required word 'alert'"),
    ],
)

# -- media admission: refusals and the question after them ------------------------------------------------


def _admission(answer: tuple[Any, str]) -> Verdict:
    status, message = answer
    if status == "follow-up":
        return grade_short_answer(message, CAPITAL.accept, CAPITAL.reject)
    if status == "limit":
        return grade_limit_refusal(400, message, kind="image", limit=4, sent=5)
    return grade_refusal(status, message, case="malformed image", must_name=("image",))


MEDIA_ADMISSION = Styles(
    "media_admission", _admission,
    correct=[
        ("limit", "At most 4 image(s) may be provided in one prompt."),
        ("limit", "At most 4 images may be provided in one request."),
        ("limit", "You may provide at most four images per request."),
        (400, "Failed to load image: cannot identify image file"),
        (400, "Invalid image: the data is not a supported image format"),
        ("follow-up", "Paris"), ("follow-up", "**Paris**."), ("follow-up", "The capital of France is Paris."),
    ],
    near_misses=[
        ((200, ""), "accepted with HTTP 200"),
        ((500, "Internal Server Error"), "HTTP 500 (server error)"),
        (("limit", "At most 5 image(s) may be provided in one prompt."), "does not name '4'"),
        ((400, "Bad request"), "does not name 'image'"),
        ((413, "Payload too large: image"), "expected HTTP 400, got HTTP 413"),
        (("follow-up", "Lyon"), "states none of ['paris']"),
    ],
)

# -- reasoning: thinking disabled -------------------------------------------------------------------


def _reasoning(answer: tuple[str, str | None, int | None]) -> Verdict:
    return check_no_reasoning(*answer)


REASONING = Styles(
    "reasoning", _reasoning,
    correct=[
        ("**Reasoning:** it leaves at 3 pm and the trip takes 2 hours.\n\n**Answer:** 5 pm", None, None),
        ("Thoughts: 3 pm + 2 h = 5 pm. It arrives at 5 pm.", None, None),
        ("Let me think it through: 3 pm plus two hours is 5 pm. **It arrives at 5 pm.**", None, 0),
        ("Thinking Process:\n1. Departure 3 pm.\n2. Two hours later is 5 pm.\n\nIt arrives at 5 pm.", None, None),
        ("Blue", "", None),
        ("## Working\n15:00 + 2:00 = 17:00\n\n## Answer\n5 pm", None, None),
        ("I think it's blue.", None, None),
        ("8", None, 0),
        ("A spider has **8** legs. (Reasoning: arachnids have four pairs.)", None, None),
    ],
    near_misses=[
        (("<think>\nThe sky is blue.\n</think>\n\nBlue", None, None), "reasoning markers in the visible content"),
        (("Blue", "The user asks about the sky.", None), "reasoning field populated"),
        (("Blue", None, 12), "usage reports 12 reasoning tokens"),
        (("[THINK]sky[/THINK]Blue", None, None), "reasoning markers"),
        (("<|channel|>analysis<|message|>sky<|end|>Blue", None, None), "reasoning markers"),
        (("Blue</think>", None, None), "reasoning markers"),
    ],
)

# -- finish: the planet, sum and opposite prompts ------------------------------------------------------

FINISH_PROMPTS = {p.id: p for p in fixture_data.finish_prompts()}


def _finished(content: str | None, finish_reason: str | None) -> Verdict:
    """The shared finish-state check on a plain (non-tool) answer."""
    return check_finish(Answer(content=content, reasoning=None, tool_calls=(), finish_reason=finish_reason,
                               usage={}, streamed=False))


def _finish(answer: tuple[str, str, str]) -> Verdict:
    prompt_id, content, finish_reason = answer
    finished = _finished(content, finish_reason)
    if not finished:
        return finished
    prompt = FINISH_PROMPTS[prompt_id]
    return grade_short_answer(content, prompt.accept, prompt.reject)


FINISH = Styles(
    "finish", _finish,
    correct=[
        ("planet", "Jupiter", "stop"), ("planet", "**Jupiter**", "stop"), ("planet", "Jupiter.", "stop"),
        ("planet", "The largest planet in the solar system is Jupiter.", "stop"),
        ("planet", "Jupiter (Saturn is only the second largest)", "stop"), ("planet", "Jupiter, not Saturn.", "stop"),
        ("sum", "42", "stop"), ("sum", "Forty-two.", "stop"), ("sum", "12 + 30 = **42**", "stop"),
        ("sum", "The sum of 12 and 30 is 42.", "stop"),
        ("opposite", "Cold.", "stop"), ("opposite", "cold (not hot)", "stop"),
    ],
    near_misses=[
        (("planet", "Saturn (Jupiter is only the second largest)", "stop"), "states none of ['jupiter'] (it names 'saturn')"),
        (("planet", "Jupiter or Saturn", "stop"), "names 'saturn' as well as 'jupiter'"),
        (("sum", "43", "stop"), "states none of"),
        (("sum", "42 or 43", "stop"), "offers 42 or 43"),
        (("sum", "420", "stop"), "states none of"),
        (("planet", "Jupiter", "length"), "answer budget exhausted"),
        (("opposite", "Warm", "stop"), "states none of"),
    ],
)

# -- robustness: the short request after hostile requests ------------------------------------------
# Liveness, not correctness (PROTOCOL: "healthy after a refusal" is a short request answered
# within budget with an allowed finish state): any visible answer that ends "stop" passes.


ROBUSTNESS = Styles(
    "robustness", lambda answer: _finished(*answer),
    correct=[("Paris", "stop"), ("Paris!", "stop"), ("It's Paris.", "stop"), ("**PARIS**", "stop"), ("> Paris", "stop"),
             ("Paris, of course.", "stop"), ("Lyon", "stop"), ("The capital of France is Paris.\n\nAnything else?", "stop")],
    near_misses=[
        (("", "stop"), "empty answer"), (("   \n", "stop"), "empty answer"), (("Par", "length"), "answer budget exhausted"),
        (("Paris", None), "no finish_reason"), (("Paris", "tool_calls"), "not allowed on a non-tool answer"),
    ],
)

# -- integrity: the same request streamed and plain at temperature 0 ------------------------------
# Whatever style the model answers in, the stream must carry exactly the plain answer: equality is
# byte for byte (whitespace and markdown included), never "the same after normalising".


def _stream_vs_plain(pair: tuple[str, str]) -> Verdict:
    from pytest_qualify.graders.integrity import compare_stream_plain

    @dataclass(frozen=True)
    class _A:
        content: str
        tool_calls: tuple = ()
        finish_reason: str = "stop"
        usage: Any = None

    streamed, plain = pair
    return compare_stream_plain(_A(streamed, usage={"completion_tokens": 9}), _A(plain, usage={"completion_tokens": 9}))


_STYLED = ["Paris", "**Paris**", "Paris.\n", "The capital of France is Paris.", "> Paris", "Paris 🇫🇷",
           "1. Paris\n2. (that is the answer)", "ANSWER: Paris", "  Paris  ", "Paris\u00a0(France)"]

INTEGRITY = Styles(
    "integrity", _stream_vs_plain,
    correct=[(a, a) for a in _STYLED],
    near_misses=[
        (("Pari", "Paris"), "differs from the non-streamed"),
        (("Paris ", "Paris"), "differs from the non-streamed"),
        (("Paris", "**Paris**"), "differs from the non-streamed"),
        (("The capital of France is", "The capital of France is Paris."), "differs from the non-streamed"),
        (("Paris\n", "Paris"), "differs from the non-streamed"),
        (("paris", "Paris"), "differs from the non-streamed"),
    ],
)

CORPUS = (SMOKE, JSON, CONTEXT, WINDOW, TOOL_STYLES, RECALL, DIFF, TRIAGE, MULTIMODAL, MEDIA_ADMISSION, REASONING,
          FINISH, ROBUSTNESS, INTEGRITY)
CORRECT = [(s, a) for s in CORPUS for a in s.correct]
NEAR_MISSES = [(s, a, why) for s in CORPUS for a, why in s.near_misses]


def _id(styles: Styles, answer: Any) -> str:
    return f"{styles.module}:{json.dumps(answer, ensure_ascii=False)[:60]}"


def test_every_module_has_its_corpus():
    modules = [m["id"] for m in tomllib.loads((Path(__file__).parents[1] / "pytest_qualify" / "modules.toml").read_text())["module"]]
    assert sorted(s.module for s in CORPUS) == sorted(modules)
    for styles in CORPUS:
        assert len(styles.correct) >= MIN_CORRECT, styles.module
        assert len(styles.near_misses) >= MIN_NEAR_MISSES, styles.module


@pytest.mark.parametrize("styles,answer", CORRECT, ids=[_id(s, a) for s, a in CORRECT])
def test_correct_answer_passes(styles, answer):
    verdict = styles.grade(answer)
    assert verdict.ok, verdict.reason


@pytest.mark.parametrize("styles,answer,why", NEAR_MISSES, ids=[_id(s, a) for s, a, _ in NEAR_MISSES])
def test_near_miss_fails_with_its_reason(styles, answer, why):
    verdict = styles.grade(answer)
    assert not verdict.ok, f"accepted: {verdict.reason}"
    assert why in verdict.reason, verdict.reason


# -- the word rules behind the verdicts: substrings are not words ------------------------------------


@pytest.mark.parametrize("text,word", [
    ("Inserts in the middle of the run are blocked", "lock"),
    ("Inserts in the middle of the run are blocked", "ddl"),
    ("alternatively the disk is slow", "alter"),
    ("cannot complete successfully", "full"),
    ("Parisian cafés", "paris"),
    ("Romania", "rome"),
])
def test_a_substring_is_not_a_word(text, word):
    assert not states(text, word)
