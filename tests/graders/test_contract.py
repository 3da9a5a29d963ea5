"""The answer contract's slot finders and exact comparison (graders/contract.py): what each form
accepts, what it rejects, and which rejections are format failures rather than wrong facts."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, strategies as st

from pytest_qualify.graders.contract import (
    UNIT_SPELLINGS, Accept, Contract, FormatError, block_slot, compare, grade, json_slot, line_slot, numbers_in,
    reply_slot,
)

PARIS = Contract("reply", Accept(("Paris",)), value_hint="one word")
SUM = Contract("line", Accept(("42",), kind="number"), value_hint="the number")
HOTELS = Contract(
    "json",
    fields={"my_hotel": Accept(("Hotel Aurora", "Aurora")), "sister_hotel": Accept(("Hotel Aurelia", "Aurelia"))},
    schema={"type": "object", "properties": {"my_hotel": {"type": "string"}, "sister_hotel": {"type": "string"}},
            "required": ["my_hotel", "sister_hotel"]},
)


@pytest.mark.parametrize("reply", [
    "Paris", "paris", "**Paris**", "Paris.", '"Paris"', "`Paris`", "```\nParis\n```",
    "Here is the answer:\nParis", "Answer: Paris", "**Answer:** *Paris*", "  _Paris_!  ", "- Paris",
])
def test_whole_reply_tolerates_formatting_noise(reply):
    assert grade(reply, PARIS).ok, grade(reply, PARIS).reason


@pytest.mark.parametrize("reply, fmt", [
    ("Lyon", False),
    ("Paris or Lyon", False),
    ("Paris, Lyon", False),
    ("Paris is France's largest city, but its capital is Lyon.", False),
    ("Paris\nLyon", True),
    ("", True),
    (None, True),
    ("The capital is:\nParis\n(also known as the City of Light)", True),
])
def test_whole_reply_rejects_anything_but_the_value(reply, fmt):
    verdict = grade(reply, PARIS)
    assert not verdict.ok
    assert verdict.is_format is fmt, verdict.reason


@pytest.mark.parametrize("reply", [
    "ANSWER: 42",
    "12 + 30 = 42, not 43 or 41.\nANSWER: 42",
    "Let me add: 12 plus 30.\n\n**ANSWER:** 42",
    "Working: 12 + 30 = 42\nANSWER: 42.",
    "Some people say 43. Wrong.\n\nANSWER: **42**\n",
    "ANSWER: 42.0",
])
def test_answer_line_reads_only_the_last_line(reply):
    assert grade(reply, SUM).ok, grade(reply, SUM).reason


@pytest.mark.parametrize("reply, fmt", [
    ("12 + 30 = 42. Wait, no: 43.\nANSWER: 43", False),
    ("ANSWER: 42 or 43", False),
    ("ANSWER: about 42", False),
    ("ANSWER: forty", True),
    ("42", True),
    ("ANSWER: 42\nANSWER: 43", True),
    ("ANSWER: 42\nHope this helps!", True),
    ("answer: 43\nANSWER: 42", True),  # a second answer line, whatever the case of its label
    ("ANSWER:", True),
])
def test_answer_line_rejections(reply, fmt):
    verdict = grade(reply, SUM)
    assert not verdict.ok
    assert verdict.is_format is fmt, verdict.reason


def test_json_slot_fields_are_graded_each_in_its_own_field():
    good = '{"sister_hotel": "Hotel Aurelia",   "my_hotel": "Hotel Aurora"}'
    assert grade(good, HOTELS).ok
    assert grade("```json\n" + good + "\n```", HOTELS).ok
    assert grade("Here you go:\n" + good, HOTELS).ok
    swapped = grade('{"my_hotel": "Hotel Aurelia", "sister_hotel": "Hotel Aurora"}', HOTELS)
    assert not swapped.ok and not swapped.is_format
    assert "my_hotel" in swapped.reason and "sister_hotel" in swapped.reason


@pytest.mark.parametrize("reply", [
    '{"my_hotel": "Hotel Aurora"}',  # schema: required field missing
    '{"my_hotel": "Hotel Aurora", "sister_hotel": 3}',  # wrong type
    '{"my_hotel": "Hotel Aurora", "sister_hotel": "Aurelia"} and that is all',
    '{"my_hotel": "Hotel Aurora", "my_hotel": "x", "sister_hotel": "Aurelia"}',
    "my hotel is the Aurora",
    "[1, 2]",
])
def test_json_slot_format_failures(reply):
    verdict = grade(reply, HOTELS)
    assert not verdict.ok and verdict.is_format, verdict.reason


def test_number_rules_are_data():
    money = Accept(("2350",), kind="number", units=("euros", "EUR"))
    assert compare("2,350 euros", money).ok
    assert compare("2350", money).ok
    assert not compare("2,350 dollars", money).ok
    assert not compare("2,350", Accept(("2350",), kind="number", thousands=False)).ok
    assert compare("\u221280", Accept(("-80",), kind="number")).ok
    assert not compare("80", Accept(("-80",), kind="number")).ok
    assert compare("2.4", Accept(("2",), kind="number", tolerance=0.5)).ok
    assert not compare("2.6", Accept(("2",), kind="number", tolerance=0.5)).ok
    assert not compare("50.2", Accept(("502",), kind="number")).ok
    assert compare(42, Accept(("42",), kind="number")).ok
    assert compare(2.0, Accept(("2",), kind="number")).ok


def test_text_rules_are_data():
    code = Accept(("7Q-5531",), separators=True)
    assert compare("7q 5531", code).ok
    assert not compare("7Q-5513", code).ok
    assert not compare("7q 5531", Accept(("7Q-5531",), case=True, separators=True)).ok
    assert not compare("Romania", Accept(("Rome",))).ok


def test_slot_finders_raise_format_errors():
    with pytest.raises(FormatError):
        reply_slot("a\nb")
    with pytest.raises(FormatError):
        line_slot("no answer line")
    with pytest.raises(FormatError):
        json_slot('{"a": 1} {"b": 2}')


def test_fixture_data_shapes():
    assert Accept.of(42).kind == "number"
    assert Accept.of(["Paris", "paris"]).forms == ("Paris", "paris")
    rule = Accept.of({"accept": [2], "tolerance": 0.5, "units": ["s"]})
    assert rule.kind == "number" and rule.tolerance == 0.5
    with pytest.raises(ValueError):
        Accept.of({"accept": [1], "fuzzy": True})
    with pytest.raises(ValueError):
        Accept(("abc",), kind="number")


_VALUE = st.from_regex(r"[A-Za-z][A-Za-z0-9]{0,11}", fullmatch=True)


@given(_VALUE, st.sampled_from(["{}", "**{}**", "*{}*", "`{}`", '"{}"', "{}.", "Answer: {}", "```\n{}\n```"]))
def test_any_accepted_value_in_noise_passes(value, wrap):
    assert grade(wrap.format(value), Contract("reply", Accept((value,)))).ok


@given(_VALUE, _VALUE)
def test_any_other_value_fails(value, other):
    if other.casefold() != value.casefold():
        assert not grade(other, Contract("reply", Accept((value,)))).ok
        assert not grade(f"{value} or {other}", Contract("reply", Accept((value,)))).ok
        assert not grade(f"ANSWER: {value}\nANSWER: {other}", Contract("line", Accept((value,)))).ok


@given(st.integers(-10**6, 10**6), st.sampled_from(["Working...\n", "", "x = 1\n\n"]))
def test_answer_line_numbers(n, working):
    contract = Contract("line", Accept((str(n),), kind="number"))
    assert grade(f"{working}ANSWER: {n}", contract).ok
    assert not grade(f"{working}ANSWER: {n + 1}", contract).ok


# -- block_slot: the whole reply as one block (a diff) ------------------------------------------------


@pytest.mark.parametrize("reply", [
    "--- a\n+++ b\n@@ -1 +1 @@\n-x\n+y",
    "```diff\n--- a\n+++ b\n@@ -1 +1 @@\n-x\n+y\n```",
    "Here is the patch:\n\n```\n--- a\n+++ b\n@@ -1 +1 @@\n-x\n+y\n```",
    "Patch:\n--- a\n+++ b\n@@ -1 +1 @@\n-x\n+y\n",
])
def test_block_slot_drops_one_fence_and_one_preamble_line(reply):
    assert block_slot(reply) == "--- a\n+++ b\n@@ -1 +1 @@\n-x\n+y"


def test_block_slot_leaves_what_is_around_the_block_to_its_grader():
    assert block_slot("```diff\nA\n```\nThat is all.") == "```diff\nA\n```\nThat is all."
    for empty in ("", None, "  \n", "```\n\n```"):
        with pytest.raises(FormatError, match="empty"):
            block_slot(empty, "a unified diff")


# -- contracts from fixture data, and the question that states one -----------------------------------

from pytest_qualify.graders.contract import Question  # noqa: E402


def test_a_contract_reads_from_fixture_data():
    reply = Contract.of({"form": "reply", "accept": [7], "value_hint": "the number in digits"})
    assert reply.accept == Accept(("7",), kind="number") and reply.instruction() == "Reply with the number in digits only."
    code = Contract.of({"form": "line", "accept": ["7Q-5531"], "separators": True})
    assert code.grade("The code, not 7Q-5513:\nANSWER: 7q 5531").ok
    hotels = Contract.of({"form": "json", "schema": HOTELS.schema, "fields": {"my_hotel": ["Hotel Aurora", "Aurora"]}})
    assert hotels.grade('{"my_hotel": "aurora", "sister_hotel": "x"}').ok
    worded = Contract.of({"form": "json", "schema": HOTELS.schema, "wording": "Reply as JSON: my_hotel, sister_hotel."})
    assert worded.instruction() == "Reply as JSON: my_hotel, sister_hotel."


@pytest.mark.parametrize("raw", [
    {"form": "prose", "accept": ["x"]},
    {"form": "reply"},
    {"form": "reply", "accept": ["x"], "negations": True},
    {"form": "json", "schema": {"type": "object"}, "accept": ["x"]},
])
def test_a_bad_contract_in_fixture_data_is_refused(raw):
    with pytest.raises(ValueError):
        Contract.of(raw)


def test_a_question_states_its_contract_and_grades_only_its_slot():
    q = Question("sum", "What is 12 plus 30?", SUM)
    assert q.prompt.startswith("What is 12 plus 30? ") and q.prompt.endswith("starts with 'ANSWER: ' and gives the number, with nothing after that line.")
    assert "<" not in q.prompt  # no placeholder for a model to copy
    assert q.grade("12 + 30 = 42, not 43.\nANSWER: 42").ok
    assert not q.grade("12 + 30 = 42. Wait, no: 43.").ok
    assert q.grade("12 + 30 = 42. Wait, no: 43.").is_format


# -- line ends, whitespace, hedges and struck-out values (found by writing replies to the prompts) -----


_REPLY = st.sampled_from([
    "Paris", "**Paris**", "Here is the answer:\nParis", "```\nParis\n```", "```text\nParis\n```", "Lyon", "Paris or Lyon",
    "Paris\nLyon", "~Paris", "~~Paris~~",
])
_LINE = st.sampled_from([
    "12 + 30 = 42\nANSWER: 42", "**ANSWER:** 42", "ANSWER: **42**", "```\n12 + 30\nANSWER: 42\n```", "ANSWER: 42 or 43",
    "ANSWER: 42\nANSWER: 43", "ANSWER: 42\nMore text.", "no line", "ANSWER: ~42", "ANSWER: 42?",
])
_OBJECT = st.sampled_from([
    '{"my_hotel": "Hotel Aurora", "sister_hotel": "Hotel Aurelia"}',
    '```json\n{\n  "sister_hotel": "Aurelia",\n  "my_hotel": "Aurora"\n}\n```',
    'Here it is:\n{"my_hotel": "Aurora", "sister_hotel": "Aurelia"}',
    '{"my_hotel": "Hotel Aurelia", "sister_hotel": "Hotel Aurora"}',
    '{"my_hotel": "Aurora"}\n{"my_hotel": "Aurelia"}',
    '{"my_hotel": "Aurora", "sister_hotel": "Aurelia"}\nHope this helps.',
])
_LINE_END = st.sampled_from(["\n", "\r\n", "\r"])
_TRAILING = st.sampled_from(["", " ", "  ", "\t", "\u00a0", "\n", "\r\n", " \n\n"])


def _rewritten(reply: str, line_end: str, trailing: str) -> str:
    return reply.replace("\n", line_end) + trailing


@given(st.one_of(_REPLY.map(lambda r: (r, PARIS)), _LINE.map(lambda r: (r, SUM)), _OBJECT.map(lambda r: (r, HOTELS))),
       _LINE_END, _TRAILING)
def test_line_ends_and_trailing_whitespace_never_change_a_verdict(case, line_end, trailing):
    """A CRLF (or CR) reply, or one with trailing spaces or newlines, gets the verdict and the kind
    of failure the plain reply gets: a line end is never part of a slot."""
    reply, contract = case
    plain, noisy = grade(reply, contract), grade(_rewritten(reply, line_end, trailing), contract)
    assert noisy.ok == plain.ok, (noisy.reason, plain.reason)
    assert noisy.is_format == plain.is_format, (noisy.reason, plain.reason)


@given(_VALUE, st.sampled_from(["~{}", "~~{}~~", "{}?", "~ {}", "{} (or {}x)", "{}, {}x"]))
def test_a_hedged_or_struck_out_value_is_never_accepted(value, hedge):
    """A tilde is a hedge ("~42") or a strikethrough ("~~42~~"), never formatting noise; nor is a
    question mark or a second candidate."""
    reply = hedge.format(value, value)
    assert not grade(reply, Contract("reply", Accept((value,)))).ok, reply
    assert not grade(f"Working.\nANSWER: {reply}", Contract("line", Accept((value,)))).ok, reply


@given(st.integers(1, 10**5), st.sampled_from(["~{}", "~~{}~~", "{}?", "≈{}", "about {}", "{}-{}", "{}/{}"]))
def test_a_hedged_number_is_never_accepted(n, hedge):
    contract = Contract("reply", Accept((str(n),), kind="number"))
    assert not grade(hedge.format(n, n + 1), contract).ok


def test_fences_in_any_line_end_and_tilde_fences_are_noise():
    assert grade("```text\r\nParis\r\n```", PARIS).ok
    assert grade("~~~\nParis\n~~~", PARIS).ok
    assert grade("12 + 30\r\n\r\nANSWER: 42\r\n", SUM).ok
    assert grade('```json\r\n{"my_hotel": "Aurora", "sister_hotel": "Aurelia"}\r\n```', HOTELS).ok
    assert block_slot("```diff\r\n--- a\r\n+++ b\r\n```") == "--- a\n+++ b"


def test_a_json_string_value_is_cleaned_of_the_same_noise_as_a_reply():
    # A final period, quotes or emphasis inside a field are noise; anything else in it is not.
    assert grade('{"my_hotel": "Hotel Aurora.", "sister_hotel": "\\u201cHotel Aurelia\\u201d"}', HOTELS).ok
    assert grade('{"my_hotel": "**Aurora**", "sister_hotel": "Aurelia"}', HOTELS).ok
    assert not grade('{"my_hotel": "Aurora (not Aurelia)", "sister_hotel": "Aurelia"}', HOTELS).ok
    assert not grade('{"my_hotel": "~Aurora", "sister_hotel": "Aurelia"}', HOTELS).ok
    # Accepted forms are cleaned alike: "5 p.m." as a form matches the slot "5 p.m." (its period is noise).
    assert grade("ANSWER: 5 p.m.", Contract("line", Accept(("5 p.m.",)))).ok
    assert grade("\u00a1Gracias!", Contract("reply", Accept(("\u00a1Gracias!",)))).ok


@given(st.integers(1_000, 10**9), st.sampled_from(["\u2009", "\u202f", "\u00a0"]), st.sampled_from(["", ".5", ".25"]),
       st.sampled_from(["reply", "line", "json"]))
def test_digits_grouped_by_thin_or_no_break_spaces_read_as_one_number_wherever_commas_do(n, space, decimals, form):
    """SI and French grouping ("1 234 567" with a thin or a (narrow) no-break space) is the
    number the comma grouping is, in every form; a rule that refuses commas refuses it too."""
    written = f"{n:,}".replace(",", space) + decimals
    value = f"{n}{decimals}"
    reply = {"reply": written, "line": f"Working.\nANSWER: {written}", "json": json.dumps({"n": written})}[form]
    contract = (Contract("json", fields={"n": Accept((value,), kind="number")}, schema={"type": "object"}) if form == "json"
                else Contract(form, Accept((value,), kind="number")))
    assert grade(reply, contract).ok, reply
    no_commas = Accept((value,), kind="number", thousands=False)
    assert not compare(written, no_commas).ok and not compare(f"{n:,}{decimals}", no_commas).ok
    assert numbers_in(written) == [f"{n:,}{decimals}"]


@pytest.mark.parametrize("written", [
    "2 350",                   # a plain space: two numbers
    "2\u202f35",               # a group of two
    "2350\u202f000",           # four digits before the group
    "2\u202f350\u00a0000",     # two kinds of space
    "2\u202f350\u202f00",      # a short last group
    "2,350\u202f000",          # a comma, then a space
])
def test_a_space_that_is_no_digit_grouping_never_joins_two_numbers(written):
    verdict = compare(written, Accept(("2350",), kind="number"))
    assert not verdict.ok and "candidates" in verdict.reason, verdict.reason
    assert len(numbers_in(written)) >= 2


@pytest.mark.parametrize("written,ok", [
    ("-80 °C", True), ("-80°C", True), ("-80 \u2103", True), ("-80°", True), ("-80 degrees", True), ("-80 degrees C", True),
    ("-80 deg. C", True), ("-80 Degrees Celsius", True), ("\u221280 \u00b0C", True), ("-80 C", False),
    ("-80 °F", False), ("-80 degrees Fahrenheit", False), ("-80 K", False), ("-80 °C (-112 °F)", False),
    ("-80 degrees C or -70", False), ("-80 °C°C", False), ("-8 degrees C", False), ("degrees -80 C", False),
    # the abbreviated spellings (pint's, UDUNITS'): a whole word, and a second number still two candidates
    ("-80 degC", True), ("-80degC", True), ("-80 DegC", True), ("-80 deg C", True), ("-80 deg.C", True),
    ("-80 degF", False), ("-80 degK", False), ("-80 degCC", False), ("-80 degsC", False), ("-80 Cdeg", False),
    ("-80 degC (-112 degF)", False), ("-80 degC or -70 degC", False), ("-8 degC", False),
])
def test_a_unit_written_out_or_as_a_symbol_reads_alike(written, ok):
    """A listed unit reads alike however it is spelt ("°C", "degrees C", "℃"; "degrees" and "°");
    another unit, a second number or anything else round the value is no unit."""
    celsius = Accept(("-80",), kind="number", units=("°C", "degrees"))
    assert compare(written, celsius).ok is ok, compare(written, celsius).reason


@pytest.mark.parametrize("written,ok", [
    ("-112 degF", True), ("-112 deg F", True), ("-112 \u2109", True), ("-112 degrees Fahrenheit", True),
    ("-112 °F", True), ("-112 degC", False), ("-112 deg", False), ("-112 degF (-80 degC)", False),
])
def test_each_spelling_reads_as_its_symbol_for_any_listed_unit(written, ok):
    """"degF" reads as "°F" as "degC" reads as "°C": the spellings are one table, not one unit's."""
    fahrenheit = Accept(("-112",), kind="number", units=("°F",))
    assert compare(written, fahrenheit).ok is ok, compare(written, fahrenheit).reason


