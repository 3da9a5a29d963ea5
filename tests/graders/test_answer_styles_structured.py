"""The answer-style corpus of the structured modules — multimodal, media_admission, diff, triage —
under the answer contract: per module, correct replies written the way capable models write them
(extra JSON whitespace, another key order, a fence, a preamble line ending in a colon, numbers as
strings, a unit after seconds) that must pass, and near misses (a wrong value in a field, a hedge in
a field, swapped fields, a missing field, two JSON objects, prose instead of the contract) that must
fail for the stated reason. Each reply is graded by the same call its suite makes, on the suite's
own data. (The other modules' corpus lives in tests/graders/test_answer_styles.py.)
"""

from __future__ import annotations

import difflib
import json
from typing import Any

import pytest

from ..helpers import Styles
from pytest_qualify.tasks import fixture_data
from pytest_qualify.tasks.corpus import load_manifest
from pytest_qualify.graders import Verdict
from pytest_qualify.graders.diff import grade_diff_answer
from pytest_qualify.graders.media import grade_count, grade_event_call, grade_item, grade_limit_refusal, grade_refusal
from pytest_qualify.graders.triage import grade_triage

MIN_CORRECT = 10
MIN_NEAR_MISSES = 6
MODULES = ("multimodal", "media_admission", "diff", "triage")


def _json(obj: dict[str, Any], **dumps: Any) -> str:
    return json.dumps(obj, **dumps)


# -- multimodal: one JSON object per item, each fact in its own field -----------------------------------

MANIFEST = load_manifest()


def _item(answer: tuple[str, str]) -> Verdict:
    item_id, content = answer
    item = MANIFEST.item(item_id)
    return grade_item(item.id, content, item.contract, finish_reason="stop")


MULTIMODAL = Styles(
    "multimodal", _item,
    correct=[
        ("image-01", '{"red_circles": 3}'),
        # The "There are 3 red circles (2 in the top row, 1 in the bottom row)." in the
        # contract's shape: the remark is a preamble line, the count is its field.
        ("image-01", 'There are 3 red circles (2 in the top row, 1 in the bottom row):\n```json\n{"red_circles": 3}\n```'),
        ("mixed-04", '{\n    "white_flashes" : 2,\n    "black_squares" : 5\n}'),
        ("video-13", '```json\n{"event": "ALERT", "start_s": 2, "end_s": 3}\n```'),
        ("video-13", '{"event":"alert","start_s":"2 s","end_s":"3 seconds"}'),
        ("video-13", '{ "end_s": 3.5, "start_s": 2.4, "event": "Alert" }'),  # "~2 s to ~3 s", within 0.5 s
        ("video-14", 'Here is the JSON:\n{"event": "alert", "start_s": 3.0, "end_s": 4.5}'),
        ("image-12", '{"half": "Bottom"}'),
        ("image-05", '```\n{"direction": "LEFT"}\n```'),
        ("mixed-01", '{"square_colour": "green",\n "dot_direction": "right"}'),
        ("image-09", '{"number": "42"}'),
        ("mixed-02", '{"end_colour": "Blue", "image_word": "stop"}'),
        # CRLF line ends; a final period or quotes inside a field are noise, as around a whole reply.
        ("image-01", '```json\r\n{"red_circles": 3}\r\n```\r\n'),
        ("image-02", '{"colour": "Blue."}'), ("image-03", '{"word": "\\"OPEN\\""}'),
        # One line of prose before the object, fenced or not, a colon at its end or not (GPT-4o, Claude).
        ("image-01", 'I count three red circles in the image.\n{"red_circles": 3}'),
        ("image-01", 'Here are the details you asked for.\n\n```json\n{"red_circles": 3}\n```'),
        ("video-13", 'The red ALERT banner appears at about 2 s and is gone by 3 s. {"event": "alert", "start_s": 2, "end_s": 3}'),
        ("mixed-04", '**Counts**\n```json\n{"black_squares": 5, "white_flashes": 2}\n```'),
    ],
    near_misses=[
        # The "2 squares, 5 flashes" (truth: 5 squares, 2 flashes), swapped into the fields.
        (("mixed-04", '{"black_squares": 2, "white_flashes": 5}'), "field 'black_squares' is '2', expected '5'"),
        # The "ALERT from 2 to 3 seconds, or maybe 2 to 4": a hedge in a field.
        (("video-13", '{"event": "alert", "start_s": 2, "end_s": "3 or maybe 4"}'), "holds 2 candidates"),
        (("video-13", '{"event": "alert", "start_s": "2 or 3", "end_s": 3}'), "holds 2 candidates"),
        (("video-13", '{"event": "alert", "start_s": 2, "end_s": 4}'), "field 'end_s' is '4', expected '3.0' (tolerance 0.5)"),
        (("video-14", '{"event": "info", "start_s": 3, "end_s": 4.5}'), "field 'event' is 'info', expected 'alert'"),
        (("image-12", '{"half": "top"}'), "field 'half' is 'top', expected 'bottom'"),
        (("image-05", '{"direction": "left or right"}'), "field 'direction' is 'left or right'"),
        (("image-01", '{"red_circles": "~3"}'), "field 'red_circles' '~3' holds more than the number"),
        (("video-13", '{"event": "alert", "start_s": "~2", "end_s": 3}'), "field 'start_s' '~2' holds more than the number"),
        (("video-13", '{"start_s": 2, "end_s": 3}'), "format: JSON does not match the answer schema at the object: 'event' is a required property"),
        (("image-01", '{"red_circles": 3}\n{"red_circles": 2}'), "format: text after the JSON object"),
        (("image-01", 'Here are the details you asked for.\n{"red_circles": 3}\n{"red_circles": 2}'),
         "format: text after the JSON object: a second JSON object"),
        (("image-01", 'I count three red circles.\n```json\n{"red_circles": 3}\n```\nActually, there may be 2.'),
         "format: text after the JSON object: 'Actually, there may be 2.'"),
        (("image-01", 'I count three red circles.\nOne is partly hidden.\n{"red_circles": 3}'),
         "format: 2 lines of text before the JSON object"),
        (("image-01", "There are 3 red circles."), "format: not one JSON object"),
        (("video-13", "The banner shows ALERT from 2 to 3 seconds."), "format: not one JSON object"),
    ],
)

