"""Unified-diff tasks from ``fixtures/diff/``: the request holds a case's source file and change
request; the answer is the diff from that source to the expected file, in the answer contract: the
diff alone, alternately fenced after a preamble line and bare."""

from __future__ import annotations

import difflib
import re

from pytest_qualify.tasks.fixture_data import diff_cases
from pytest_qualify.graders.diff import DiffCase
from pytest_qualify.reference.oracle import ChatRequest, OracleContext, Reply

FAULTS = {"bad_diff_hunk": "the first hunk header of every diff counts the wrong number of old lines"}


def _case(req: ChatRequest) -> DiffCase | None:
    text = req.last_user_text()
    for case in diff_cases():
        if case.request in text and case.source in text:
            return case
    return None


def answer(req: ChatRequest, ctx: OracleContext) -> Reply | None:
    case = _case(req)
    if case is None:
        return None
    occurrence = ctx.occurrence(f"diff:{case.id}")
    # Alternate the two shapes the contract allows, so both reach the grader: a fenced diff with
    # a/ b/ prefixes after a preamble line, and a bare diff without prefixes.
    fenced = occurrence % 2 == 1
    old, new = (f"a/{case.path}", f"b/{case.path}") if fenced else (case.path, case.path)
    diff = "".join(difflib.unified_diff(case.source.splitlines(True), case.expected.splitlines(True), old, new))
    if "bad_diff_hunk" in ctx.faults:
        ctx.faults.engage("bad_diff_hunk")
        diff = re.sub(r"^@@ -(\d+),(\d+)", lambda m: f"@@ -{m.group(1)},{int(m.group(2)) + 2}", diff, count=1, flags=re.M)
    if fenced:
        return Reply(content=f"Here is the patch:\n\n```diff\n{diff}```")
    return Reply(content=diff)