@pytest.mark.parametrize("symbol,spelling", [(s, w) for s, ws in UNIT_SPELLINGS.items() for w in ws])
def test_every_listed_spelling_reads_as_its_symbol(symbol, spelling):
    unit = Accept(("7",), kind="number", units=(symbol,))
    for written in (f"7 {spelling}", f"7 {spelling.upper()}", f"{spelling} 7"):
        assert compare(written, unit).ok, written
    assert not compare(f"7 {spelling}x", unit).ok  # a spelling is a whole word
    assert not compare(f"7 {spelling} or 8 {spelling}", unit).ok


def test_a_listed_unit_may_precede_or_follow_the_number():
    money = Accept(("2350",), kind="number", units=("\u20ac", "EUR"))
    for written in ("\u20ac2,350", "\u20ac 2350", "EUR 2,350", "2,350 EUR", "2350\u20ac"):
        assert compare(written, money).ok, written
    for written in ("$2,350", "\u20ac2,530", "\u20ac2,350 or \u20ac2,530", "EUR", "\u20ac"):
        assert not compare(written, money).ok, written
    assert compare("\u221280 \u00b0C", Accept(("-80",), kind="number", units=("\u00b0C",))).ok


def test_the_brackets_of_a_copied_placeholder_are_noise_but_a_comparison_is_not():
    assert grade("ANSWER: <42>", SUM).ok
    assert grade("<Paris>", PARIS).ok
    for reply in ("ANSWER: <42", "ANSWER: < 42", "ANSWER: >42", "ANSWER: <41>", "ANSWER: <42> <43>"):
        assert not grade(reply, SUM).ok, reply


