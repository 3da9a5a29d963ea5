"""Shorthands for tests that judge by hand: the gate's decision through its one seam,
``decide(RunRecord)``, and a ``summary.json`` rendered from it (``facts_section`` then
``render_summary``, as ``evidence/end_of_run.py`` does at the end of a run)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pytest_qualify.evidence.summary import facts_section, render_summary
from pytest_qualify.gate.decide import Decision, ItemResult, RunRecord, decide
from pytest_qualify.gate.waivers import WaiverSet


def judge(results: Iterable[ItemResult], modules: Mapping[str, Any], required: Sequence[str], *,
          waivers: WaiverSet | None = None, run_problems: Sequence[str] = (), incomplete: Sequence[str] = (),
          checks: Sequence[Any] = (), target_unavailable: bool = False, stage: Any = None,
          answers_void: Sequence[str] = ()) -> Decision:
    return decide(RunRecord(
        tuple(results), modules, tuple(required), stage=stage, problems=tuple(run_problems),
        incomplete=tuple(incomplete), target_unavailable=target_unavailable, checks=tuple(checks),
        waivers=waivers, answers_void=tuple(answers_void)))


def summary_of(*, run: Mapping[str, Any], target: Mapping[str, Any], profile: Any, verdict: Decision,
               results: Iterable[ItemResult], cases: Mapping[str, Any], snapshots: Mapping[str, Any],
               metrics_errors: Mapping[str, str], metrics_files: Sequence[str], artifacts: Mapping[str, Any],
               **sections: Any) -> dict[str, Any]:
    """``sections``: the stage, identity and promoted sections (``summary.stage_fields``)."""
    facts = facts_section(run=run, target=target, profile=profile, results=results, cases=cases, snapshots=snapshots,
                          metrics_errors=metrics_errors, metrics_files=metrics_files)
    return render_summary(facts, verdict, artifacts=artifacts, **sections)
