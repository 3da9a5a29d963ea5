"""The answer-style corpus of the contract modules: for each, correct replies written the way
capable production models write them under the item's answer contract (working before the ANSWER
line that mentions distractors, ruled-out values and negations; markdown; tables; fences; extra
JSON whitespace and key order) that must pass, and near misses (a wrong value in the slot, a hedge
in the slot, swapped fields, a missing slot, a second answer line) that must fail for the stated
reason. The gate is a hard 100%: one grader that rejects a correct reply blocks a good deployment,
one that accepts a near miss lets a broken one through. Each reply is graded by the same call its
suite makes, on the suite's own fixture data and contract.

The multimodal, media admission, diff and triage sections below are kept as they were; they move to
tests/graders/test_answer_styles_structured.py, and the corpus check here covers the contract modules.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ..helpers import Styles
from pytest_qualify.tasks import fixture_data
from pytest_qualify.client.answer import Answer
from pytest_qualify.graders import Verdict
from pytest_qualify.graders.finish import check_finish
from pytest_qualify.graders.json_output import check_json_answer
from pytest_qualify.graders.needle import grade_needle
from pytest_qualify.graders.reasoning import check_no_reasoning, check_reasoning_separated
from pytest_qualify.graders.recall import grade_recall
from pytest_qualify.graders.tools import RawCall, grade_calls
from pytest_qualify.graders.window import check_overwindow_refusal
from pytest_qualify.server import liveness
from pytest_qualify.tasks.haystack import needle_spec

MIN_CORRECT = 10
MIN_NEAR_MISSES = 6
FORMAT = "format:"  # a near miss whose reason must say the contract was not followed


# -- smoke: "What is the capital of France?" (whole reply) and "How many days are in a week?" --------

CAPITAL, WEEK = fixture_data.smoke_questions()


def _smoke(answer: tuple[str, str]) -> Verdict:
    which, content = answer
    return (CAPITAL if which == "capital" else WEEK).grade(content)


SMOKE = Styles(
    "smoke", _smoke,
    correct=[
        ("capital", "Paris"), ("capital", "Paris."), ("capital", "**Paris**"), ("capital", "PARIS"),
        ("capital", "`Paris`"), ("capital", "Answer: Paris"), ("capital", "Here is the answer:\nParis"),
        ("capital", '"Paris"'), ("week", "7"), ("week", "**7**"), ("week", "```\n7\n```"), ("week", "7.0"),
        # CRLF line ends and trailing whitespace are not content.
        ("capital", "```text\r\nParis\r\n```"), ("week", "7\r\n"), ("capital", "\u201cParis\u201d\u00a0 \n"),
        # Answer tags round the whole value, on one line or three.
        ("capital", "<answer>Paris</answer>"), ("week", "<answer>\n7\n</answer>"), ("capital", "**<final_answer>Paris</final_answer>**"),
        # "The answer is:" is the label "The final answer is:" is, "final" or not.
        ("capital", "The answer is: Paris"), ("capital", "**The answer is:** Paris"), ("week", "The answer is: **7**"),
    ],
    near_misses=[
        (("capital", "Paris is France's largest city, but its capital is Lyon."), "expected 'Paris'"),
        (("capital", "Lyon"), "answer is 'Lyon', expected 'Paris'"),
        (("capital", "Paris or Lyon"), "answer is 'Paris or Lyon'"),
        (("capital", "Parisian"), "expected 'Paris'"),
        (("capital", "Paris\n\nIt has been the capital since 987."), FORMAT),
        (("capital", ""), FORMAT),
        (("week", "seven"), FORMAT),
        (("week", "7 or 8"), "holds 2 candidates"),
        (("week", "There are 7 days in a week."), "holds more than the number"),
        # A tilde is a hedge or a strikethrough, never formatting noise.
        (("week", "~7"), "answer '~7' holds more than the number"),
        (("capital", "~~Paris~~"), "answer is '~~Paris~~'"),
        # answer tags never hide a second candidate
        (("week", "<answer>7</answer> or <answer>8</answer>"), "holds 2 candidates (7, 8)"),
        (("capital", "<answer>Paris</answer>\n<answer>Lyon</answer>"), FORMAT + " the reply must be the answer alone, got 2 lines"),
        (("capital", "<answer><answer>Lyon</answer> Paris</answer>"), "expected 'Paris'"),
        (("capital", "<answer>Lyon</answer>"), "answer is 'Lyon', expected 'Paris'"),
        # the label holds no second candidate, and without its colon it is no label
        (("capital", "The answer is: Paris or Lyon"), "answer is 'Paris or Lyon', expected 'Paris'"),
        (("capital", "The answer is Paris"), "answer is 'The answer is Paris', expected 'Paris'"),
        (("capital", "The answer is: Lyon"), "answer is 'Lyon', expected 'Paris'"),
    ],
)

# -- json: the meeting, review and order tasks (response_format; the object is the slot) -----------

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
        ("meeting", json.dumps(MEETING, indent=4, separators=(" ,", " : "))),
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
        (("meeting", "Here is the JSON:\n" + json.dumps(MEETING)), FORMAT + " content is not valid JSON"),
        (("meeting", json.dumps({**MEETING, "room": "B12 or B21"})), "field 'room'"),
        (("review", json.dumps({"sentiment": "negative", "product": "kettles and support"})), "field 'product'"),
        (("review", json.dumps({"sentiment": "bad", "product": "kettle"})), FORMAT + " does not validate"),
    ],
)

# -- context: the needle (whole reply: the value alone) ----------------------------------------------

NEEDLE, DISTRACTORS = "1234567", {"crimson": "1234576", "jade": "7654321"}
NEEDLE_CONTRACT = next(t for t in needle_spec().templates if t.id == "vault").contract(NEEDLE)
CONTEXT = Styles(
    "context", lambda content: grade_needle(content, NEEDLE, DISTRACTORS, key="amber", contract=NEEDLE_CONTRACT),
    correct=[
        "1234567", "**1234567**", "1,234,567", "`1234567`", "```\n1234567\n```", "1234567.", "Answer: 1234567",
        "The access code for the amber vault:\n**1234567**", "> 1234567", '"1234567"', "  1234567\n",
        "```\r\n1234567\r\n```",
        # SI and French digit grouping: a thin, a narrow no-break or a no-break space between groups.
        "1\u2009234\u2009567", "1\u202f234\u202f567", "**1\u00a0234\u00a0567**", "Answer: 1\u202f234\u202f567.",
        "<answer>1234567</answer>", "<answer>\n1,234,567\n</answer>",
        # Digits grouped by dots where no dot can be a decimal point: two or more groups.
        "1.234.567", "**1.234.567**", "Answer: 1.234.567.", "The answer is: 1.234.567",
    ],
    near_misses=[
        ("1234567 or maybe 1234568", "lacks needle value"),
        # A space that is no grouping keeps the digits apart: never one number, never the needle.
        ("1 234 567", "lacks needle value"),
        ("1\u202f234\u00a0567", "lacks needle value"),
        ("1234\u202f567", "lacks needle value"),
        ("1\u202f234\u202f56", "lacks needle value"),
        ("1\u202f234\u202f576", "gives distractor value '1234576' (key 'crimson')"),
        ("<answer>1234567</answer><answer>1234576</answer>", "lacks needle value"),
        ("<answer>1234576</answer>", "gives distractor value '1234576' (key 'crimson')"),
        ("~1234567", "answer '~1234567' lacks needle value"),
        ("0001234567", "lacks needle value"),
        ("1234567-8", "lacks needle value"),
        # dots that are no grouping of threes, or a second number beside one that is
        ("1.234567", "lacks needle value"), ("1234.567", "lacks needle value"), ("1.234.56", "lacks needle value"),
        ("1.234.5678", "lacks needle value"), ("1.234.567.8", "lacks needle value"),
        ("1.234.567 or 1.234.568", "lacks needle value"),
        ("1.234.576", "gives distractor value '1234576' (key 'crimson')"),
        ("1234576", "gives distractor value '1234576' (key 'crimson')"),
        ("12345678", "lacks needle value"),
        ("1234568", "'1234568' is one character off"),
        ("The access code for the amber vault is 1234567.", "lacks needle value"),
        ("1234567\n\n(The crimson vault's code, 1234576, is a different one.)", FORMAT),
        ("", FORMAT),
    ],
)

# -- window: the over-window refusal, and the liveness question after it (its answer recorded as
# ``liveness_answer_correct``, graded as server/liveness.py grades it, never deciding) --------------

WINDOW_TOKENS, OVER = 262144, 262200
LIVENESS = liveness.default_question()


def _window(answer: tuple[Any, str]) -> Verdict:
    status, message = answer
    if status == "liveness":
        return LIVENESS.grade(message)
    return check_overwindow_refusal(status, message, WINDOW_TOKENS, OVER)


WINDOW = Styles(
    "window", _window,
    correct=[
        (400, f"This model's maximum context length is {WINDOW_TOKENS} tokens. However, your prompt contains at least {OVER} input tokens."),
        (400, f"This model's maximum context length is {WINDOW_TOKENS:,} tokens. However, your request has {OVER:,} input tokens."),
        (400, f"The decoder prompt (length {OVER}) is longer than the maximum model length of {WINDOW_TOKENS}."),
        (400, f"Input too long: max_model_len={WINDOW_TOKENS}, got {OVER}"),
        ("liveness", "Paris"), ("liveness", "**Paris**"), ("liveness", "Paris."), ("liveness", "PARIS"),
        ("liveness", "Answer: *Paris*"), ("liveness", "```\nParis\n```"),
        ("liveness", "Paris\r\n"), ("liveness", "**ANSWER:** Paris"), ("liveness", "$\\text{Paris}$"),
    ],
    near_misses=[
        ((None, ""), "was answered (HTTP 200)"),
        ((500, "Internal Server Error"), "got HTTP 500, expected 400"),
        ((400, "Bad request"), "does not name the window"),
        ((400, f"Bad request: {WINDOW_TOKENS}"), "does not say it is about the length limit"),
        ((400, f"maximum context length is {WINDOW_TOKENS - 1} tokens"), "does not name the window"),
        (("liveness", "Parisian"), "expected 'Paris'"),
        (("liveness", "Lyon"), "expected 'Paris'"),
        (("liveness", "Paris or Lyon"), "expected 'Paris'"),
        (("liveness", "~Paris"), "answer is '~Paris'"),
        (("liveness", "The capital of France is Paris.\nIt sits on the Seine."), FORMAT),
    ],
)

# -- tools ------------------------------------------------------------------------------------------

TOOLS = fixture_data.tool_fixtures()


IRRELEVANT = {c.id: c for c in TOOLS.irrelevance}
ROUND_TRIP = TOOLS.round_trip[0]
AMOUNT = 176.3  # the tool result the final answer must carry


def _calls(answer: tuple[str, Any]) -> Verdict:
    """A call case ``(case_id, [(name, args)])``; a no-tool-fits answer ``("no-tool:<case>", text)``
    under its contract; the round trip's final answer ``("final", text)`` after the result AMOUNT."""
    case_id, calls = answer
    if case_id.startswith("raw:"):
        # The arguments exactly as a server sent them (the API's JSON string, or what came instead).
        return grade_calls([RawCall(name, raw) for name, raw in calls], TOOLS.tool_case(case_id.removeprefix("raw:")).calls, TOOLS.schemas)
    if case_id.startswith("no-tool:"):
        return IRRELEVANT[case_id.removeprefix("no-tool:")].grade(calls)
    if case_id == "final":
        return ROUND_TRIP.final_contract(AMOUNT).grade(calls)
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
        ("no-tool:irrelevant_arithmetic", "144"), ("no-tool:irrelevant_arithmetic", "**144**"),
        ("no-tool:irrelevant_arithmetic", "144."), ("no-tool:irrelevant_translation", "Gracias"),
        ("no-tool:irrelevant_translation", "*Gracias!*"), ("no-tool:irrelevant_translation", "gracias"),
        ("final", '{"amount": 176.3, "currency": "CAD"}'),
        ("final", '{ "currency" : "CAD" ,\n  "amount" : 176.30 }'),
        ("final", '120 EUR converts to 176.30 CAD (the rate, not 176.03):\n```json\n{"amount": "176.30", "currency": "cad"}\n```'),
        ("final", '{"amount": "176.30 CAD", "currency": "CAD", "rate": 1.469}'),
        # The currency's symbol or code before the amount (units are data: they may precede or follow).
        ("final", '{"amount": "C$176.30", "currency": "CAD"}'), ("final", '{"amount": "CAD 176.30", "currency": "CAD"}'),
        ("final", '```json\r\n{"amount": 176.3, "currency": "CAD"}\r\n```'),
        ("final", '<answer>{"amount": 176.3, "currency": "CAD"}</answer>'),
        # The unit written out (data: the amount's units).
        ("final", '{"amount": "176.30 Canadian dollars", "currency": "CAD"}'), ("final", '{"amount": "176.3 dollars", "currency": "CAD"}'),
        # One line of prose before the object, a colon at its end or not.
        ("final", 'The tool returned 176.3.\n\n```json\n{"amount": 176.3, "currency": "CAD"}\n```'),
        ("final", '120 EUR is 176.30 CAD.\n{"amount": 176.30, "currency": "CAD"}'),
        # Spanish opens an exclamation with "¡": the accepted form "¡Gracias!" is data.
        ("no-tool:irrelevant_translation", "\u00a1Gracias!"), ("no-tool:irrelevant_translation", "*\u00a1Gracias!*"),
        # The arguments' JSON text as servers write it: spacing, escapes, key order are free.
        ("raw:weather_lisbon_now", [("get_weather", '{ "unit" : "celsius" ,\n  "city" : "Lisbon" }')]),
        ("raw:weather_lisbon_now", [("get_weather", '{"city": "\\u004cisbon", "unit": "celsius"}')]),
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
        (("no-tool:irrelevant_arithmetic", "12 × 12 = 144"), "holds 3 candidates"),
        (("no-tool:irrelevant_arithmetic", "143"), "answer is '143', expected '144'"),
        (("no-tool:irrelevant_arithmetic", "~144"), "answer '~144' holds more than the number"),
        (("final", '{"amount": "\u20ac176.30", "currency": "CAD"}'), "field 'amount' '\u20ac176.30' holds more than the number"),
        (("final", 'The tool returned 176.3.\n\n```json\n{"amount": 176.3, "currency": "CAD"}\n```\nOr 176.53.'),
         FORMAT + " text after the JSON object: 'Or 176.53.'"),
        (("no-tool:irrelevant_translation", "Gracias or De nada"), "expected 'Gracias'"),
        (("final", '{"amount": 176.35, "currency": "CAD"}'), "field 'amount' is '176.35'"),
        (("final", '{"amount": "176.3 or 176.53", "currency": "CAD"}'), "holds 2 candidates"),
        (("final", '{"amount": 120, "currency": "EUR"}'), "field 'currency' is 'EUR'"),
        (("final", "120 euros is about 176.30 Canadian dollars."), FORMAT),
        (("final", '{"amount": 176.3}'), FORMAT),
        (("final", '{"amount": "176.30 US dollars", "currency": "CAD"}'), "field 'amount' '176.30 US dollars' holds more than the number"),
        (("final", '{"amount": "176.30 Canadian dollars (176.03 at noon)", "currency": "CAD"}'), "holds 2 candidates (176.30, 176.03)"),
        # arguments that are not the API's JSON string: the call's slot malformed, never an exception
        (("raw:weather_lisbon_now", [("get_weather", {"city": "Lisbon", "unit": "celsius"})]),
         FORMAT + " invalid_json: arguments came as a JSON object"),
        (("raw:weather_lisbon_now", [("get_weather", None)]), FORMAT + " invalid_json: arguments are null"),
        (("raw:weather_lisbon_now", [("get_weather", "city=Lisbon, unit=celsius")]), FORMAT + " invalid_json: arguments 'city=Lisbon"),
        (("raw:weather_lisbon_now", [("get_weather", '"{\\"city\\": \\"Lisbon\\"}"')]), FORMAT + " invalid_json: arguments are a JSON string, not an object"),
    ],
)