def test_a_markdown_mark_is_noise_in_a_reply_but_part_of_a_json_string():
    count = Contract("json", fields={"n": Accept(("4",), kind="number")},
                     schema={"type": "object", "properties": {"n": {"type": ["number", "string"]}}, "required": ["n"]})
    assert grade('{"n": "4."}', count).ok
    for value in ("> 4", "- 4", "# 4", "~4", "4?"):
        assert not grade(json.dumps({"n": value}), count).ok, value
    assert grade("> 4", Contract("reply", Accept(("4",), kind="number"))).ok  # a blockquote around a whole reply


def test_invisible_characters_and_fullwidth_labels_are_noise():
    assert grade("ANSWER: 42\u200b", SUM).ok
    assert grade("\ufeffParis", PARIS).ok
    assert grade("ANSWER\uff1a42", SUM).ok
    assert not grade("ANSWER\uff1a43", SUM).ok
    assert not grade("ANSWER: 42\nANSWER\uff1a43", SUM).ok  # still two answer lines


def test_a_format_failure_travels_as_a_field_and_keeps_its_words():
    # The kind is the verdict's field; the reason still says "format:" for the reader.
    missing = grade("no answer line here", SUM)
    assert missing.kind == "format" and missing.is_format and missing.reason.startswith("format: ")
    wrong = grade("ANSWER: 41", SUM)
    assert not wrong.ok and wrong.kind == "fact" and not wrong.is_format
    assert grade("ANSWER: 42", SUM).kind is None
    # Rewording (naming the case) keeps the kind; a reason that merely mentions "format:" is no kind.
    assert missing.reworded(f"case 3: {missing.reason}").kind == "format"
    from pytest_qualify.graders import Verdict

    assert Verdict.reject("the model said 'format: none'").kind == "fact"
    assert Verdict.all_failed([wrong, missing]).kind == "format"
    assert Verdict.all_failed([wrong, wrong]).kind == "fact"
    with pytest.raises(ValueError):
        Verdict(False, "x", "typo")


