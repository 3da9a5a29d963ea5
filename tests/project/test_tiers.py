"""The two tiers of the tests hold: an inner pytest can start only in a test marked ``e2e``, so the
fast loop (``pytest -m "not e2e and not real_vllm"``) never waits on one; the rule is set before a
test's fixtures, so a module-scoped fixture that runs a qualification is held to it too."""

from __future__ import annotations

import pytest

from .. import helpers


def test_an_inner_run_in_an_unmarked_test_fails_before_it_starts(tmp_path):
    assert helpers.E2E_ALLOWED["current"] is False  # tests/conftest.py set it for this test
    for start in (lambda: helpers.run_pytest("--version", cwd=tmp_path),
                  lambda: helpers.start_pytest("--version", cwd=tmp_path)):
        with pytest.raises(helpers.InnerRunOutsideE2E, match="without the e2e marker"):
            start()


@pytest.mark.e2e
def test_a_marked_test_may_run_one(tmp_path):
    assert helpers.E2E_ALLOWED["current"] is True
    done = helpers.run_pytest("--version", cwd=tmp_path, timeout=120)
    assert done.returncode == 0 and "pytest" in done.stdout + done.stderr


def test_a_test_that_asks_for_pytester_is_marked_e2e():
    from .. import conftest

    class Item:
        def __init__(self, *fixturenames: str) -> None:
            self.fixturenames, self.marks = fixturenames, []

        def add_marker(self, mark) -> None:
            self.marks.append(mark.name)

    inner, plain = Item("pytester", "tmp_path"), Item("tmp_path")
    conftest.pytest_collection_modifyitems([inner, plain])
    assert (inner.marks, plain.marks) == (["e2e"], [])
