"""checks: how a protocol test turns a verdict or a failed sizing into one readable failure."""

from __future__ import annotations

import pytest

from pytest_qualify.checks import fail, require, sizing
from pytest_qualify.client.errors import EndpointError
from pytest_qualify.graders import Verdict
from pytest_qualify.tasks.haystack import SizingError


def failure(where: str, error: Exception, what: str = "the prompt") -> str:
    with pytest.raises(pytest.fail.Exception) as failed:
        with sizing(where, what):
            raise error
    return str(failed.value)


def test_a_refused_tokenize_names_the_endpoint_the_status_and_what_could_not_be_sized():
    error = EndpointError(404, {"error": {"message": "Not Found"}}, "POST /tokenize: HTTP 404")
    assert failure("1K lane, repetition 1", error, "the lane") == (
        "1K lane, repetition 1: POST /tokenize failed, so the lane cannot be sized in server tokens: HTTP 404: Not Found")
    assert failure("window 4096", error) == (
        "window 4096: POST /tokenize failed, so the prompt cannot be sized in server tokens: HTTP 404: Not Found")


def test_a_size_out_of_reach_fails_with_the_sizing_reason_and_other_errors_propagate():
    assert failure("w", SizingError("could not size a prompt to 100 tokens", None)) == "w: could not size a prompt to 100 tokens"
    with pytest.raises(KeyError):
        with sizing("w"):
            raise KeyError("a bug, not a sizing failure")
    with sizing("w"):
        pass  # nothing raised: nothing fails


def test_require_fails_only_a_rejecting_verdict():
    require(Verdict(True, "fine"), "here")
    with pytest.raises(pytest.fail.Exception, match="^here: wrong$"):
        require(Verdict(False, "wrong"), "here")
    with pytest.raises(pytest.fail.Exception, match="^bare$"):
        fail("", "bare")
