"""The over-window refusal grader: HTTP 400 whose message names the length limit and the window."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_qualify.graders.window import check_overwindow_refusal

OLD = "This model's maximum context length is {w} tokens. However, your prompt contains at least {p} input tokens, please reduce the length."
NEW = "This model's maximum context length is {w} tokens. However, your request has {p} input tokens. Please reduce the length of the input messages."
ENGINE = "The decoder prompt (length {p}) is longer than the maximum model length of {w}. Make sure that `max_model_len` is no smaller than the number of text tokens."


@pytest.mark.parametrize("template", [OLD, NEW, ENGINE])
def test_vllm_wordings_are_accepted(template):
    verdict = check_overwindow_refusal(400, template.format(w=262144, p=262145), 262144, 262145)
    assert verdict.ok, verdict.reason


def test_window_written_with_separators_is_accepted():
    assert check_overwindow_refusal(400, "maximum context length is 262,144 tokens", 262144, 262145).ok


@pytest.mark.parametrize(
    "status, message, why",
    [
        (None, "", "was answered (HTTP 200)"),
        (500, "Internal Server Error", "got HTTP 500, expected 400"),
        (413, "payload too large", "got HTTP 413"),
        (400, "bad request", "does not name the window 4096"),
        (400, "maximum context length is 8192 tokens", "does not name the window 4096"),
        (400, "invalid value 4096 for field x", "about the length limit"),
    ],
)
def test_wrong_refusals_fail(status, message, why):
    verdict = check_overwindow_refusal(status, message, 4096, 4097)
    assert not verdict.ok and why in verdict.reason and "4097 tokens" in verdict.reason
@given(st.integers(16, 10_000_000), st.sampled_from([OLD, NEW, ENGINE]), st.integers(1, 1000))
def test_property_any_window_in_any_wording_is_accepted(window, template, over):
    assert check_overwindow_refusal(400, template.format(w=window, p=window + over), window, window + over).ok
@given(st.integers(16, 10_000_000), st.integers(1, 10_000))
def test_property_another_window_number_is_rejected(window, delta):
    text = NEW.format(w=window + delta, p=window + delta + 1)
    assert not check_overwindow_refusal(400, text, window, window + 1).ok
@given(st.integers(100, 599).filter(lambda s: s != 400), st.integers(16, 100_000))
def test_property_other_statuses_fail(status, window):
    assert not check_overwindow_refusal(status, NEW.format(w=window, p=window + 1), window, window + 1).ok