def test_the_length_band_measures_the_slot_and_what_follows_it_never_invited_working():
    from pytest_qualify.graders.contract import measured_span

    working = "12 + 30: add the tens, 10 + 30 = 40, then the units, 2, so 42. " * 7
    assert len(working) > 400
    assert measured_span(working + "\nANSWER: 42", SUM) == ("ANSWER: 42", "answer line")
    assert measured_span(working + "\n**Answer:** $42$\n", SUM) == ("**Answer:** $42$\n", "answer line")
    padded, what = measured_span("12 + 30 = 42.\nANSWER: 42" + " " * 1000, SUM)
    assert (len(padded), what) == (1010, "answer line")
    # No single answer line: nothing tells the working apart, the whole reply is measured.
    assert measured_span(working, SUM) == (working, "visible answer")
    assert measured_span("ANSWER: 41\n" + working + "\nANSWER: 42", SUM)[1] == "visible answer"
    planet = Contract.of({"form": "reply", "accept": ["Jupiter"]})
    assert measured_span("Jupiter" + " " * 1000, planet) == ("Jupiter" + " " * 1000, "visible answer")


# -- the rule as properties: what a reader of the prompt accepts never changes a verdict ------------

_SLOT_VALUE = st.one_of(
    st.integers(-10**4, 10**4).map(str),
    st.sampled_from(["42", "42.0", "43", "42 or 43", "~42", "about 42", "forty-two", "4 2", "Jupiter", "<42>"]),
)
_WORKING = st.sampled_from(["", "12 + 30 = 42.\n\n", "Step 1: 10 + 30 = 40.\nStep 2: 40 + 2 = 42.\n\n",
                            "| a | b |\n|---|---|\n| 12 | 30 |\n\n", "$$12 + 30 = 42$$\n\n"])