# -- recall: one JSON object, a field per fact ----------------------------------------------------------

RECALL_BY_ID = {c.id: c for c in fixture_data.recall_fixtures().conversations}
LAB, TRIP, ONCALL = RECALL_BY_ID["lab_samples"], RECALL_BY_ID["trip_booking"], RECALL_BY_ID["oncall_handover"]


def _recall(answer: tuple[str, Any]) -> Verdict:
    conv_id, content = answer
    conv = RECALL_BY_ID[conv_id]
    return grade_recall(content if isinstance(content, str) else json.dumps(content), conv.contract, conv.near_misses)


LAB_TRUTH = {"batch": "B-1907", "freezer": 12, "temperature_c": -80, "study_lead": "Dr. Okafor"}
TRIP_TRUTH = {"booking_reference": "KX7-42Q", "my_hotel": "Hotel Aurelia", "sister_hotel": "Hotel Aurora", "budget_eur": 2350}
RECALL = Styles(
    "recall", _recall,
    correct=[
        ("lab_samples", LAB_TRUTH),
        ("lab_samples", json.dumps(LAB_TRUTH, indent=2)),
        ("lab_samples", {"study_lead": "Okafor", "temperature_c": "\u221280 °C", "freezer": "12", "batch": "b1907"}),
        ("lab_samples", "Here are the notebook details:\n```json\n" + json.dumps({**LAB_TRUTH, "note": "not B-1970 (Dr. Okoro's, freezer 21)"}) + "\n```"),
        ("lab_samples", {**LAB_TRUTH, "temperature_c": -80.0, "batch": "B 1907"}),
        ("trip_booking", TRIP_TRUTH),
        ("trip_booking", {**TRIP_TRUTH, "my_hotel": "Aurelia", "sister_hotel": "the Hotel Aurora", "budget_eur": "2,350 EUR"}),
        ("trip_booking", '{\n    "sister_hotel" : "Hotel Aurora",\n    "my_hotel" : "Hotel Aurelia",\n    "budget_eur" : 2350.00,\n'
                         '    "booking_reference" : "kx7-42q"\n}'),
        ("oncall_handover", {"name": "Ingrid Vasquez", "employee_number": "48213", "door_code": "7Q-5531"}),
        ("oncall_handover", {"name": "INGRID VASQUEZ", "employee_number": 48213, "door_code": "7q 5531"}),
        ("oncall_handover", "```\n{\"door_code\": \"7Q5531\", \"employee_number\": \"48213\", \"name\": \"Ingrid Vasquez\"}\n```"),
        # A unit before the number, a final period or smart quotes inside a field, a freezer's label
        # (data: `units`), CRLF line ends.
        ("trip_booking", {**TRIP_TRUTH, "budget_eur": "\u20ac2,350", "my_hotel": "Hotel Aurelia.", "sister_hotel": "\u201cHotel Aurora\u201d"}),
        ("lab_samples", {**LAB_TRUTH, "freezer": "Freezer 12", "temperature_c": "-80\u00b0C"}),
        ("oncall_handover", "```json\r\n{\r\n  \"name\": \"Ingrid Vasquez\",\r\n  \"employee_number\": 48213,\r\n  \"door_code\": \"7Q-5531\"\r\n}\r\n```\r\n"),
        # A listed unit however it is spelt: "degrees C", "°" (for "degrees"), "℃", "deg. C".
        ("lab_samples", {**LAB_TRUTH, "temperature_c": "-80 degrees C"}),
        ("lab_samples", {**LAB_TRUTH, "temperature_c": "-80\u00b0"}),
        ("lab_samples", {**LAB_TRUTH, "temperature_c": "\u221280 \u2103"}),
        ("lab_samples", {**LAB_TRUTH, "temperature_c": "-80 deg. C"}),
        # the abbreviated spellings (pint's, UDUNITS'), glued or spaced
        ("lab_samples", {**LAB_TRUTH, "temperature_c": "-80 degC"}),
        ("lab_samples", {**LAB_TRUTH, "temperature_c": "-80 deg C"}),
        ("lab_samples", {**LAB_TRUTH, "temperature_c": "\u221280degC"}),
        # Answer tags round the whole object (Hunyuan's template writes them).
        ("trip_booking", "<answer>\n" + json.dumps(TRIP_TRUTH) + "\n</answer>"),
        # SI and French digit grouping, as commas group: "2 350 EUR" with a narrow no-break space.
        ("trip_booking", {**TRIP_TRUTH, "budget_eur": "2\u202f350 EUR"}),
        ("trip_booking", {**TRIP_TRUTH, "budget_eur": "2\u2009350"}),
        ("trip_booking", {**TRIP_TRUTH, "budget_eur": "\u20ac2\u00a0350"}),
        # Dots grouping digits beside a decimal comma ("2.350,00 EUR"); the freezer's label with
        # its number sign (data: `units`).
        ("trip_booking", {**TRIP_TRUTH, "budget_eur": "2.350,00 EUR"}),
        ("trip_booking", {**TRIP_TRUTH, "budget_eur": "\u20ac2.350,00"}),
        ("lab_samples", {**LAB_TRUTH, "freezer": "Freezer No. 12"}),
        ("lab_samples", {**LAB_TRUTH, "freezer": "Freezer #12"}),
    ],
    near_misses=[
        (("trip_booking", "Your sister is at the Hotel Aurelia and you're at the Hotel Aurora; booking KX7-42Q, budget 2,350 euros."), FORMAT),
        (("trip_booking", {**TRIP_TRUTH, "my_hotel": "Hotel Aurora", "sister_hotel": "Hotel Aurelia"}), "field 'my_hotel' is 'Hotel Aurora'"),
        (("lab_samples", {**LAB_TRUTH, "batch": "B-1970"}), "field 'batch' holds the near-miss value 'B-1970'"),
        (("lab_samples", {**LAB_TRUTH, "temperature_c": 80}), "field 'temperature_c' is '80'"),
        (("lab_samples", {**LAB_TRUTH, "freezer": "12 or 21"}), "holds 2 candidates"),
        (("trip_booking", {**TRIP_TRUTH, "budget_eur": "~2350"}), "field 'budget_eur' '~2350' holds more than the number"),
        # another unit, or a second number beside a unit: no unit can hide a second candidate
        (("lab_samples", {**LAB_TRUTH, "temperature_c": "-80 \u00b0F"}), "field 'temperature_c' '-80 \u00b0F' holds more than the number"),
        (("lab_samples", {**LAB_TRUTH, "temperature_c": "-80 \u00b0C (-112 \u00b0F)"}), "holds 2 candidates (-80, -112)"),
        (("lab_samples", {**LAB_TRUTH, "temperature_c": "-80 degrees C or -70"}), "holds 2 candidates (-80, -70)"),
        (("lab_samples", {**LAB_TRUTH, "temperature_c": "-8 degrees C"}), "field 'temperature_c' is '-8 degrees C'"),
        (("lab_samples", {**LAB_TRUTH, "temperature_c": "-80 degF"}), "field 'temperature_c' '-80 degF' holds more than the number"),
        (("lab_samples", {**LAB_TRUTH, "temperature_c": "-80 degK"}), "field 'temperature_c' '-80 degK' holds more than the number"),
        (("lab_samples", {**LAB_TRUTH, "temperature_c": "-80 degC (-112 degF)"}), "holds 2 candidates (-80, -112)"),
        (("lab_samples", {**LAB_TRUTH, "temperature_c": "-80 degC or -70 degC"}), "holds 2 candidates (-80, -70)"),
        (("trip_booking", "<answer>" + json.dumps(TRIP_TRUTH) + "</answer>\n<answer>" + json.dumps(TRIP_TRUTH) + "</answer>"),
         FORMAT + " text after the JSON object: a second JSON object"),
        # a space that is no digit grouping: two numbers, never 2350
        (("trip_booking", {**TRIP_TRUTH, "budget_eur": "2 350"}), "holds 2 candidates (2, 350)"),
        (("trip_booking", {**TRIP_TRUTH, "budget_eur": "2\u202f35 EUR"}), "holds 2 candidates (2, 35)"),
        (("trip_booking", {**TRIP_TRUTH, "budget_eur": "2\u202f350\u00a0000"}), "holds 3 candidates"),
        (("lab_samples", {**LAB_TRUTH, "freezer": "Freezer 21"}), "field 'freezer' is 'Freezer 21'"),
        (("lab_samples", {**LAB_TRUTH, "freezer": "Freezer No. 21"}), "field 'freezer' is 'Freezer No. 21'"),
        (("lab_samples", {**LAB_TRUTH, "freezer": "Freezer No. 12 or No. 21"}), "holds 2 candidates (12, 21)"),
        (("lab_samples", {**LAB_TRUTH, "freezer": "Shelf No. 12"}), "field 'freezer' 'Shelf No. 12' holds more than the number"),
        # one dot group may be a decimal point: "2.350" is 2.35, never 2350 (one group stays ambiguous)
        (("trip_booking", {**TRIP_TRUTH, "budget_eur": "2.350"}), "field 'budget_eur' is '2.350'"),
        (("trip_booking", {**TRIP_TRUTH, "budget_eur": "2.350 EUR"}), "field 'budget_eur' is '2.350 EUR'"),
        (("trip_booking", {**TRIP_TRUTH, "budget_eur": "2.350.000"}), "field 'budget_eur' is '2.350.000'"),
        (("trip_booking", {**TRIP_TRUTH, "budget_eur": "2.350,00 or 2.530,00"}), "holds 2 candidates"),
        (("lab_samples", {**LAB_TRUTH, "study_lead": "Dr. Okafor (or maybe Dr. Okoro)"}), "field 'study_lead'"),
        (("lab_samples", {k: v for k, v in LAB_TRUTH.items() if k != "freezer"}), FORMAT),
        (("oncall_handover", {"name": "Ingrid Vasquez", "employee_number": "48231", "door_code": "7Q-5531"}),
         "field 'employee_number' holds the near-miss value '48231'"),
        (("oncall_handover", "Ingrid Vasquez, Employee No 48213, door code 7Q-5531"), FORMAT),
        (("trip_booking", '{"booking_reference": "KX7-42Q", "booking_reference": "KX7-24Q", "my_hotel": "Hotel Aurelia", '
                          '"sister_hotel": "Hotel Aurora", "budget_eur": 2350}'), FORMAT + " key(s) 'booking_reference' given twice"),
    ],
)

