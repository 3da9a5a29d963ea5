"""Protocol module 6 — session recall: facts given early in a conversation, distractor turns (one
with a near-miss fact), then a question that needs the exact early facts, answered as one JSON
object with a field per fact (the answer contract, stated in the question). Data: ``fixtures/recall/``."""

from __future__ import annotations

import pytest

from pytest_qualify.checks import require
from pytest_qualify.tasks.fixture_data import recall_fixtures
from pytest_qualify.graders.recall import grade_recall

pytestmark = pytest.mark.qualify_module("recall")

FIXTURES = recall_fixtures()


@pytest.mark.parametrize("conversation", FIXTURES.conversations, ids=[c.id for c in FIXTURES.conversations])
def test_recall(conversation, qualify_ask, qualify_record, qualify_repetition):
    answer = qualify_ask(conversation.messages(FIXTURES.system))
    qualify_record.props(case=conversation.id)
    require(grade_recall(answer.content, conversation.contract, conversation.near_misses),
            f"conversation {conversation.id}, repetition {qualify_repetition}")
