"""Tool use at scale — the model's own choice of tool and arguments, unforced (``tool_choice: "auto"``).

The stored request set (``fixtures/tool_use/requests.json``, generated from the fixtures' tools with
answers known; the profile's ``[tool_use] requests`` first ones) is asked once a repetition, every
request with the whole tool set offered, and read for the Kimi K2 Vendor Verifier's measures (trigger
F1 against the expected tool-or-not, schema accuracy of the calls made, exact-argument accuracy of
the calls expected): graders/tool_use.py. Each measure must reach its threshold, the lower
prediction bound the reference deployment's own earlier runs give (the profile's floor file), never
a constant. The figures are recorded on the item (summary.json), which is what a later floor file is
built from. At the profile's ``[tool_use] temperature`` above 0 each run samples with a seed of its
own (from its cache salt), so the reference's runs vary as the Kimi K2 Vendor Verifier's do; at 0
(the default) the requests are greedy with the fixed seed. One answer's miss decides nothing alone: the measures over the set do. A profile
that names no floor measures and records its figures (what a first floor is built from) and judges
nothing: the item is not judged, the run INCOMPLETE, never PASS.
"""

from __future__ import annotations

import hashlib

import pytest

from pytest_qualify.checks import fail, require
from pytest_qualify.graders.tool_use import METHOD, MEASURES, grade_request, judge, measures, thresholds
from pytest_qualify.graders.tools import tool_schemas
from pytest_qualify.tasks.fixture_data import tool_fixtures
from pytest_qualify.properties import HARNESS_FAILURE
from pytest_qualify.tasks.tool_use import (
    PROPERTY, REQUESTS_PROPERTY, SET_PROPERTY, TEMPERATURE_PROPERTY, request_set, sample, set_sha256,
)

pytestmark = pytest.mark.qualify_module("tool_use")

FIXTURES = tool_fixtures()
OFFERED = {"tools": list(FIXTURES.tools), "tool_choice": "auto"}
SCHEMAS = tool_schemas(FIXTURES.tools)


def test_tool_use_at_scale(qualify_ask, qualify_profile, qualify_record, qualify_repetition, qualify_salt):
    rules = qualify_profile.tool_use
    assert rules is not None  # the profile loader always reads one
    bounds = thresholds(rules.floor_runs) if rules.floor_runs else None
    sampling = {}
    if rules.temperature:
        sampling = {"temperature": rules.temperature, "seed": int(hashlib.sha256(qualify_salt.encode()).hexdigest()[:8], 16)}
    outcomes = []
    for request in sample(rules.requests or len(request_set())):
        messages = [{"role": "system", "content": FIXTURES.system}, {"role": "user", "content": request.prompt}]
        # The set's measures judge the answers; one answer's finish state decides nothing alone.
        answer = qualify_ask(messages, tool_turn=True, check_finish=False, **OFFERED, **sampling)
        outcomes.append(grade_request(request, answer.tool_calls, answer.content, SCHEMAS))
    run = measures(outcomes)
    missed = [o for o in outcomes if o.reason]
    qualify_record.props(
        **{REQUESTS_PROPERTY: run.requests, SET_PROPERTY: set_sha256(), TEMPERATURE_PROPERTY: rules.temperature},
        **{PROPERTY[m]: run.figure(m) if run.figure(m) is not None else "none" for m in MEASURES},
        tool_use_precision=run.precision if run.precision is not None else "none",
        tool_use_recall=run.recall if run.recall is not None else "none",
        tool_use_first_misses="; ".join(f"{o.id}: {o.reason}" for o in missed[:5]),
    )
    where = f"{run.requests} tool-use requests, repetition {qualify_repetition}"
    if bounds is None:
        why = ("the profile names no tool-use floor (its [tool_use] floor), so no threshold exists: the figures are "
               "recorded for a floor file (python -m pytest_qualify.tasks.tool_use floor OUT BUNDLE...)")
        qualify_record.props(**{HARNESS_FAILURE: why})
        fail(where, why)
    qualify_record.props(**{f"{PROPERTY[m]}_threshold": round(bounds[m].bound, 6) for m in MEASURES},
                         tool_use_floor=rules.floor, tool_use_floor_runs=len(rules.floor_runs), tool_use_method=METHOD)
    require(judge(run, bounds), where)