# -- media admission: the count at the limit, refusals, tools and streaming with video ----------------

TOOL = MANIFEST.tool_case
TOOL_ITEM = MANIFEST.item(TOOL.item)
STREAM_ITEM = MANIFEST.item(MANIFEST.stream_item)


def _admission(answer: tuple[str, Any]) -> Verdict:
    kind, reply = answer
    if kind == "count":  # four images attached, at the 262k profile's limit
        return grade_count(reply, 4)
    if kind == "limit":
        return grade_limit_refusal(400, reply, kind="image", limit=4, sent=5)
    if kind == "malformed":
        status, message = reply
        return grade_refusal(status, message, case="text-as-image (image_url, image/png)")
    if kind == "tool":
        return grade_event_call([(TOOL.function["name"], json.dumps(call)) for call in reply], function=TOOL.function,
                                event=TOOL.event, interval_s=TOOL_ITEM.interval_s, tolerance_s=TOOL.tolerance_s)
    return grade_item(STREAM_ITEM.id, reply, STREAM_ITEM.contract, finish_reason="stop")


MEDIA_ADMISSION = Styles(
    "media_admission", _admission,
    correct=[
        ("count", "4"), ("count", "**4**"), ("count", "Answer: 4"), ("count", "4."), ("count", "```\r\n4\r\n```"),
        ("limit", "At most 4 image(s) may be provided in one prompt."),
        ("limit", "You may provide at most four images per request."),
        ("malformed", (400, "Failed to load image: cannot identify image file <_io.BytesIO object>")),
        ("tool", [{"event": "alert", "start_s": 2, "end_s": 3}]),
        ("tool", [{"end_s": 3.4, "start_s": 2.5, "event": "alert"}]),
        ("stream", '```json\n{\n  "event": "alert",\n  "start_s": 3,\n  "end_s": 4.5\n}\n```'),
        ("stream", '{"end_s": "4.5 s", "start_s": "3 s", "event": "ALERT"}'),
    ],
    near_misses=[
        (("count", "5"), "count is '5', expected '4'"),
        (("count", "4 or 5"), "holds 2 candidates"),
        (("count", "~4"), "count '~4' holds more than the number"),
        (("count", "There are 4 images.\nThe first shows circles."), "format: the reply must be the answer alone"),
        (("limit", "At most 5 image(s) may be provided in one prompt."), "does not name '4'"),
        (("malformed", (500, "Internal Server Error")), "HTTP 500 (server error)"),
        (("malformed", (200, "")), "accepted with HTTP 200"),
        (("tool", [{"event": "info", "start_s": 2, "end_s": 3}]), "event 'info' is not 'alert'"),
        (("tool", [{"event": "alert", "start_s": 2, "end_s": 3}] * 2), "expected one call"),
        (("stream", '{"event": "alert", "start_s": 3}'), "format: JSON does not match the answer schema"),
        (("stream", "The red banner shows ALERT between 3.0 s and 4.5 s."), "format: not one JSON object"),
    ],
)