def _label(word: str, case: str) -> str:
    return {"upper": word.upper(), "lower": word.lower(), "title": word.title()}[case]


def _verdict(content: str, contract: Contract) -> tuple[bool, bool]:
    verdict = grade(content, contract)
    return verdict.ok, verdict.is_format


@given(_SLOT_VALUE, _WORKING, st.sampled_from(["upper", "lower", "title"]),
       st.sampled_from(["answer", "final answer", "the answer is", "the final answer is", "answer is"]),
       st.sampled_from(["{label}: {value}", "**{label}:** {value}", "**{label}**: {value}", "**{label}: {value}**",
                        "__{label}:__ {value}", "### {label}: {value}", "> {label}: {value}", "`{label}: {value}`"]))
def test_the_labels_case_and_emphasis_never_change_the_verdict(value, working, case, word, shape):
    written = working + shape.format(label=_label(word, case), value=value)
    assert _verdict(written, SUM) == _verdict(working + f"ANSWER: {value}", SUM), written
    # ... and a lower-case or emphasised label is still an answer line: a second one is a format failure.
    ok, fmt = _verdict(f"{_label(word, case)}: 43\n" + written, SUM)
    assert not ok and fmt


@given(_SLOT_VALUE, _WORKING, st.sampled_from(["${}$", "$${}$$", "\\({}\\)", "\\[{}\\]", "\\boxed{{{}}}", "$\\boxed{{{}}}$",
                                               "\\(\\boxed{{{}}}\\)", "**${}$**", "$\\text{{{}}}$"]))
