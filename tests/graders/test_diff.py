"""graders/diff.py: the diff contract's slot (pure; unit and property tests) and application with the
real git. The reply is one unified diff, optionally in one fence after one preamble line; prose
around it is a format failure, a diff git refuses or that makes another change is a miss."""

from __future__ import annotations

import difflib
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_qualify.tasks.fixture_data import diff_cases
from pytest_qualify.graders.contract import FormatError
from pytest_qualify.graders.diff import (
    apply_diff, diff_slot, first_difference, grade_diff_answer, same_file, strip_level,
)

# Examples are judged by their outcome only: a loaded CI machine must not fail a slow one.

CASES = diff_cases()
BY_ID = {c.id: c for c in CASES}
PY = BY_ID["python_function"]
MULTI = BY_ID["multi_hunk_rename"]


def make_diff(case, prefixed: bool = True, context: int = 3) -> str:
    old, new = (f"a/{case.path}", f"b/{case.path}") if prefixed else (case.path, case.path)
    return "".join(difflib.unified_diff(case.source.splitlines(True), case.expected.splitlines(True), old, new, n=context))


def blank_context_unspaced(diff: str) -> str:
    """What models often write: blank context lines without their leading space."""
    return "\n".join("" if line == " " else line for line in diff.splitlines()) + "\n"


# -- fixtures ------------------------------------------------------------------------------------


def test_cases_cover_a_function_a_config_and_several_hunks():
    assert {"python_function", "config_change", "multi_hunk_rename"} <= set(BY_ID)
    assert make_diff(MULTI).count("\n@@ ") == 2
    for case in CASES:
        assert case.source != case.expected
        assert case.source in case.prompt and case.request in case.prompt and case.path in case.prompt
        assert "Reply with the unified diff alone" in case.prompt and "no other text" in case.prompt


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_expected_diff_applies(case):
    verdict = apply_diff(case.source, case.path, make_diff(case), case.expected)
    assert verdict.ok, verdict.reason


# -- the slot: accepted forms ---------------------------------------------------------------------


@pytest.mark.parametrize("wrap", [
    lambda d: d,
    lambda d: f"```diff\n{d}```",
    lambda d: f"```patch\n{d}```",
    lambda d: f"```\n{d}```",
    lambda d: f"Here is the patch:\n\n```diff\n{d}```",
    lambda d: f"Here is the patch:\n{d}",
    lambda d: f"\n\n{d.rstrip()}\n\n",
    lambda d: f"```diff\n{d.rstrip()}\n```\n",
])
@pytest.mark.parametrize("prefixed", [True, False])
def test_slot_tolerates_a_fence_a_preamble_and_prefixes(wrap, prefixed):
    diff = make_diff(PY, prefixed)
    assert diff_slot(wrap(diff)) == diff
    assert grade_diff_answer(wrap(diff), PY.source, PY.path, PY.expected).ok


def test_git_headers_are_part_of_the_diff():
    text = f"diff --git a/{PY.path} b/{PY.path}\nindex 3b18e51..a9c2f0d 100644\n{make_diff(PY)}"
    assert diff_slot(text) == text
    assert grade_diff_answer(text, PY.source, PY.path, PY.expected).ok


# -- the slot: format failures -------------------------------------------------------------------


@pytest.mark.parametrize("wrap, why", [
    (lambda d: f"Here is the patch:\n\n```diff\n{d}```\n\nIt adds the check.", "text after the diff: 'It adds the check.'"),
    (lambda d: f"Sure, here it is:\n{d}\nThat is all.", "text after the diff: 'That is all.'"),
    (lambda d: f"I added the check.\nThen I rounded the result.\n{d}", "text before the diff"),
    (lambda d: f"```diff\n{d}```\n\n```diff\n{d}```", "a second diff after the first"),
    (lambda d: f"{d}\nThis makes exactly the requested change.", "text after the diff"),
])
def test_prose_around_the_diff_is_a_format_failure(wrap, why):
    verdict = grade_diff_answer(wrap(make_diff(PY)), PY.source, PY.path, PY.expected)
    assert not verdict.ok and verdict.is_format and why in verdict.reason, verdict.reason


def test_blank_context_lines_without_their_space_are_kept():
    diff = blank_context_unspaced(make_diff(MULTI))
    text = f"Patch:\n{diff}"
    assert diff_slot(text) == diff
    assert grade_diff_answer(text, MULTI.source, MULTI.path, MULTI.expected).ok


def test_trailing_blank_context_trimmed_by_the_answer_is_restored():
    source = "x = 1\ny = 2\n\n\n\nz = 3\n"
    expected = source.replace("y = 2", "y = 3")
    diff = "".join(difflib.unified_diff(source.splitlines(True), expected.splitlines(True), "a/m.py", "b/m.py"))
    assert diff.endswith("+y = 3\n \n \n \n")  # the hunk ends with three blank context lines
    trimmed = f"```diff\n{blank_context_unspaced(diff).rstrip()}\n```"
    assert grade_diff_answer(trimmed, source, "m.py", expected).ok


def test_strip_level():
    assert strip_level(make_diff(PY, prefixed=True)) == 1
    assert strip_level(make_diff(PY, prefixed=False)) == 0


def test_fewer_context_lines_still_apply():
    assert grade_diff_answer(make_diff(PY, context=1), PY.source, PY.path, PY.expected).ok


# -- rejected forms ------------------------------------------------------------------------------


def test_wrong_hunk_header_fails_with_gits_message():
    bad = re.sub(r"^@@ -(\d+),(\d+)", lambda m: f"@@ -{m.group(1)},{int(m.group(2)) + 2}", make_diff(PY), count=1, flags=re.M)
    verdict = grade_diff_answer(f"```diff\n{bad}```", PY.source, PY.path, PY.expected)
    assert not verdict.ok and "git apply --check" in verdict.reason and "corrupt patch" in verdict.reason


