"""Protocol module 7 — unified diff: a source file and a precise change request; the answer's diff
must pass ``git apply --check`` and turn the source into the expected file. Data: ``fixtures/diff/``."""

from __future__ import annotations

import pytest

from pytest_qualify.checks import require
from pytest_qualify.tasks.fixture_data import diff_cases
from pytest_qualify.graders.diff import grade_diff_answer

pytestmark = pytest.mark.qualify_module("diff")

CASES = diff_cases()


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_unified_diff(case, qualify_ask, qualify_record, qualify_repetition):
    answer = qualify_ask(case.prompt)
    qualify_record.props(case=case.id)
    require(grade_diff_answer(answer.content, case.source, case.path, case.expected),
            f"case {case.id}, repetition {qualify_repetition}")
