"""Protocol module 1 — smoke: health, identity, engine version, short answers under their contract
(``fixtures/smoke.toml``: the prompt states where the answer goes; only that slot is graded)."""

from __future__ import annotations

import pytest

from pytest_qualify.checks import fail, held, require
from pytest_qualify.graders.identity import check_identity
from pytest_qualify.promotion.identity import engine_version_reason
from pytest_qualify.tasks.fixture_data import smoke_questions

pytestmark = pytest.mark.qualify_module("smoke")

QUESTIONS = smoke_questions()


def test_health(qualify_client):
    status = qualify_client.health()
    if status != 200:
        fail("GET /health", f"expected HTTP 200, got {status}")
    held("GET /health", "HTTP 200")


def test_identity(qualify_client, qualify_profile, qualify_record):
    models = qualify_client.models()
    qualify_record.props(served_models=",".join(m.get("id", "") for m in models))
    require(check_identity(models, qualify_profile.deployment.served_name, qualify_profile.deployment.model,
                           qualify_profile.limits.window_tokens), "GET /v1/models")


def test_engine_version(qualify_client, qualify_profile, qualify_record):
    version = qualify_client.version()
    qualify_record.props(engine_version=version)
    if not version:
        fail("GET /version", "no engine version reported")
    # The declared engine's version token, held exactly (both readings in the reason).
    differs = engine_version_reason(qualify_profile.deployment.engine, version)
    if differs:
        fail("GET /version", differs)
    held("GET /version", f"engine version {version}")


@pytest.mark.parametrize("question", QUESTIONS, ids=[f"q{i + 1}" for i in range(len(QUESTIONS))])
def test_short_answer(qualify_ask, question):
    answer = qualify_ask(question.prompt, contract=question.contract)
    require(question.grade(answer.content), f"question {question.text!r}")