# -- reasoning: thinking disabled; the engine's leaks decide, not the working a prompt invited ------------


def _reasoning(answer: tuple[str, str | None, int | None]) -> Verdict:
    return check_no_reasoning(*answer)


REASONING = Styles(
    "reasoning", _reasoning,
    correct=[
        ("**Reasoning:** it leaves at 3 pm and the trip takes 2 hours.\n\nANSWER: 5 pm", None, None),
        ("Thoughts: 3 pm + 2 h = 5 pm, not 4 pm.\nANSWER: 5 pm", None, None),
        ("Let me think it through: 3 pm plus two hours is 5 pm.\n\n**ANSWER:** 5 pm", None, 0),
        ("Thinking Process:\n1. Departure 3 pm.\n2. Two hours later is 5 pm.\n\nANSWER: 5 pm", None, None),
        ("Blue", "", None),
        ("## Working\n15:00 + 2:00 = 17:00\n\n## Answer\nANSWER: 17:00", None, None),
        ("I think it's blue.", None, None),
        ("8", None, 0),
        ("A spider has **8** legs. (Reasoning: arachnids have four pairs.)", None, None),
        ("| step | time |\n|---|---|\n| leave | 3 pm |\n| arrive | 5 pm |\n\nANSWER: 5 pm", None, None),
        ("<b>Blue</b>", None, None),
        # The words the families' markers are made of, as prose; a whitespace-only reasoning field (a
        # disabled template's empty think block) holds no reasoning.
        ("Analysis: Rayleigh scattering favours short wavelengths.\n\nBlue", None, None),
        ("Here is my thought process: 3 pm plus 2 hours is 5 pm.\n\nANSWER: 5 pm", None, None),
        ("The assistant's final answer: Blue", None, None),
        ("<answer>Blue</answer>", None, None),
        # harmony's words as prose: not where its stripped tokens would stand
        ("The final analysis: 4", None, None),
        ("I ran some analysis on the numbers first.\n\nAnswer: 4", None, None),
        ("The assistant final answer is 4", None, None),
        # a channel's name as a word of a sentence, or capitalised where it opens a reply
        ("Analysis: the answer is blue", None, None),
        ("An analysis of the data shows the sky is blue.", None, None),
        ("analysis shows the sky is blue", None, None),
        ("Commentary\nThe sky is blue.", None, None),
        ("Blue", "\n\n", None),
        ("Blue", "   \n", 0),
        # one line of working with thinking disabled: prose, no reasoning the engine produced
        ("Okay, the user wants the colour of a clear daytime sky, so the answer is Blue.", None, None),
        ("Let me think step by step: 3 pm + 2 h = 5 pm. The answer is: 5 pm", None, 0),
    ],
    near_misses=[
        (("<think>\nThe sky is blue.\n</think>\n\nBlue", None, None), "reasoning markers in the visible content"),
        (("Blue", "The user asks about the sky.", None), "reasoning field populated"),
        (("Blue", None, 12), "usage reports 12 reasoning tokens"),
        (("[THINK]sky[/THINK]Blue", None, None), "reasoning markers"),
        (("<|channel|>analysis<|message|>sky<|end|>Blue", None, None), "reasoning markers"),
        (("Blue</think>", None, None), "reasoning markers"),
        (("<thinking>3 + 2 = 5</thinking>\nANSWER: 5 pm", None, None), "reasoning markers"),
        # other families' think tags, harmony whole or stripped of its special tokens, Granite's phrases
        (("<seed:think>The user asks about the sky.</seed:think>Blue", None, None), "reasoning markers in the visible content: '<seed:think>'"),
        (("<|START_THINKING|>sky<|END_THINKING|>Blue", None, None), "'<|START_THINKING|>'"),
        (("<thought>sky</thought>\nBlue", None, None), "'<thought>'"),
        (("<think>\nsky\n</think>\n<answer>\nBlue\n</answer>", None, None), "'<think>'"),
        (("<|channel>thought\nsky<channel|>Blue", None, None), "'<|channel>'"),
        (("<|channel|>analysis<|message|>sky<|end|><|start|>assistant<|channel|>final<|message|>Blue", None, None),
         "'<|channel|>analysis'"),
        (("analysisThe user asks what colour the sky is. Answer: blue.assistantfinalBlue", None, None),
         "reasoning markers in the visible content: 'analysis', 'assistantfinal'"),
        (("We need to answer briefly.assistantfinalBlue", None, None), "'assistantfinal'"),
        (("analysis User wants the sum. assistant final 4", None, None),
         "reasoning markers in the visible content: 'analysis', 'assistant final'"),
        (("analysis\nThe user asks for 2+2.\nassistant\nfinal\n4", None, None), "'analysis', 'assistant final'"),
        # cut off in the analysis channel, so no final channel follows: the channel's name opens the content
        (("analysis We need to answer the colour question. The sky is blue. The answer is blue.", None, None),
         "reasoning markers in the visible content: 'analysis'"),
        (("commentary\nWe need to answer the colour question.", None, None), "'commentary'"),
        (("assistant analysis We need to answer the colour question.", None, None), "'assistant analysis'"),
        (("analysisWe need to answer the colour question. The sky is", None, None), "'analysis'"),
        (("Here is my thought process: sky scatters blue. Here is my response: Blue", None, None),
         "'Here is my thought process:', 'Here is my response:'"),
        (("<|inner_prefix|>sky<|inner_suffix|>Blue", None, None), "'<|inner_prefix|>'"),
    ],
)

