"""Timeout triage from ``fixtures/triage/``: the request holds an incident's log; the answer is the
ground truth's component, category, cause and first evidence line in the answer contract: one JSON
object, alternately bare and fenced after a preamble line, as models write it."""

from __future__ import annotations

import json

from pytest_qualify.tasks.fixture_data import triage_incidents
from pytest_qualify.graders.triage import Incident
from pytest_qualify.reference.oracle import ChatRequest, OracleContext, Reply

FAULTS = {"triage_red_herring": "triage answers name a red-herring component and its log line"}


def _incident(req: ChatRequest) -> Incident | None:
    text = req.last_user_text()
    for incident in triage_incidents():
        if incident.log_lines[0] in text and incident.log_lines[-1] in text:
            return incident
    return None


def answer(req: ChatRequest, ctx: OracleContext) -> Reply | None:
    incident = _incident(req)
    if incident is None:
        return None
    verdict = incident.truth
    if "triage_red_herring" in ctx.faults:
        ctx.faults.engage("triage_red_herring")
        herring = incident.red_herrings[0]
        line = next(line for line in incident.log_lines if f"[{herring}]" in line)
        verdict = {"component": herring, "category": "slow downstream dependency",
                   "cause": f"{herring} is failing and being retried", "evidence_line": line}
    if ctx.occurrence(f"triage:{incident.id}") % 2 == 1:
        return Reply(content=f"The timeouts trace back to {verdict['component']}:\n\n```json\n{json.dumps(verdict, indent=2)}\n```")
    return Reply(content=json.dumps(verdict))
