"""Protocol module 6 — session recall: facts given early in a conversation, distractor turns (one
with a near-miss fact), then a question that needs the exact early facts. Data: ``fixtures/recall/``."""

from __future__ import annotations

import pytest

from pytest_qualify.checks import require
from pytest_qualify.graders.recall import grade_recall, load_fixtures

pytestmark = pytest.mark.qualify_module("recall")

FIXTURES = load_fixtures()


@pytest.mark.parametrize("conversation", FIXTURES.conversations, ids=[c.id for c in FIXTURES.conversations])
def test_recall(conversation, qualify_client, qualify_profile, qualify_record, qualify_salt, qualify_repetition):
    answer = qualify_client.chat(
        conversation.messages(FIXTURES.system), max_tokens=qualify_profile.limits.answer_tokens,
        temperature=0, seed=1, cache_salt=qualify_salt,
    )
    qualify_record.answer(answer)
    qualify_record.props(case=conversation.id)
    require(grade_recall(answer.content, conversation.facts, conversation.near_misses),
            f"conversation {conversation.id}, repetition {qualify_repetition}")