# -- reasoning with thinking enabled and a reasoning parser configured: the reasoning in its own field;
# where none came back at all (no field, no reasoning tokens), the content holds nothing besides the
# prompt's answer slot (a parser that stripped or missed the markers leaves the working there) --------

REASONING_PROMPTS = {p.id: p for p in fixture_data.reasoning_prompts()}
LEAK = "reasoning leak: thinking is enabled and no reasoning came back (no reasoning field, no reasoning tokens)"
THOUGHT = "Okay, the user wants to know the colour of a clear daytime sky. Rayleigh scattering favours short wavelengths."


def _thinking_on(answer: tuple[str, str | None, str | None, int | None]) -> Verdict:
    prompt_id, content, reasoning, reasoning_tokens = answer
    return check_reasoning_separated(content, reasoning, reasoning_tokens,
                                     contract=REASONING_PROMPTS[prompt_id].contract, parser="qwen3")


THINKING_ON = Styles("reasoning", _thinking_on, correct=[], near_misses=[])
THINKING_ON_STYLES: list[tuple[Any, str | None]] = [
    (("sky", "Blue", THOUGHT, None), None),
    (("sky", "Blue", None, None), None),                          # nothing returned, nothing leaked
    (("sky", "**Blue**", "\n\n", 0), None),
    (("sky", "Here is the answer:\nBlue", None, None), None),     # a preamble line: tolerated noise
    (("train", "3 pm + 2 hours = 5 pm.\n\nANSWER: 5 pm", "The train leaves at 3 pm; two hours later is 5 pm.", 40), None),
    (("train", "ANSWER: 5 pm", None, None), None),
    (("train", "**Answer:**\n5 pm", None, 0), None),
    (("train", "Let me think step by step: 3 pm + 2 h.\n\nANSWER: 5 pm", None, 52), None),  # counted, kept back
    (("spider", "8", "Spiders are arachnids: four pairs of legs.", 12), None),
    (("spider", "Let me think step by step.\nSpiders are arachnids.\n\n8", "They have four pairs.", None), None),
    (("sky", THOUGHT + "\n\nBlue", None, None), LEAK + ", while the visible content holds 2 lines of working"),
    (("sky", THOUGHT + "\n\nBlue", "", 0), LEAK),
    (("sky", THOUGHT + "\n\nBlue", " \n", None), LEAK),
    (("train", "Let me think step by step. The train leaves at 3 pm.\nTwo hours later is 5 pm.\n\nANSWER: 5 pm", None, None),
     LEAK + ", while the visible content holds 2 lines of working besides its answer slot: 'Let me think step by step."),
    (("train", "ANSWER: 5 pm\nOkay, wait, let me double-check: 3 + 2 = 5.", None, None), LEAK),
    (("spider", "Okay, so the user asks how many legs a spider has.\nSpiders are arachnids.\n8", None, None),
     "(the reasoning parser 'qwen3' left the reasoning in the content)"),
    # one line: a plain short answer, a label, a courtesy or a preamble before it, a sentence that
    # answers, a hesitation: no working, however no reasoning came back
    (("sky", "Blue.", None, None), None),
    (("sky", "The answer is: Blue", None, None), None),
    (("sky", "Sure! The answer is: Blue", None, 0), None),
    (("sky", "Here is the answer: Blue", None, None), None),
    (("sky", "The sky is blue.", "", None), None),
    (("sky", "I think it's blue.", None, None), None),
    (("sky", "Hmm, blue.", None, None), None),
    (("sky", "OK, I'll go with blue.", None, None), None),
    (("spider", "A spider has **8** legs.", None, None), None),
    (("spider", "**Final answer:** 8", None, None), None),
    (("train", "ANSWER: 5 pm", " ", 0), None),
    (("train", "The final answer is: 5 pm", None, None), None),
    # one line of working, reasoning returned or counted: the model's visible answer, not judged here
    (("sky", "Okay, the user wants the colour of the sky, so the answer is blue.", THOUGHT, None), None),
    (("train", "Let me think step by step: 3 pm + 2 h = 5 pm. The answer is: 5 pm", None, 31), None),
    # one line of working and no reasoning back: the parser stripped or missed its markers
    (("sky", "Okay, the user wants the colour of a clear daytime sky, so the answer is Blue.", None, None),
     LEAK + ", while the visible content holds working on its answer's own line: 'Okay, the user wants the colour"),
    (("train", "Let me think step by step: 3 pm + 2 h = 5 pm. The answer is: 5 pm", None, None),
     LEAK + ", while the visible content holds working on its answer's own line: 'Let me think step by step: "
            "3 pm + 2 h = 5 pm.' (the reasoning parser 'qwen3' left the reasoning in the content)"),
    (("train", "3 pm + 2 h = 5 pm. **ANSWER:** 5 pm", "", 0), LEAK + ", while the visible content holds working on"),
    (("train", "It leaves at 3 pm and takes 2 hours. The final answer is: 5 pm", " \n", None), LEAK),
    (("spider", "The user is asking how many legs a spider has: 8.", None, None), LEAK),
    (("spider", "Okay, so spiders are arachnids with four pairs of legs, 8.", None, None), LEAK),
    (("spider", "Hmm, let me recall: arachnids have eight legs. 8", None, None), LEAK),
    (("sky", "First, I need to recall why the sky looks blue. Blue", None, None), LEAK),
    (("sky", "Wait, Rayleigh scattering favours short wavelengths, so Blue.", None, None), LEAK),
    (("sky", THOUGHT + "</think>\n\nBlue", None, None), "reasoning markers in the visible content: '</think>'"),
    (("sky", "<think>\n" + THOUGHT + "\n</think>\n\nBlue", THOUGHT, None), "reasoning markers in the visible content"),
]


