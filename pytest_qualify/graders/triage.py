"""Timeout triage under its answer contract: one JSON object naming the component, the cause's
category, the cause in the model's own words and an evidence line (``fixtures/triage/incidents.toml``).

Graded on the incident's ground truth, field by field, nothing outside the object:

- ``component``: equal to the component or one of its aliases (case and separators free); a red
  herring is a miss said as such; anything else in the field ("checkout-service (orders-pool)",
  "checkout-service or orders-db") is not the component.
- ``category``: equal to the incident's, one of the closed list the prompt gives (case and
  separators free). This, not the wording of the cause, decides whether the cause is right.
- ``evidence_line``: identifies log lines the fixture marks as showing the cause — quoted fully, in
  part (a distinctive piece, or pieces around an ellipsis) or by its timestamp; a quote that also
  fits a line that does not show the cause is a miss.
- ``cause``: free text, recorded in the accepted reason as evidence; never graded.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pytest_qualify.graders import Verdict
from pytest_qualify.graders.contract import Accept, FormatError, compare, format_failure, json_slot

FIELDS = ("component", "category", "cause", "evidence_line")
TIMESTAMP_RE = re.compile(r"\d{2}:\d{2}:\d{2}(?:\.\d+)?")
ELLIPSIS_RE = re.compile(r"\.\.\.|…")
# Shorter than this, a quote cannot single out a log line (e.g. "ERROR").
MIN_EVIDENCE_CHARS = 8


@dataclass(frozen=True)
class Incident:
    id: str
    symptom: str
    log_lines: tuple[str, ...]
    component: str
    aliases: tuple[str, ...]
    category: str
    categories: tuple[str, ...]  # the closed list the prompt offers
    cause: str  # the ground truth in one sentence (what the reference server answers)
    evidence: tuple[str, ...]  # every log line that shows the cause
    red_herrings: tuple[str, ...]
    prompt: str
    schema: Mapping[str, Any]  # the reply's JSON Schema (stated in the prompt)

    @property
    def log(self) -> str:
        return "\n".join(self.log_lines) + "\n"

    @property
    def truth(self) -> dict[str, str]:
        """The ground truth as a reply under the contract (what the reference server answers)."""
        return {"component": self.component, "category": self.category, "cause": self.cause,
                "evidence_line": self.evidence[0]}


def _fold(text: str) -> str:
    return " ".join(unicodedata.normalize("NFKC", text).strip().strip("`'\"“”‘’").split()).casefold()


def evidence_lines(evidence: str, log_lines: tuple[str, ...]) -> list[str]:
    """The log lines a quoted evidence line points at (empty when it points at none)."""
    quote = _fold(evidence)
    if len(quote) < MIN_EVIDENCE_CHARS:
        return []
    pieces = [p.strip() for p in ELLIPSIS_RE.split(quote) if p.strip()]
    hits = [line for line in log_lines if _in_order(pieces, _fold(line)) or _fold(line) in quote]
    if hits:
        return hits
    # Only a timestamp (or a line whose text was paraphrased around it): the timestamp decides.
    stamps = TIMESTAMP_RE.findall(quote)
    return [line for line in log_lines if stamps and all(s in line for s in stamps)]


def _in_order(pieces: list[str], line: str) -> bool:
    at = 0
    for piece in pieces:
        found = line.find(piece, at)
        if found < 0:
            return False
        at = found + len(piece)
    return bool(pieces)


def grade_component(named: str, incident: Incident) -> Verdict:
    if compare(named, Accept((incident.component, *incident.aliases), separators=True), "component").ok:
        return Verdict.accept(f"component {incident.component}")
    if compare(named, Accept(incident.red_herrings, separators=True), "component").ok:
        return Verdict.reject(f"component {named!r} is a red herring; the cause is in {incident.component!r}")
    return Verdict.reject(f"component {named!r} is not {incident.component!r}")


def grade_category(named: str, incident: Incident) -> Verdict:
    if compare(named, Accept((incident.category,), separators=True), "category").ok:
        return Verdict.accept(f"category {incident.category}")
    if compare(named, Accept(incident.categories, separators=True), "category").ok:
        return Verdict.reject(f"category {named!r} is wrong: the cause is {incident.category!r}")
    return Verdict.reject(f"category {named!r} is not one of the listed categories {list(incident.categories)}")


def grade_evidence(quoted: str, incident: Incident) -> Verdict:
    hits = evidence_lines(quoted, incident.log_lines)
    if not hits:
        return Verdict.reject(f"evidence_line {quoted!r} is not a line of the log")
    wrong = [line for line in hits if line not in set(incident.evidence)]
    if wrong:
        return Verdict.reject(f"evidence_line {quoted!r} points at {wrong[0]!r}, which does not show the cause")
    return Verdict.accept("evidence matches")


def grade_triage(content: str | None, incident: Incident) -> Verdict:
    """The reply's JSON object against the incident's ground truth; the accepted reason records the
    cause in the model's words (never graded)."""
    try:
        answer = json_slot(content, incident.schema)
    except FormatError as exc:
        return format_failure(str(exc))
    verdicts = (grade_component(answer["component"], incident), grade_category(answer["category"], incident),
                grade_evidence(answer["evidence_line"], incident))
    if not all(verdicts):
        return Verdict.all_failed(verdicts)
    return Verdict.accept(f"{incident.component}, {incident.category}, evidence matches; cause (recorded) {answer['cause']!r}")
