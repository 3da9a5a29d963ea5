"""The media graders: strict corpus assertions, intervals, refusals and tool calls from video.

Unit tests pin the documented decisions; hypothesis property tests check what must be accepted
(code fences, prose around the answer, case/whitespace variants, numbers in words, every interval
notation) and what must be rejected (near misses, distractors, empty, truncated answers).
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_qualify.graders.media import (
    find_intervals,
    grade_event_call,
    grade_interval,
    grade_item,
    grade_limit_refusal,
    grade_refusal,
    grade_words,
    mentions,
)

# Per-test settings, never a global hypothesis profile: other test files share the session.
PROPERTY = settings(max_examples=80)

# -- word rules ------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["alert", "ALERT", "Alert!", "**alert**", "alerts", "alert's", "non-alert", "an Alert."])
def test_required_word_accepted_forms(text):
    assert mentions(text, "alert")


@pytest.mark.parametrize("text", ["nonalert", "alerting", "alerted", "aler t", "alrt", "allert", "", "salert"])
def test_required_word_rejected_near_misses(text):
    assert not mentions(text, "alert")


@pytest.mark.parametrize("word, plural", [("circle", "circles"), ("box", "boxes"), ("sky", "skies")])
def test_regular_plurals_count(word, plural):
    assert mentions(f"I see {plural}.", word)


@pytest.mark.parametrize("text", ["5", "five", "Five", "5.0", "05", "FIVE triangles"])
def test_numbers_in_any_notation(text):
    assert mentions(text, "5")


@pytest.mark.parametrize("text", ["15", "4", "5.5", "fifteen", "55"])
def test_numbers_must_be_equal(text):
    assert not mentions(text, "5")


def test_compound_number_words():
    assert mentions("forty-two", "42") and mentions("Forty two", "42") and not mentions("forty", "42")


def test_alternatives():
    assert mentions("It moves upwards.", "up|upward|upwards")
    assert not mentions("It moves down.", "up|upward|upwards")


def test_grade_words_reasons_name_each_failure():
    verdict = grade_words("It is red.", ["blue"], ["red"])
    assert not verdict.ok
    assert "missing required word 'blue'" in verdict.reason
    assert "forbidden word 'red' present" in verdict.reason


def test_grade_words_empty():
    assert grade_words("  ", ["x"]).reason == "empty answer"
    assert grade_words(None, ["x"]).reason == "empty answer"


# -- intervals -------------------------------------------------------------------------------------

ACCEPTED_FORMS = [
    "2–3 s", "2-3 seconds", "from 2 to 3 seconds", "between 2 s and 3 s", "00:02–00:03",
    "2.0 to 3.0 s", "2s-3s", "0:02 - 0:03", "from two to three seconds", "between 2 and 3 seconds",
    "seconds 2 to 3", "2 s to 3 s", "it appears at 2 s and disappears at 3 s", "starts at 2.0 s and ends at 3.0 s",
    "from t=2 to t=3 s", "2 — 3 sec",
]


@pytest.mark.parametrize("form", ACCEPTED_FORMS)
def test_interval_forms_accepted(form):
    assert grade_interval(f"The ALERT banner is visible {form}.", (2.0, 3.0), 0.5).ok, find_intervals(form)


@pytest.mark.parametrize("form", ["3–4 s", "from 1 to 2 seconds", "00:03–00:04", "between 2 s and 4 s", "0.5-1.5 s"])
def test_wrong_interval_rejected(form):
    verdict = grade_interval(f"ALERT is shown {form}.", (2.0, 3.0), 0.5)
    assert not verdict.ok
    assert "is not 2–3 s" in verdict.reason


def test_hedged_intervals_rejected():
    verdict = grade_interval("ALERT from 2 to 3 s, or maybe from 3 to 4 s.", (2.0, 3.0), 0.5)
    assert not verdict.ok and "also" in verdict.reason


def test_no_interval_rejected():
    assert "names no time interval" in grade_interval("ALERT appears at some point.", (2.0, 3.0), 0.5).reason
    # A bare pair without a unit or a preposition is not read as a time interval.
    assert not find_intervals("banners 2-3")


def test_tolerance_bounds():
    assert grade_interval("from 2.5 to 3.5 s", (2.0, 3.0), 0.5).ok
    assert not grade_interval("from 2.6 to 3 s", (2.0, 3.0), 0.5).ok


def test_clock_times_with_hours():
    assert find_intervals("00:00:02 to 00:00:03") == [(2.0, 3.0)]


# -- the item grader -------------------------------------------------------------------------------


def _event(content, finish="stop"):
    return grade_item("video-13", content, required=["alert"], interval_s=(2.0, 3.0), tolerance_s=0.5, finish_reason=finish)


def test_item_missing_alert_reason():
    # The promotion record's failure: the interval right, the word "alert" missing.
    verdict = _event("The banner is shown from 2 to 3 seconds.")
    assert not verdict.ok
    assert verdict.reason.startswith("item video-13: missing required word 'alert'")


def test_item_accepts_full_answer():
    assert _event("The banner reads ALERT, visible from 00:02 to 00:03.").ok


def test_item_truncated_and_empty():
    assert "truncated" in _event("ALERT from 2 to 3 s", finish="length").reason
    assert _event("").reason == "item video-13: empty answer"


def test_item_forbidden_word():
    verdict = grade_item("image-02", "Blue, and red.", required=["blue"], forbidden=["red"])
    assert verdict.reason.startswith("item image-02: forbidden word 'red' present")
    # A forbidden word the answer itself negates is not claimed; a required one it negates is not said.
    assert grade_item("image-02", "Blue, not red.", required=["blue"], forbidden=["red"]).ok
    assert grade_item("image-12", "The bottom half (not the top half).", required=["bottom"], forbidden=["top"]).ok
    assert not grade_item("image-12", "No, it is in the top half.", required=["bottom"], forbidden=["top"]).ok
    negated = grade_item("image-02", "It is not blue.", required=["blue"])
    assert not negated.ok and "missing required word 'blue'" in negated.reason


# -- properties ------------------------------------------------------------------------------------

WORDS = ["alert", "circle", "square", "green", "vertical", "triangle", "fir"]
filler = st.text(alphabet=st.sampled_from("abcdefghij ,.;:!?\n\t"), max_size=40)
prose_prefix = st.sampled_from(["", "The answer is ", "I think it is: ", "Sure! ", "Looking at the video, "])
prose_suffix = st.sampled_from(["", ".", "!", " — that's it.", "\n\nLet me know if you need more."])


def _case_variant(draw, word):
    style = draw(st.sampled_from(["lower", "upper", "title", "mixed"]))
    if style == "mixed":
        flips = draw(st.lists(st.booleans(), min_size=len(word), max_size=len(word)))
        return "".join(c.upper() if f else c for c, f in zip(word, flips))
    return {"lower": word, "upper": word.upper(), "title": word.title()}[style]


@st.composite
def wrapped_word(draw):
    word = draw(st.sampled_from(WORDS))
    shown = _case_variant(draw, word)
    if draw(st.booleans()):
        shown += "s"
    text = draw(prose_prefix) + shown + draw(prose_suffix)
    wrap = draw(st.sampled_from(["{}", "```\n{}\n```", "```text\n{}\n```", "**{}**", "  {}  \n", '"{}"']))
    return word, wrap.format(text)


@PROPERTY
@given(wrapped_word())
def test_prop_required_word_survives_wrapping(case):
    word, text = case
    assert grade_words(text, [word]).ok


@PROPERTY
@given(st.sampled_from(WORDS), st.sampled_from(["non", "un", "x", "pre"]), st.sampled_from(["", "ing", "ed", "ish"]))
def test_prop_glued_near_misses_rejected(word, prefix, suffix):
    # A required word glued to other letters is another word, never the required one.
    assert not mentions(f"It is {prefix}{word}{suffix}.", word)
    if suffix:
        assert not mentions(f"It is {word}{suffix}.", word)


@PROPERTY
@given(st.sampled_from(WORDS), filler, filler)
def test_prop_forbidden_word_anywhere_rejects(word, before, after):
    verdict = grade_words(f"{before} {word.upper()} {after}", ["zzzz"] if word != "zzzz" else ["q"], [word])
    assert not verdict.ok and f"forbidden word '{word}' present" in verdict.reason


NUMBER_WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
                "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"]


@PROPERTY
@given(st.integers(min_value=0, max_value=19), st.sampled_from(["digits", "word", "decimal", "title"]))
def test_prop_numbers_written_differently(n, style):
    shown = {"digits": str(n), "word": NUMBER_WORDS[n], "decimal": f"{n}.0", "title": NUMBER_WORDS[n].title()}[style]
    assert mentions(f"There are {shown} of them.", str(n))
    assert not mentions(f"There are {shown} of them.", str(n + 1))


def _time_text(x: float, style: str) -> str:
    if style == "clock":
        whole = int(x)
        frac = x - whole
        return f"{whole // 60:02d}:{whole % 60:02d}" + (f"{frac:.1f}"[1:] if frac else "")
    return f"{x:g}" if style == "plain" else f"{x:.1f}"


INTERVAL_TEMPLATES = [
    "{a}–{b} s", "{a}-{b} seconds", "from {a} to {b} seconds", "between {a} s and {b} s",
    "{a} to {b} s", "from {a}s to {b}s", "{a} s - {b} s", "it appears at {a} s and disappears at {b} s",
]


@st.composite
def interval_case(draw):
    start = draw(st.integers(min_value=0, max_value=50)) / 2  # half seconds, as the corpus uses
    length = draw(st.integers(min_value=1, max_value=8)) / 2
    return start, start + length


@PROPERTY
@given(interval_case(), st.sampled_from(INTERVAL_TEMPLATES), st.sampled_from(["plain", "decimal"]), prose_prefix, prose_suffix)
def test_prop_interval_notations_accepted(truth, template, style, before, after):
    a, b = (_time_text(x, style) for x in truth)
    text = f"{before}ALERT {template.format(a=a, b=b)}{after}"
    assert grade_interval(text, truth, 0.5).ok, (text, find_intervals(text))


@PROPERTY
@given(interval_case())
def test_prop_clock_notation_accepted(truth):
    a, b = (_time_text(x, "clock") for x in truth)
    assert grade_interval(f"ALERT at {a}–{b}", truth, 0.5).ok


@PROPERTY
@given(interval_case(), st.sampled_from(INTERVAL_TEMPLATES), st.sampled_from([-2.0, -1.0, 1.0, 1.5, 3.0]), st.booleans())
def test_prop_shifted_interval_rejected(truth, template, shift, shift_start):
    a, b = truth
    a, b = (a + shift, b) if shift_start else (a, b + shift)
    if a < 0 or b <= a:
        return
    text = "ALERT " + template.format(a=f"{a:g}", b=f"{b:g}")
    assert not grade_interval(text, truth, 0.5).ok, text


@PROPERTY
@given(st.text(max_size=3).filter(lambda s: not s.strip()))
def test_prop_blank_answers_rejected(blank):
    assert not grade_item("x", blank, required=["alert"]).ok


@PROPERTY
@given(st.integers(min_value=1, max_value=25))
def test_prop_truncated_answer_rejected(cut):
    full = "The banner shows ALERT from 2 to 3 seconds."
    truncated = full[: min(cut, len(full) - 1)]
    verdict = _event(truncated, finish="length")
    assert not verdict.ok


# -- refusals --------------------------------------------------------------------------------------

VLLM_LIMIT = "At most 4 image(s) may be provided in one prompt."


def test_limit_refusal_accepts_vllm_wording():
    assert grade_limit_refusal(400, VLLM_LIMIT, kind="image", limit=4, sent=5).ok
    assert grade_limit_refusal(400, "At most 1 video(s) may be provided in one prompt.", kind="video", limit=1, sent=2).ok


@pytest.mark.parametrize("status, message, expect", [
    (200, "", "accepted with HTTP 200"),
    (500, "Internal Server Error", "HTTP 500 (server error)"),
    (422, "bad", "expected HTTP 400, got HTTP 422"),
    (400, "Too many images.", "does not name '4'"),
    (400, "At most 1 video(s) may be provided in one prompt.", "does not name '4'"),
])
def test_limit_refusal_rejects(status, message, expect):
    verdict = grade_limit_refusal(status, message, kind="image", limit=4, sent=5)
    assert not verdict.ok and expect in verdict.reason and verdict.reason.startswith("5 images (limit 4)")


def test_refusal_without_status():
    assert "no HTTP answer" in grade_refusal(None, "", case="x").reason


@PROPERTY
@given(st.integers(min_value=500, max_value=599))
def test_prop_any_server_error_is_not_a_refusal(status):
    assert not grade_refusal(status, "boom", case="truncated-mp4").ok


# -- tool calls from video -------------------------------------------------------------------------

FUNCTION = {
    "name": "report_event",
    "parameters": {
        "type": "object", "required": ["event", "start_s", "end_s"], "additionalProperties": False,
        "properties": {"event": {"type": "string", "enum": ["alert", "info", "none"]},
                       "start_s": {"type": "number"}, "end_s": {"type": "number"}},
    },
}


def _call(**args):
    return [("report_event", json.dumps(args))]


def _grade_call(calls):
    return grade_event_call(calls, function=FUNCTION, event="alert", interval_s=(2.0, 3.0), tolerance_s=0.5)


def test_event_call_accepted():
    assert _grade_call(_call(event="alert", start_s=2, end_s=3.0)).ok
    assert _grade_call(_call(event="alert", start_s=2.4, end_s=2.6)).ok


@pytest.mark.parametrize("calls, expect", [
    ([], "no tool call"),
    (_call(event="info", start_s=2, end_s=3), "event 'info' is not 'alert'"),
    (_call(event="alert", start_s=3, end_s=4), "start_s 3 is not 2 ± 0.5"),
    (_call(event="alert", start_s=2, end_s="3"), "violates the tool schema"),
    (_call(event="alert", start_s=2), "violates the tool schema"),
    (_call(event="warning", start_s=2, end_s=3), "violates the tool schema"),
    ([("report_event", "{not json")], "not JSON"),
    ([("other", "{}")], "called 'other'"),
    (_call(event="alert", start_s=2, end_s=3) * 2, "expected one call"),
])
def test_event_call_rejected(calls, expect):
    verdict = _grade_call(calls)
    assert not verdict.ok and expect in verdict.reason, verdict.reason


@PROPERTY
@given(st.floats(min_value=0, max_value=10, allow_nan=False), st.floats(min_value=0, max_value=10, allow_nan=False))
def test_prop_event_call_tolerance(start, end):
    verdict = _grade_call(_call(event="alert", start_s=start, end_s=end))
    assert verdict.ok == (abs(start - 2.0) <= 0.5 + 1e-9 and abs(end - 3.0) <= 0.5 + 1e-9)