# -- reasoning's visible answer: checked under the prompt's contract and recorded (never deciding) -----

TRAIN = next(p for p in fixture_data.reasoning_prompts() if p.id == "train")


def test_the_reasoning_prompts_visible_answer_goes_through_its_contract():
    assert TRAIN.grade("3 pm plus two hours, not 4 pm.\nANSWER: 5 pm").ok
    assert not TRAIN.grade("It arrives at 5 pm.").ok
    # An accepted form's own final period is noise on both sides ("5 p.m." was rejected as "5 p.m").
    for reply in ("ANSWER: 5 p.m.", "ANSWER: 5:00 P.M.", "ANSWER: 5:00pm", "ANSWER: 5 PM.", "Working.\r\nANSWER: 17:00\r\n"):
        assert TRAIN.grade(reply).ok, reply
    for reply in ("ANSWER: ~5 pm", "ANSWER: 5 pm?", "ANSWER: 5 pm or 6 pm", "ANSWER: 4 pm"):
        assert not TRAIN.grade(reply).ok, reply


# -- finish: the planet and opposite prompts (whole reply), the sum prompt (ANSWER line) ---------------

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
    return FINISH_PROMPTS[prompt_id].grade(content)


FINISH = Styles(
    "finish", _finish,
    correct=[
        ("planet", "Jupiter", "stop"), ("planet", "**Jupiter**", "stop"), ("planet", "Jupiter.", "stop"),
        ("planet", "Answer: Jupiter", "stop"), ("planet", "JUPITER", "stop"),
        ("sum", "ANSWER: 42", "stop"), ("sum", "12 + 30 = 42, not 43.\nANSWER: 42", "stop"),
        ("sum", "Let me add them:\n\n| a | b | sum |\n|---|---|---|\n| 12 | 30 | 42 |\n\n**ANSWER:** 42", "stop"),
        ("sum", "Some would say 41 or 43. Wrong: 12 + 30 = 42.\n\nANSWER: **42**", "stop"),
        ("sum", "ANSWER: 42.0", "stop"),
        ("opposite", "Cold.", "stop"), ("opposite", "*cold*", "stop"),
        ("sum", "Working: not 41, not 43.\r\nANSWER: 42\r\n", "stop"),
        # The brackets of the instruction's notation copied around the value.
        ("sum", "12 + 30 = 42\nANSWER: <42>", "stop"),
        # A fullwidth colon (CJK-trained models) and a zero-width space are noise.
        ("sum", "12 + 30 = 42\nANSWER\uff1a42", "stop"), ("sum", "ANSWER: 42\u200b", "stop"),
        # Answer tags: after the label, or as the answer line itself (their tags are its label).
        ("sum", "12 + 30 = 42\nANSWER: <answer>42</answer>", "stop"), ("sum", "12 + 30 = 42\n\n<answer>42</answer>", "stop"),
        ("sum", "12 + 30 = 42, not 43.\n<answer>\n42\n</answer>", "stop"),
        # "The answer is:" is one label with "The final answer is:"
        ("sum", "12 + 30 = 42\n\nThe answer is: 42", "stop"), ("sum", "12 + 30 = 42\n\n**The answer is:** $\\boxed{42}$", "stop"),
    ],
    near_misses=[
        (("sum", "12 + 30 = 42. Wait, no: 43.", "stop"), FORMAT + " no final line 'ANSWER"),
        (("sum", "12 + 30 = 42. Wait, no: 43.\nANSWER: 43", "stop"), "answer is '43', expected '42'"),
        (("sum", "ANSWER: 42\nANSWER: 43", "stop"), FORMAT + " 2 ANSWER lines"),
        (("sum", "The answer is: 43\n12 + 30 = 42\nANSWER: 42", "stop"), FORMAT + " 2 ANSWER lines ('The answer is: 43'; 'ANSWER: 42')"),
        (("sum", "12 + 30 = 42\nThe answer is: 42\nThe final answer is: 43", "stop"), FORMAT + " 2 ANSWER lines"),
        (("sum", "12 + 30 = 42\n\nThe answer is: 42 or 43", "stop"), "holds 2 candidates (42, 43)"),
        (("sum", "ANSWER: 42 or 43", "stop"), "holds 2 candidates"),
        (("sum", "ANSWER: ~42", "stop"), "answer '~42' holds more than the number"),
        (("sum", "ANSWER: <43>", "stop"), "answer is '43', expected '42'"),
        (("sum", "ANSWER: 42\n\nHope this helps!", "stop"), FORMAT + " text after the ANSWER line"),
        (("sum", "<answer>43</answer>\n12 + 30 = 42\nANSWER: 42", "stop"), FORMAT + " 2 ANSWER lines ('<answer>43</answer>'; 'ANSWER: 42')"),
        (("sum", "<answer>42</answer>\nActually 43", "stop"), FORMAT + " text after the ANSWER line: 'Actually 43'"),
        (("sum", "ANSWER: <answer>42 or 43</answer>", "stop"), "holds 2 candidates (42, 43)"),
        (("sum", "<answer>42</answer> <answer>43</answer>", "stop"), FORMAT + " no final line 'ANSWER"),
        (("sum", "12 + 30\n<answer>\n42\n43\n</answer>", "stop"), FORMAT),
        (("planet", "Saturn (Jupiter is only the second largest)", "stop"), "expected 'Jupiter'"),
        (("planet", "Jupiter or Saturn", "stop"), "expected 'Jupiter'"),
        (("planet", "Jupiter", "length"), "answer budget exhausted"),
        (("opposite", "Warm", "stop"), "answer is 'Warm', expected 'Cold'"),
    ],
)