def test_a_math_wrapper_round_a_value_gives_the_values_verdict(value, working, wrapper):
    wrapped = wrapper.format(value)
    assert _verdict(working + f"ANSWER: {wrapped}", SUM) == _verdict(working + f"ANSWER: {value}", SUM), wrapped
    reply = Contract("reply", Accept(("42",), kind="number"))
    assert grade(wrapped, reply).ok == grade(value, reply).ok, wrapped


_TAG = st.sampled_from(["answer", "ANSWER", "Answer", "final_answer", "final answer", "response", "result", "output"])


@given(_SLOT_VALUE, _WORKING, _TAG, st.sampled_from(["<{t}>{v}</{t}>", "<{t}>\n{v}\n</{t}>", "**<{t}>{v}</{t}>**",
                                                   "<{t}> {v} </{t}>", "<{t}>${v}$</{t}>"]))
def test_answer_tags_round_a_value_give_the_values_verdict(value, working, tag, shape):
    """Answer tags round the whole value are its label: the value's verdict, whether they stand after
    an ANSWER label, alone as the answer line, or round a whole reply."""
    wrapped = shape.format(t=tag, v=value)
    alone = _verdict(working + f"ANSWER: {value}", SUM)
    assert _verdict(working + f"ANSWER: {wrapped}", SUM) == alone, wrapped
    if tag.lower() in ("answer", "final_answer", "final answer"):  # the tags that label an answer line
        assert _verdict(working + wrapped, SUM) == alone, wrapped
    reply = Contract("reply", Accept(("42",), kind="number"))
    assert grade(wrapped, reply).ok == grade(value, reply).ok, wrapped


def test_a_steps_result_tags_in_the_working_are_no_second_answer_line():
    # Only the tags that name the answer label a line: a step's <result> or <output> is working.
    assert grade("Step 1: <result>40</result>\nStep 2: <output>2</output>\nANSWER: 42", SUM).ok
    assert grade("<result>40</result>\n<answer>42</answer>", SUM).ok
    assert not grade("<answer>40</answer>\n<answer>42</answer>", SUM).ok