def test_context_that_is_not_in_the_file_fails():
    bad = make_diff(PY).replace(' """Price after a percentage discount."""', ' """Price after discount."""')
    verdict = grade_diff_answer(bad, PY.source, PY.path, PY.expected)
    assert not verdict.ok and "patch does not apply" in verdict.reason


def test_diff_that_applies_but_makes_another_change_fails_with_the_line():
    wrong = make_diff(PY).replace("return round(price * (1 - percent / 100), 2)", "return round(price * (1 - percent / 100))")
    verdict = grade_diff_answer(wrong, PY.source, PY.path, PY.expected)
    assert not verdict.ok and "differs from the expected file at line 10" in verdict.reason


def test_diff_of_another_file_fails():
    other = make_diff(PY).replace(PY.path, "shop/other.py")
    verdict = grade_diff_answer(other, PY.source, PY.path, PY.expected)
    assert not verdict.ok and "shop/other.py" in verdict.reason


@pytest.mark.parametrize("content,why", [
    ("", "empty reply"),
    (None, "empty reply"),
    ("I would add a check before the return.", "no unified diff"),
    ("```python\ndef apply_discount(price, percent):\n    ...\n```", "no unified diff"),
])
def test_answers_without_a_diff(content, why):
    verdict = grade_diff_answer(content, PY.source, PY.path, PY.expected)
    assert not verdict.ok and verdict.is_format and why in verdict.reason, verdict.reason


def test_the_same_file_patched_twice_is_for_git_to_refuse():
    verdict = grade_diff_answer(make_diff(PY) * 2, PY.source, PY.path, PY.expected)
    assert not verdict.ok and "git apply" in verdict.reason


def test_a_hunk_that_ends_early_goes_to_git_not_to_the_format_check():
    # Hunk lines after a hunk whose counts ran out are a malformed diff, not prose.
    bad = re.sub(r"^@@ -(\d+),(\d+) \+(\d+),(\d+)", lambda m: f"@@ -{m.group(1)},{int(m.group(2)) - 2} +{m.group(3)},{m.group(4)}",
                 make_diff(PY), count=1, flags=re.M)
    verdict = grade_diff_answer(bad, PY.source, PY.path, PY.expected)
    assert not verdict.ok and not verdict.is_format and "git apply" in verdict.reason, verdict.reason


def test_same_file_ignores_only_trailing_whitespace():
    assert same_file("a\nb  \n\n", "a\nb\n")
    assert not same_file("a\n  b\n", "a\nb\n")
    assert first_difference("a\nb\n", "a\nc\n") == "line 2: got 'b', expected 'c'"


# -- properties ----------------------------------------------------------------------------------

# Prose a model writes around a diff: no line of it may look like diff syntax.
prose_line = st.text(alphabet="abcdefghijklmnopqrstuvwxyz ,.!?ABC", min_size=1, max_size=40).filter(
    lambda s: s.strip() and not s.startswith((" ", "+", "-", "@", "\\"))
)
@given(case=st.sampled_from(CASES), prefixed=st.booleans(), fenced=st.booleans(), unspaced=st.booleans(),
       preamble=st.sampled_from(["", "Here is the diff:\n", "Patch:\n\n"]))
def test_property_the_slot_is_the_diff(case, prefixed, fenced, unspaced, preamble):
    diff = make_diff(case, prefixed)
    written = blank_context_unspaced(diff) if unspaced else diff
    body = f"```diff\n{written}```" if fenced else written
    extracted = diff_slot(preamble + body)
    assert blank_context_unspaced(extracted) == blank_context_unspaced(diff)


@given(case=st.sampled_from(CASES), before=st.lists(prose_line, max_size=2), after=st.lists(prose_line, max_size=2),
       fenced=st.booleans())
def test_property_prose_around_the_diff_is_a_format_failure(case, before, after, fenced):
    if not before and not after:
        return
    before = [b.rstrip().rstrip(":") + "." for b in before]  # not a preamble line
    body = f"```diff\n{make_diff(case)}```" if fenced else make_diff(case)
    with pytest.raises(FormatError):
        diff_slot("\n".join([*before, body, *after]))


@settings(max_examples=15)  # each example runs git
@given(case=st.sampled_from(CASES), data=st.data())
def test_property_truncated_diff_is_rejected(case, data):
    lines = make_diff(case).splitlines(True)
    # Cut inside the hunks: from just after the first hunk header to just before the end.
    first_hunk = next(i for i, line in enumerate(lines) if line.startswith("@@"))
    keep = data.draw(st.integers(min_value=first_hunk + 1, max_value=len(lines) - 1))
    verdict = grade_diff_answer("```diff\n" + "".join(lines[:keep]) + "```", case.source, case.path, case.expected)
    assert not verdict.ok


@settings(max_examples=15)
@given(case=st.sampled_from(CASES), extra=st.integers(min_value=1, max_value=5), which=st.sampled_from(["old", "new"]))
def test_property_wrong_hunk_counts_are_rejected_by_git(case, extra, which):
    group = 2 if which == "old" else 4
    pattern = re.compile(r"^@@ -(\d+),(\d+) \+(\d+),(\d+) @@", re.M)

    def bump(m: re.Match[str]) -> str:
        nums = [int(g) for g in m.groups()]
        nums[group - 1] += extra
        return f"@@ -{nums[0]},{nums[1]} +{nums[2]},{nums[3]} @@"

    bad = pattern.sub(bump, make_diff(case), count=1)
    verdict = grade_diff_answer(f"```diff\n{bad}```", case.source, case.path, case.expected)
    assert not verdict.ok and "git apply" in verdict.reason