# -- robustness: the short request after hostile requests ------------------------------------------
# Liveness, not correctness (PROTOCOL: "healthy after a refusal" is a short request answered within
# budget with an allowed finish state): any visible answer that ends "stop" passes; whether it is
# right under the question's contract is recorded beside it (liveness.py), never deciding.

LIVENESS_QUESTION = fixture_data.smoke_questions()[0]
ROBUSTNESS = Styles(
    "robustness", lambda answer: _finished(*answer),
    correct=[("Paris", "stop"), ("Paris!", "stop"), ("It's Paris.", "stop"), ("**PARIS**", "stop"), ("> Paris", "stop"),
             ("Paris, of course.", "stop"), ("Lyon", "stop"), ("The capital of France is Paris.\n\nAnything else?", "stop"),
             ("qux blorp", "stop"), ("`Paris`", "stop")],
    near_misses=[
        (("", "stop"), "empty answer"), (("   \n", "stop"), "empty answer"), (("Par", "length"), "answer budget exhausted"),
        (("Paris", None), "no finish_reason"), (("Paris", "tool_calls"), "not allowed on a non-tool answer"),
        (("Paris", "abort"), "not allowed on a non-tool answer"),
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


# -- what capable models write when they follow the prompt ---------------------------------------
# Replies in the styles of GPT-4o, Claude, Qwen3, Llama-3.3 and DeepSeek-V3 to the exact prompts,
# for every contract form, graded by each module's own call. The rule (graders/contract.py): accept
# what a reasonable reader of the prompt accepts as following it — the final line's label in any
# case, with markdown emphasis, or "Final answer:"; math notation around a value; long working a
# prompt invited; one line of prose before a JSON object — and reject whatever could hide a second
# candidate or a retraction: a second answer line, two values in one wrapper, text after the answer
# line or the object, two objects. `None`: must pass; otherwise what the reason must say.

TRAIN_ANSWER = Styles("reasoning", lambda content: TRAIN.grade(content), correct=[], near_misses=[])
WORKING = ("To find the sum, I'll add the two numbers step by step.\n\n"
           "1. Start with the tens: 12 has 1 ten and 30 has 3 tens, so 1 + 3 = 4 tens, which is 40.\n"
           "2. Then the units: 12 has 2 units and 30 has 0 units, so 2 + 0 = 2.\n"
           "3. Combine them: 40 + 2 = 42.\n\n"
           "Let me double-check by counting up from 30: 30 + 10 = 40, and 40 + 2 = 42. "
           "Both ways give the same result, so the sum is not 41 or 43.")
TRAIN_WORKING = ("**Reasoning:**\n\n1. The train departs at 3 pm.\n2. The journey lasts 2 hours.\n"
                 "3. Adding 2 hours to 3 pm: 3 pm + 1 hour = 4 pm, and 4 pm + 1 hour = 5 pm.\n"
                 "4. No time zones or stops are mentioned, so nothing else changes the arrival time.\n"
                 "5. Checking in 24-hour time: 15:00 + 2:00 = 17:00, which is 5 pm again, not 4 pm or 6 pm.\n\n"
                 "So the train arrives two hours after it leaves.")
PLAIN_TRIP = json.dumps(TRIP_TRUTH)
PLAIN_LAB = json.dumps(LAB_TRUTH, indent=2)
FINAL = '{"amount": 176.30, "currency": "CAD"}'
MODEL_STYLES: list[tuple[Styles, Any, str | None]] = [
    # the final line's label: case and markdown emphasis (the examples first)
    (FINISH, ("sum", "12 + 30 = 42.\n\nAnswer: 42", "stop"), None),
    (FINISH, ("sum", "**Answer:** 42", "stop"), None),
    (FINISH, ("sum", "12 + 30 = 42\n\n**ANSWER:** 42", "stop"), None),
    (FINISH, ("sum", "12 + 30 = 42.\n\n**ANSWER: 42**", "stop"), None),
    (FINISH, ("sum", "Adding the numbers: 12 + 30 = 42.\n\n### Answer: 42", "stop"), None),
    (FINISH, ("sum", "12 + 30 = 42\n\nanswer: 42", "stop"), None),
    (FINISH, ("sum", "12 + 30 = 42\n\n**Answer**: 42", "stop"), None),
    (FINISH, ("sum", "12 + 30 = 42.\n\n`ANSWER: 42`", "stop"), None),
    (FINISH, ("sum", "12 + 30 = 42\n\n**Final Answer:** 42", "stop"), None),
    (FINISH, ("sum", "12 plus 30 equals 42.\n\nFinal answer: 42", "stop"), None),
    (FINISH, ("sum", "## Step 1: Add the numbers\n12 + 30 = 42\n\nThe final answer is: $\\boxed{42}$", "stop"), None),
    (FINISH, ("sum", "> **Answer:** 42", "stop"), None),
    # math notation around the value (Qwen3, DeepSeek-V3)
    (FINISH, ("sum", "12 + 30 = 42\n\nANSWER: $42$", "stop"), None),
    (FINISH, ("sum", "To find the sum:\n\n$$12 + 30 = 42$$\n\nANSWER: $\\boxed{42}$", "stop"), None),
    (FINISH, ("sum", "We compute \\(12 + 30 = 42\\).\n\nANSWER: \\(42\\)", "stop"), None),
    (FINISH, ("sum", "\\[\n12 + 30 = 42\n\\]\n\nANSWER: \\[42\\]", "stop"), None),
    (FINISH, ("sum", "12 + 30 = 42\n\nANSWER: \\boxed{42}", "stop"), None),
    (FINISH, ("sum", "12 + 30 = 42\n\n**ANSWER:** $\\boxed{42}$.", "stop"), None),
    (FINISH, ("sum", "12 + 30 = 42\n\nANSWER: $$42$$", "stop"), None),
    (FINISH, ("sum", "Adding:\n\nANSWER:\n\\[\n\\boxed{42}\n\\]", "stop"), None),
    (FINISH, ("sum", "12 + 30 = 42\n\n**Answer:**\n42", "stop"), None),
    (FINISH, ("sum", "12 + 30 = 42\n\nANSWER:\n$\\boxed{42}$", "stop"), None),
    (FINISH, ("sum", "12 + 30 = 42\n\nANSWER: $\\mathbf{42}$", "stop"), None),
    # long working the prompt invited (the length band never measures it: test_fixtures.py)
    (FINISH, ("sum", WORKING + "\n\nANSWER: 42", "stop"), None),
    (FINISH, ("sum", WORKING + "\n\n**Answer:** $42$", "stop"), None),
    (TRAIN_ANSWER, TRAIN_WORKING + "\n\nANSWER: 5 pm", None),
    (TRAIN_ANSWER, TRAIN_WORKING + "\n\n**Answer:** 5 pm", None),
    (TRAIN_ANSWER, "3 pm + 2 hours = 5 pm.\n\nANSWER: $\\boxed{5 \\text{ pm}}$", None),
    (TRAIN_ANSWER, "3 pm plus 2 hours.\n\n**Final Answer:** 5 p.m.", None),
    (TRAIN_ANSWER, "15:00 + 2:00\n\nANSWER: $17:00$", None),
    (TRAIN_ANSWER, "The train arrives at 5 pm.\n\nanswer: **5 pm**", None),
    # the hour with its leading zero, a 12-hour clock's form (data: the item's accepted forms)
    *((THINKING_ON, answer, why) for answer, why in THINKING_ON_STYLES),
    (TRAIN_ANSWER, "3 pm + 2 hours = 5 pm.\n\nANSWER: 05:00 PM", None),
    (TRAIN_ANSWER, TRAIN_WORKING + "\n\n**ANSWER:** 05:00 P.M.", None),
    (TRAIN_ANSWER, "15:00 + 2:00 = 17:00.\n\nThe answer is: 05:00pm", None),
    # whole-reply items: the value alone, in the same notations
    (SMOKE, ("capital", "**Answer:** Paris"), None),
    (SMOKE, ("capital", "ANSWER: Paris"), None),
    (SMOKE, ("week", "$7$"), None),
    (SMOKE, ("week", "\\boxed{7}"), None),
    (SMOKE, ("week", "$\\boxed{7}$"), None),
    (SMOKE, ("week", "**Answer:** \\(7\\)"), None),
    (FINISH, ("planet", "**ANSWER:** Jupiter", "stop"), None),
    (FINISH, ("planet", "$\\text{Jupiter}$", "stop"), None),
    (FINISH, ("opposite", "Final answer: **Cold**", "stop"), None),
    (TOOL_STYLES, ("no-tool:irrelevant_arithmetic", "$144$"), None),
    (TOOL_STYLES, ("no-tool:irrelevant_arithmetic", "**Answer:** \\boxed{144}"), None),
    (CONTEXT, "$1234567$", None),
    # one line of prose before a single JSON object, fenced or not, a colon at its end or not
    (TOOL_STYLES, ("final", "Here are the details you asked for.\n" + FINAL), None),
    (TOOL_STYLES, ("final", "Here are the details you asked for.\n\n```json\n" + FINAL + "\n```"), None),
    (TOOL_STYLES, ("final", "120 EUR is 176.30 CAD.\n" + FINAL), None),
    (TOOL_STYLES, ("final", "Sure! Here's the conversion in the requested format:\n```json\n" + FINAL + "\n```"), None),
    (TOOL_STYLES, ("final", "Based on the tool result, 120 EUR converts to 176.30 CAD. " + FINAL), None),
    (RECALL, ("trip_booking", "Here are the details you asked for.\n" + PLAIN_TRIP), None),
    (RECALL, ("trip_booking", "Here are the details you asked for.\n\n```json\n" + PLAIN_TRIP + "\n```"), None),
    (RECALL, ("lab_samples", "Here is the information from our conversation.\n\n" + PLAIN_LAB), None),
    (RECALL, ("lab_samples", "**Lab sample details**\n```json\n" + PLAIN_LAB + "\n```"), None),
    (RECALL, ("oncall_handover", "Below is the on-call contact.\n"
              '{"name": "Ingrid Vasquez", "employee_number": 48213, "door_code": "7Q-5531"}'), None),

    # near misses: a second candidate or a retraction, wherever the new forms could hide one
    (FINISH, ("sum", "answer: 43\n\n12 + 30 = 42\n\nANSWER: 42", "stop"), FORMAT + " 2 ANSWER lines ('answer: 43'; 'ANSWER: 42')"),
    (FINISH, ("sum", "**Answer:** 43\n\nWait, 12 + 30 = 42.\n\nANSWER: 42", "stop"), FORMAT + " 2 ANSWER lines"),
    (FINISH, ("sum", "12 + 30 = 42\n\nANSWER: $42$ or $43$", "stop"), "holds 2 candidates (42, 43)"),
    (FINISH, ("sum", "12 + 30 = 42\n\nANSWER: \\boxed{42} \\boxed{43}", "stop"), "holds 2 candidates (42, 43)"),
    (FINISH, ("sum", "12 + 30 = 42\n\nANSWER: $42 or 43$", "stop"), "holds 2 candidates (42, 43)"),
    (FINISH, ("sum", WORKING + "\n\nANSWER: 42\nANSWER: 43", "stop"), FORMAT + " 2 ANSWER lines ('ANSWER: 42'; 'ANSWER: 43')"),
    (FINISH, ("sum", WORKING + "\n\n**Answer:** 42\n\n**Final Answer:** 43", "stop"), FORMAT + " 2 ANSWER lines"),
    (FINISH, ("sum", "ANSWER: 42\nActually 43", "stop"), FORMAT + " text after the ANSWER line: 'Actually 43'"),
    (FINISH, ("sum", "**ANSWER:** 42\n\n$\\boxed{43}$", "stop"), FORMAT + " text after the ANSWER line"),
    (FINISH, ("sum", "ANSWER:\n\\[\n\\boxed{42}\n\\]\nor 43", "stop"), FORMAT + " text after the ANSWER line"),
    (FINISH, ("sum", "**Answer:**\n42\n43", "stop"), FORMAT + " text after the ANSWER line: '42'"),
    (FINISH, ("sum", "12 + 30 = 42\n\nANSWER: $\\boxed{43}$", "stop"), "answer is '43', expected '42'"),
    (FINISH, ("sum", "$\\boxed{42}$", "stop"), FORMAT + " no final line 'ANSWER"),
    (FINISH, ("sum", "12 + 30 = 42\n\nANSWER: $\\approx 42$", "stop"), "holds more than the number"),
    (FINISH, ("sum", "12 + 30 = 42\n\nANSWER: ~$42$", "stop"), "holds more than the number"),
    (FINISH, ("planet", "**Answer:** Jupiter\n\nJupiter is a gas giant.", "stop"), FORMAT),
    (FINISH, ("planet", "$\\text{Jupiter}$ or $\\text{Saturn}$", "stop"), "expected 'Jupiter'"),
    (SMOKE, ("week", "\\boxed{7} \\boxed{8}"), "holds 2 candidates (7, 8)"),
    (SMOKE, ("week", "$7$ or $8$"), "holds 2 candidates (7, 8)"),
    (TRAIN_ANSWER, TRAIN_WORKING + "\n\nANSWER: 5 pm\nANSWER: 6 pm", FORMAT + " 2 ANSWER lines"),
    (TRAIN_ANSWER, "ANSWER: $\\boxed{5 \\text{ pm}}$\nActually it is 6 pm.", FORMAT + " text after the ANSWER line"),
    (TRAIN_ANSWER, "ANSWER: $5$ pm or $6$ pm", "expected '5 pm'"),
    (TRAIN_ANSWER, "3 pm + 2 hours.\n\nANSWER: 05:00 AM", "answer is '05:00 AM', expected"),
    (TRAIN_ANSWER, "3 pm + 2 hours.\n\nANSWER: 05:00", "answer is '05:00', expected"),
    (TRAIN_ANSWER, "3 pm + 2 hours.\n\nANSWER: 05:00 PM or 06:00 PM", "answer is '05:00 PM or 06:00 PM', expected"),
    (TOOL_STYLES, ("final", "Here are the details you asked for.\n" + FINAL + "\n" + '{"amount": 176.03, "currency": "CAD"}'),
     FORMAT + " text after the JSON object: a second JSON object"),
    (TOOL_STYLES, ("final", "120 EUR is 176.30 CAD.\n" + FINAL + "\nOr 176.03 at today's rate."),
     FORMAT + " text after the JSON object: \"Or 176.03 at today's rate.\""),
    (TOOL_STYLES, ("final", "120 EUR is 176.30 CAD.\nThe rate is 1.469.\n" + FINAL), FORMAT + " 2 lines of text before the JSON object"),
    (TOOL_STYLES, ("final", "```json\n" + FINAL + "\n```\n```json\n" + '{"amount": 176.03, "currency": "CAD"}' + "\n```"),
     FORMAT + " text after the JSON object: a second JSON object"),
    (TOOL_STYLES, ("final", "Here are the details you asked for.\n" + FINAL + "\nLet me know if you need anything else!"),
     FORMAT + " text after the JSON object"),
    (RECALL, ("trip_booking", "Here are the details you asked for.\n" + PLAIN_TRIP + "\n" + PLAIN_TRIP),
     FORMAT + " text after the JSON object: a second JSON object"),
    (RECALL, ("trip_booking", "Here are the details you asked for.\n" + PLAIN_TRIP + "\nCorrection: my hotel is the Aurora."),
     FORMAT + " text after the JSON object: 'Correction"),
    (RECALL, ("lab_samples", "Here is the object for {batch, freezer}:\n" + PLAIN_LAB), FORMAT + " not one JSON object"),
]


# -- parsers: a forced answer read back by the deployment's parsers (graders/parsers.py exactness) ----
# The model's text is forced, so the styles here are the parsers' ways of handing it back: JSON text
# spaced, ordered or escaped another way, numbers written 3 or 3.0, the template's line breaks beside
# calls or reasoning; and their near misses: a boolean read as 1, markup left in the content, a lost
# call, reasoning left in the content, a held-back whitespace answer dropped.


def _parsers(answer: tuple[str, tuple[Any, ...]]) -> Verdict:
    from pytest_qualify.graders.parsers import Seen, exactness

    case, (content, reasoning, calls, finish) = answer
    problem = exactness(PARSER_CASES[case], Seen(content, reasoning, tuple(calls), finish))
    return Verdict.accept("exact") if problem is None else Verdict.reject(problem)


def _parser_cases() -> dict[str, Any]:
    from pytest_qualify.graders.parsers import Expected

    return {
        "call": Expected((("get_weather", {"city": 'Lisbon <&> "Old" Town', "days": 3, "metric": True}),), None, None),
        "after_content": Expected((("set_thermostat", {"room": "bedroom", "temperature": 21.5}),), "Checking.", None),
        "reasoning": Expected((), "4", "The user wants 2+2."),
        "held": Expected((), "  \n", None),
    }


PARSER_CASES = _parser_cases()
CALL_ARGS = '{"city": "Lisbon <&> \\"Old\\" Town", "days": 3, "metric": true}'
PARSERS = Styles(
    "parsers", _parsers,
    correct=[
        ("call", (None, None, [("get_weather", CALL_ARGS)], "tool_calls")),
        ("call", ("", None, [("get_weather", '{ "metric" : true , "days" : 3,\n "city" : "Lisbon <&> \\"Old\\" Town" }')], "tool_calls")),
        ("call", (None, None, [("get_weather", '{"city": "Lisbon <&> \\"Old\\" Town", "days": 3.0, "metric": true}')], "tool_calls")),
        ("call", (None, None, [("get_weather", '{"city": "\\u004cisbon \\u003c&\\u003e \\"Old\\" Town", "days": 3, "metric": true}')], "tool_calls")),
        ("call", ("\n", None, [("get_weather", CALL_ARGS)], "tool_calls")),
        ("after_content", ("Checking.", None, [("set_thermostat", '{"room": "bedroom", "temperature": 21.5}')], "tool_calls")),
        ("after_content", ("Checking.\n\n", None, [("set_thermostat", '{"temperature": 21.50, "room": "bedroom"}')], "tool_calls")),
        ("reasoning", ("4", "The user wants 2+2.", [], "stop")),
        ("reasoning", ("\n\n4", "The user wants 2+2.\n", [], "stop")),
        ("held", ("  \n", None, [], "stop")),
    ],
    near_misses=[
        (("call", (None, None, [("get_weather", CALL_ARGS.replace("true", "1"))], "tool_calls")), "call 0 (get_weather): .metric 1 instead of true"),
        (("call", (None, None, [("get_weather", CALL_ARGS.replace("<&>", "&lt;&amp;&gt;"))], "tool_calls")), "call 0 (get_weather): .city"),
        (("call", (None, None, [("get_weather", CALL_ARGS)], "stop")), "finish_reason 'stop' instead of 'tool_calls'"),
        (("call", ("<tool_call>\n" + CALL_ARGS + "\n</tool_call>", None, [], "stop")), "tool calls [] instead of ['get_weather']"),
        (("call", (None, None, [("get_weather", {"city": "Lisbon", "days": 3, "metric": True})], "tool_calls")), "are not JSON text"),
        (("after_content", ("Checking. </tool_call>", None, [("set_thermostat", '{"room": "bedroom", "temperature": 21.5}')], "tool_calls")),
         "markup '</tool_call>' left in the content"),
        (("reasoning", ("The user wants 2+2.</think>\n\n4", None, [], "stop")), "reasoning null instead of 'The user wants 2+2.'"),
        (("reasoning", ("4", "The user wants 2+2.</think>\n\n4", [], "stop")), "reasoning 'The user wants 2+2.</think>"),
        (("held", ("", None, [], "stop")), "content '' instead of '  \\n'"),
        (("held", ("  ", None, [], "stop")), "content '  ' instead of '  \\n'"),  # a held line break dropped
    ],
)


# -- load: the mix's answers graded by graders/load.py grade_item, which must give each the verdict
# its own module gives it (the smoke, JSON and recall corpora above, routed through the load grader).

def _load_items() -> dict[tuple[str, str], Any]:
    from pytest_qualify.profiles import LOAD_MIX
    from pytest_qualify.tasks.load import load_items

    return {(item.module, item.id): item for item in load_items(LOAD_MIX)}


LOAD_ITEMS = _load_items()
_LOAD_ROUTES = {"smoke": SMOKE, "json": JSON, "recall": RECALL}


def _load(answer: tuple[str, tuple[str, Any]]) -> Verdict:
    from pytest_qualify.graders.load import grade_item

    module, (item_id, content) = answer
    item = LOAD_ITEMS[(module, item_id)]
    text = content if isinstance(content, str) else json.dumps(content)
    return grade_item(item, Answer(text, None, (), "stop", {"completion_tokens": 5}, False))


LOAD = Styles(
    "load", _load,
    correct=[(m, a) for m, styles in _LOAD_ROUTES.items() for a in styles.correct if (m, a[0]) in LOAD_ITEMS],
    # An empty reply fails the finish state before any grader, under load as in its module.
    near_misses=[((m, a), why) for m, styles in _LOAD_ROUTES.items() for a, why in styles.near_misses
                 if (m, a[0]) in LOAD_ITEMS and a[1] != ""] + [(("smoke", ("capital", "")), "finish state: ")],
)


def test_the_load_grader_gives_every_routed_reply_its_own_modules_verdict():
    # Under load an answer is graded exactly as in its module: same verdict, same reason.
    for module, styles in _LOAD_ROUTES.items():
        routed = [a for a in list(styles.correct) + [a for a, _ in styles.near_misses]
                  if (module, a[0]) in LOAD_ITEMS and a[1] != ""]
        assert routed, module
        for reply in routed:
            own, under_load = styles.grade(reply), _load((module, reply))
            assert (own.ok, own.reason) == (under_load.ok, under_load.reason), (module, reply)


CORPUS = (SMOKE, JSON, CONTEXT, WINDOW, TOOL_STYLES, RECALL, REASONING, FINISH, ROBUSTNESS, INTEGRITY, LOAD)
# Graders of modules that may stand outside the protocol's contract and still read an answer: their
# corpus is held all the same, whether or not modules.toml counts them in the protocol.
BEYOND = (PARSERS,)
# The structured modules' corpus lives in tests/graders/test_answer_styles_structured.py.
STRUCTURED = ("multimodal", "media_admission", "diff", "triage")
CORRECT = [(s, a) for s in CORPUS + BEYOND for a in s.correct] + [(s, a) for s, a, why in MODEL_STYLES if why is None]
NEAR_MISSES = ([(s, a, why) for s in CORPUS + BEYOND for a, why in s.near_misses]
               + [(s, a, why) for s, a, why in MODEL_STYLES if why is not None])


def test_every_module_has_its_corpus():
    # A module outside the protocol's contract (the sweep: it measures, and grades no answer) has no corpus.
    modules = [m["id"] for m in tomllib.loads((Path(__file__).parents[2] / "pytest_qualify" / "modules.toml").read_text())["module"]
               if m.get("protocol", True)]
    covered = {s.module for s in CORPUS + BEYOND}
    assert set(modules) - set(STRUCTURED) <= covered, sorted(set(modules) - set(STRUCTURED) - covered)
    assert {s.module for s in CORPUS} <= set(modules)
    for styles in CORPUS + BEYOND:
        assert len(styles.correct) >= MIN_CORRECT, styles.module
        assert len(styles.near_misses) >= MIN_NEAR_MISSES, styles.module


@pytest.mark.parametrize("styles,answer", CORRECT, ids=[s.label(a) for s, a in CORRECT])
def test_correct_answer_passes(styles, answer):
    styles.assert_accepts(answer)


@pytest.mark.parametrize("styles,answer,why", NEAR_MISSES, ids=[s.label(a) for s, a, _ in NEAR_MISSES])
def test_near_miss_fails_with_its_reason(styles, answer, why):
    styles.assert_rejects(answer, why)