# -- diff: the python_function case --------------------------------------------------------------------

DIFF_CASE = next(c for c in fixture_data.diff_cases() if c.id == "python_function")


def _unified(target: str, *, prefixes: bool = True, context: int = 3, source: str = DIFF_CASE.source) -> str:
    old, new = (f"a/{DIFF_CASE.path}", f"b/{DIFF_CASE.path}") if prefixes else (DIFF_CASE.path, DIFF_CASE.path)
    return "".join(difflib.unified_diff(source.splitlines(True), target.splitlines(True), old, new, n=context))


GOOD_DIFF = _unified(DIFF_CASE.expected)
DIFF = Styles(
    "diff", lambda content: grade_diff_answer(content, DIFF_CASE.source, DIFF_CASE.path, DIFF_CASE.expected),
    correct=[
        GOOD_DIFF,
        f"```diff\n{GOOD_DIFF}```",
        f"```\n{GOOD_DIFF}```",
        f"```patch\n{GOOD_DIFF}```",
        _unified(DIFF_CASE.expected, prefixes=False),
        f"Here is the diff:\n\n```diff\n{GOOD_DIFF}```",
        f"Patch:\n{GOOD_DIFF}",
        f"diff --git a/{DIFF_CASE.path} b/{DIFF_CASE.path}\nindex 1a2b3c4..5d6e7f8 100644\n{GOOD_DIFF}",
        GOOD_DIFF.rstrip("\n"),
        _unified(DIFF_CASE.expected, context=1),
        f"\n```diff\n{GOOD_DIFF}```\n\n",
        # CRLF line ends (the patch applies to the LF file), a tilde fence.
        f"```diff\r\n{GOOD_DIFF}```\r\n".replace("\n", "\r\n").replace("\r\r", "\r"),
        f"~~~diff\n{GOOD_DIFF}~~~",
    ],
    near_misses=[
        (_unified(DIFF_CASE.expected.replace("<= 100", "< 100")), "differs from the expected file"),
        (_unified(DIFF_CASE.expected.replace("        raise ValueError", "    raise ValueError")), "differs from the expected file"),
        (_unified(DIFF_CASE.source, source=DIFF_CASE.expected), "rejects the diff"),
        # Context the model misremembered: git finds no place the hunk fits.
        (GOOD_DIFF.replace(' """Price after a percentage discount."""', ' """Price after discount."""'), "rejects the diff"),
        (f"Here is the diff:\n\n```diff\n{GOOD_DIFF}```\n\nIt validates the percent and rounds the result.",
         "format: text after the diff: 'It validates the percent and rounds the result.'"),
        (f"I added the range check.\nThen I changed the rounding.\n\n{GOOD_DIFF}", "format: text before the diff"),
        (f"```diff\n{GOOD_DIFF}```\n\n```diff\n{GOOD_DIFF}```", "format: a second diff after the first"),
        ("I added the range check and the rounding as requested.", "format: no unified diff"),
    ],
)