@given(_TAG, st.sampled_from(["<{t}>42</{t}> <{t}>43</{t}>", "<{t}>42</{t}> or 43", "<{t}>42</{t}>\n<{t}>43</{t}>",
                              "<{t}>42</{t}>\nANSWER: 43", "ANSWER: 42\n<{t}>43</{t}>", "<{t}>42</{t}>\nActually 43",
                              "<{t}><{t}>42</{t}> 43</{t}>", "<{t}>\n42\n43\n</{t}>"]))
def test_answer_tags_never_hide_a_second_candidate(tag, shape):
    """Only one pair round one value is read: a second pair, a second answer line, text after it
    or a pair inside another is never the value alone."""
    reply = shape.format(t=tag)
    assert not grade(reply, SUM).ok, reply
    assert not grade(reply, Contract("reply", Accept(("42",), kind="number"))).ok, reply


@given(_SLOT_VALUE, st.sampled_from(["Actually 43", "Hope this helps!", "ANSWER: 43", "$\\boxed{43}$", "(or 43)", "answer: 42"]))
def test_any_text_after_the_answer_line_is_a_format_failure(value, after):
    for label in ("ANSWER:", "**Answer:**", "Final answer:"):
        ok, fmt = _verdict(f"12 + 30 = 42\n{label} {value}\n{after}", SUM)
        assert not ok and fmt


_PROSE = st.sampled_from(["Here are the details you asked for.", "Here is the JSON:", "120 EUR is 176.30 CAD.",
                          "**Result**", "Sure! Based on the tool result, here's the object", "I count 3 of them."])
_OBJECT = st.sampled_from(['{"n": 42}', '{"n": "42"}', '{"n": 43}', '{"n": "42 or 43"}', '{"m": 42}', '{"n": [42]}'])
_N = Contract("json", fields={"n": Accept(("42",), kind="number")},
              schema={"type": "object", "properties": {"n": {}}, "required": ["n"]})


@given(_PROSE, _OBJECT, st.booleans())
def test_one_line_of_prose_before_one_object_never_changes_the_verdict(prose, obj, fenced):
    body = f"```json\n{obj}\n```" if fenced else obj
    assert _verdict(f"{prose}\n{body}", _N) == _verdict(obj, _N)
    # Two objects, text after the object, or two lines of prose before it: never accepted.
    for reply in (f"{prose}\n{body}\n{obj}", f"{prose}\n{body}\nOr 43.", f"{prose}\n{prose}\n{body}"):
        ok, fmt = _verdict(reply, _N)
        assert not ok and fmt, reply


def test_the_json_locator_reports_what_it_read():
    from pytest_qualify.graders.contract import locate_json

    assert locate_json('120 EUR is 176.30 CAD.\n{"amount": 176.3}') == ("120 EUR is 176.30 CAD.", {"amount": 176.3}, "")
    reason = grade('120 EUR is 176.30 CAD.\n{"n": 42}\nOr 43.', _N).reason
    assert reason == "format: text after the JSON object: 'Or 43.'" and "EUR" not in reason
    assert grade("[42]", _N).reason == "format: expected a JSON object, got list"
    assert grade("42", _N).reason == "format: expected a JSON object, got int"
    assert "no object found" in grade("There are 42.", _N).reason
    assert "not one JSON object (Expecting" in grade('Here {"n": 42,}', _N).reason


@pytest.mark.parametrize("reply, ok", [
    ('{"n": 42}\n```', True),  # a fence closed that was never opened
    ('```json\n{"n": 42}', True),  # a fence opened and never closed
    ('### Result\n\n{"n": 42}', True),
    ('{"n": 42}\n```\n{"n": 43}', False),
    ('```json\n{"n": 42}\n```\n\nNote that I assumed the rate.', False),
])
def test_a_stray_fence_mark_is_no_text_a_second_object_still_is(reply, ok):
    verdict = grade(reply, _N)
    assert verdict.ok is ok and (ok or verdict.is_format), verdict.reason


def test_the_slot_a_contract_read_travels_on_its_verdict():
    from pytest_qualify.graders import SlotRead, Verdict
    from pytest_qualify.graders.needle import grade_needle

    assert grade("Working.\nANSWER: 42", SUM).slots == (SlotRead("answer", "42"),)
    assert grade("Rome", PARIS).reworded("item 3: wrong").slots == (SlotRead("answer", "Rome"),)
    unread = grade("Working, no answer line.", SUM)
    assert unread.is_format and unread.slots[0].slot is None and unread.slots[0].format_error
    assert grade_needle("4471", "4417", ["4471"]).slots == (SlotRead("answer", "4471"),)
    # Not part of a verdict's equality: a verdict is its judgement, the slots are its evidence.
    assert grade("Paris", PARIS) == Verdict.accept(grade("Paris", PARIS).reason)


# -- digits grouped by dots: grouping only where no dot can be a decimal point ----------------------

_NUMBER_SLOT = Contract("reply", Accept(("6120457",), kind="number"))


