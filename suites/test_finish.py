"""Protocol module 11 — visible answer / finish state.

Every recorded answer of every module goes through the shared check (``graders/finish.py`` via
``qualify_record.answer``): visible content, ``finish_reason`` "stop" ("tool_calls" on tool turns),
"length" fails. This module asks plain questions of its own, streamed and not, well inside the
answer budget, so a wrong finish here is the server's doing. Each answer is then graded under the
prompt's contract (``fixtures/finish.toml``).
"""

from __future__ import annotations

import pytest

from pytest_qualify.checks import fail, require
from pytest_qualify.tasks.fixture_data import finish_prompts

pytestmark = pytest.mark.qualify_module("finish")

PROMPTS = finish_prompts()


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("prompt", PROMPTS, ids=[p.id for p in PROMPTS])
def test_finish_state(prompt, stream, qualify_ask, qualify_profile, qualify_repetition):
    where = f"prompt {prompt.id}, {'streamed' if stream else 'not streamed'}, repetition {qualify_repetition}"
    budget = qualify_profile.limits.answer_budget_tokens
    # qualify_ask records the answer through the shared finish check (finish_reason, finish_check).
    answer = qualify_ask(prompt.prompt, stream=stream, contract=prompt.contract)
    if answer.completion_tokens is not None and answer.completion_tokens > budget:
        fail(where, f"{answer.completion_tokens} completion tokens exceed max_tokens {budget}")
    require(prompt.grade(answer.content), where)