# -- triage --------------------------------------------------------------------------------------------

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
        # The causes: a ruled-out cause is no claim, and the cause is never graded anyway.
        ("checkout_pool", _pool(cause="Timeouts are caused by orders-pool exhaustion, not by slow queries.")),
        ("checkout_pool", _pool(cause="orders-pool is exhausted (active=20, waiting=52); there is no evidence of slow queries")),
        ("checkout_pool", "The timeouts trace back to checkout-service:\n\n```json\n" + _json(_pool(), indent=2) + "\n```"),
        ("checkout_pool", _pool(component="checkout service", evidence_line="leak detection: connection held 41000ms without release")),
        ("inventory_gc", _json(dict(reversed(list(_gc().items()))), indent=4)),
        ("inventory_gc", _gc(evidence_line="... heap used 7.8G of 8.0G ...")),
        ("inventory_gc", _gc(component="Inventory_Service", evidence_line=GC.evidence[1].replace("  ", " "))),
        ("billing_lock", _lock()),
        ("billing_lock", _lock(component="Billing-DB", category="Lock Contention",
                               evidence_line="statement from deploy-bot: ALTER TABLE invoices ADD COLUMN tax_region ...")),
        ("billing_lock", "```json\n" + _json(_lock(), separators=(" , ", " : ")) + "\n```"),
        ("checkout_pool", "```json\r\n" + _json(_pool(category="Connection-pool exhaustion.")) + "\r\n```"),
        ("checkout_pool", "Here is the triage of the incident.\n" + _json(_pool())),
        ("billing_lock", "The lock is taken by the deploy bot's migration.\n\n```json\n" + _json(_lock(), indent=2) + "\n```"),
    ],
    near_misses=[
        (("checkout_pool", _pool(component="payments-service")), "'payments-service' is a red herring"),
        (("inventory_gc", _gc(category="slow downstream dependency")), "category 'slow downstream dependency' is wrong"),
        (("checkout_pool", _pool(evidence_line=next(line for line in POOL.log_lines if "[api-gateway] upstream" in line))),
         "does not show the cause"),
        (("checkout_pool", _pool(component="checkout-service or orders-db")), "component 'checkout-service or orders-db' is not 'checkout-service'"),
        (("checkout_pool", _pool(category="connection-pool exhaustion or lock contention")), "is not one of the listed categories"),
        (("checkout_pool", _pool(component="connection-pool exhaustion", category="checkout-service")),
         "component 'connection-pool exhaustion' is not 'checkout-service'"),
        (("billing_lock", {"component": "billing-db", "cause": "Inserts are blocked", "evidence_line": LOCK.evidence[0]}),
         "format: JSON does not match the answer schema at the object: 'category' is a required property"),
        (("checkout_pool", _json(_pool()) + "\n" + _json(_pool(component="orders-db"))), "format: text after the JSON object"),
        (("checkout_pool", "The checkout-service pool is exhausted.\n\n```json\n" + _json(_pool()) + "\n```\nHope this helps."),
         "format: "),
        (("checkout_pool", "checkout-service: orders-pool connection-pool exhaustion."), "format: not one JSON object"),
        (("checkout_pool", "Here is the triage of the incident.\n" + _json(_pool()) + "\n" + _json(_pool(component="orders-db"))),
         "format: text after the JSON object: a second JSON object"),
        (("billing_lock", "Here is the triage.\n" + _json(_lock()) + "\nOn reflection the category is deadlock."),
         "format: text after the JSON object: 'On reflection"),
    ],
)

CORPUS = (MULTIMODAL, MEDIA_ADMISSION, DIFF, TRIAGE)
CORRECT = [(s, a) for s in CORPUS for a in s.correct]
NEAR_MISSES = [(s, a, why) for s in CORPUS for a, why in s.near_misses]


def test_every_structured_module_has_its_corpus():
    assert tuple(s.module for s in CORPUS) == MODULES
    for styles in CORPUS:
        assert len(styles.correct) >= MIN_CORRECT, styles.module
        assert len(styles.near_misses) >= MIN_NEAR_MISSES, styles.module
        # Near misses of both kinds: a wrong fact, and a reply that breaks the contract.
        reasons = [why for _, why in styles.near_misses]
        assert any(r.startswith("format:") for r in reasons) and any(not r.startswith("format:") for r in reasons), styles.module


@pytest.mark.parametrize("styles,answer", CORRECT, ids=[s.label(a) for s, a in CORRECT])
def test_correct_answer_passes(styles, answer):
    styles.assert_accepts(answer)


@pytest.mark.parametrize("styles,answer,why", NEAR_MISSES, ids=[s.label(a) for s, a, _ in NEAR_MISSES])
def test_near_miss_fails_with_its_reason(styles, answer, why):
    styles.assert_rejects(answer, why)