@given(st.integers(min_value=1_000_000, max_value=999_999_999), st.sampled_from(["{}", "**{}**", "Answer: {}", "{}.", "The answer is: {}"]))
def test_property_two_or_more_dot_groups_read_as_the_comma_grouped_number(value, style):
    dotted = f"{value:,}".replace(",", ".")
    contract = Contract("reply", Accept((str(value),), kind="number"))
    assert grade(style.format(dotted), contract).ok, dotted
    assert grade(style.format(f"{value:,}"), contract).ok
    # ... and as text, where the accepted form is the comma-grouped one (a needle's "{grouped}")
    assert grade(style.format(dotted), Contract("reply", Accept((f"{value:,}",)))).ok, dotted


@given(st.integers(min_value=1_000, max_value=999_999_999), st.integers(min_value=0, max_value=99))
def test_property_dot_groups_before_a_decimal_comma_read_as_grouping(whole, cents):
    written = f"{whole:,}".replace(",", ".") + f",{cents:02d}"
    contract = Contract("reply", Accept((f"{whole}.{cents:02d}",), kind="number"))
    assert grade(written, contract).ok, written
    assert grade(written + " EUR", Contract("reply", Accept((f"{whole}.{cents:02d}",), kind="number", units=("EUR",)))).ok


@given(st.integers(min_value=1_000, max_value=999_999))
def test_property_one_dot_group_alone_stays_a_decimal_point(value):
    # "6.120" may be six point one two: never read as 6120.
    written = f"{value:,}".replace(",", ".")
    assert written.count(".") == 1
    assert not grade(written, Contract("reply", Accept((str(value),), kind="number"))).ok, written
    assert grade(written, Contract("reply", Accept((str(value / 1000),), kind="number"))).ok, written


@pytest.mark.parametrize("written,why", [
    ("6.120457", "is '6.120457'"),                    # a decimal, not a grouping
    ("61.20.457", "holds 2 candidates"),             # a group of two
    ("6.120.4570", "holds 2 candidates"),            # a group of four at the end
    ("6.120.457.1", "holds 3 candidates"),           # a dot after the last group
    ("6.120.457 or 6.120.458", "holds 2 candidates (6,120,457, 6,120,458)"),
    ("6.120.457,5", "is '6.120.457,5'"),              # 6120457.5, not the number asked
    ("6.120,457.5", "holds 2 candidates"),           # two decimal marks
    ("6,120.457", "is '6,120.457'"),                  # commas group, the dot is the decimal point
])
def test_dots_that_cannot_be_a_grouping_never_read_as_one(written, why):
    verdict = grade(written, _NUMBER_SLOT)
    assert not verdict.ok and why in verdict.reason, verdict.reason


def test_dot_groups_read_alike_in_every_contract_form():
    assert grade("Working: 6.120.000 + 457.\nANSWER: 6.120.457", Contract("line", Accept(("6120457",), kind="number"))).ok
    json_contract = Contract("json", fields={"n": Accept(("6120457",), kind="number")},
                             schema={"type": "object", "properties": {"n": {"type": ["string", "number"]}}, "required": ["n"]})
    assert grade('{"n": "6.120.457"}', json_contract).ok
    assert not grade('{"n": "6.120"}', json_contract).ok


# -- what a reply holds besides its slot (asked by the reasoning module where no reasoning came back) --

@pytest.mark.parametrize("form,content,outside", [
    ("line", "ANSWER: 42", ""),
    ("line", "**Answer:**\n42", ""),
    ("line", "12 + 30 = 42.\n\nANSWER: 42", "12 + 30 = 42."),
    ("line", "Okay, the user wants a sum.\nANSWER: 42\nWait, 43.", "Okay, the user wants a sum.\nWait, 43."),
    ("line", "42", ""),                               # a malformed slot, no working
    ("line", "Okay, the user wants a sum.\n42", "Okay, the user wants a sum.\n42"),
    ("reply", "42", ""),
    ("reply", "Here is the answer:\n**42**", ""),      # a preamble line: noise the contract tolerates
    ("reply", "```\n42\n```", ""),
    ("reply", "Okay, the user wants a sum.\n\n42", "Okay, the user wants a sum.\n\n42"),
    ("reply", "The sum is 42.", ""),                  # one line: the slot (a wrong one), no working
    ("json", '{"n": 42}', ""),
    ("json", 'Here it is.\n{"n": 42}', ""),
    ("json", 'Okay, the user wants n.\nIt is 42.\n{"n": 42}', "Okay, the user wants n.\nIt is 42."),
    ("json", '{"n": 42}\nLet me double-check.', "Let me double-check."),
])
def test_outside_slot_is_what_the_reply_holds_besides_its_slot(form, content, outside):
    from pytest_qualify.graders.contract import outside_slot

    contract = (Contract(form, Accept(("42",), kind="number")) if form != "json" else
                Contract("json", fields={"n": Accept(("42",), kind="number")}, schema={"type": "object"}))
    assert outside_slot(content, contract) == outside
