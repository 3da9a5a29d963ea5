"""Timeout triage: the answer's JSON names the component, the cause's category, the cause in its
own words and an evidence line.

Graded on the incident's ground truth (data in ``fixtures/triage/incidents.toml``):

- ``component``: names the component (or an alias) as words; a qualifier in brackets or after it
  is fine ("checkout-service (orders-pool)"); naming a red herring is a miss.
- ``category``: one of the closed list the prompt gives, equal to the incident's (case and
  separators free). This, not the wording of the cause, decides whether the cause is right.
- ``cause``: free text, recorded as evidence; it fails only when it states a contradiction the
  fixture lists (another cause, a red herring's own story) — as words, and not when it negates it
  ("no slow queries").
- ``evidence_line``: identifies log lines the fixture marks as showing the cause — quoted fully,
  in part (a distinctive piece, or pieces around an ellipsis) or by its timestamp.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pytest_qualify.graders import Verdict
from pytest_qualify.graders.text import JsonNotFound, find_json_object, normalize, states

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
    contradictions: tuple[str, ...]
    evidence: tuple[str, ...]  # every log line that shows the cause
    red_herrings: tuple[str, ...]
    prompt: str

    @property
    def log(self) -> str:
        return "\n".join(self.log_lines) + "\n"


def normalize_component(name: str) -> str:
    """"Checkout_Service", "[checkout-service]" and "checkout service" are one component."""
    return re.sub(r"[\W_]+", "", normalize(name))


def _squash(text: str) -> str:
    return normalize(text.strip().strip("`'\"“”‘’").strip())


def evidence_lines(evidence: str, log_lines: tuple[str, ...]) -> list[str]:
    """The log lines a quoted evidence line points at (empty when it points at none)."""
    quote = _squash(evidence)
    if len(quote) < MIN_EVIDENCE_CHARS:
        return []
    pieces = [p.strip() for p in ELLIPSIS_RE.split(quote) if p.strip()]
    hits = [line for line in log_lines if _in_order(pieces, _squash(line)) or _squash(line) in quote]
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


def _names(text: str, names: tuple[str, ...]) -> list[str]:
    """The names the text holds as whole names: a run of its words ("checkout-service",
    "Checkout Service", "checkout_service") equal to a name, so a qualifier around it is free
    ("checkout-service (orders-pool)") while "checkout-db" does not name "checkout"."""
    parts = [p for p in re.split(r"[\s()\[\]{},;:/|`'\"*]+", text) if p.strip("-–—_.")]
    runs = {normalize_component("".join(parts[i:j])) for i in range(len(parts)) for j in range(i + 1, len(parts) + 1)}
    return [n for n in names if normalize_component(n) in runs]


def grade_component(named: str, incident: Incident) -> Verdict:
    right = _names(named, (incident.component, *incident.aliases))
    herrings = _names(named, incident.red_herrings)
    if herrings:
        also = f" (named beside {incident.component!r})" if right else ""
        return Verdict.reject(f"component {named!r}: {herrings[0]!r} is a red herring{also}; "
                              f"the cause is in {incident.component!r}")
    if not right:
        return Verdict.reject(f"component {named!r} is not {incident.component!r}")
    return Verdict.accept(f"component {incident.component}")


def grade_category(named: str, incident: Incident) -> Verdict:
    # A note in brackets after the category is the model's own qualifier ("... (connection leak)").
    key = normalize_component(re.sub(r"\([^)]*\)|\[[^\]]*\]", "", named))
    if key == normalize_component(incident.category):
        return Verdict.accept(f"category {incident.category}")
    if key in {normalize_component(c) for c in incident.categories}:
        return Verdict.reject(f"category {named!r} is wrong: the cause is {incident.category!r}")
    return Verdict.reject(f"category {named!r} is not one of the listed categories {list(incident.categories)}")


def grade_triage(content: str | None, incident: Incident) -> Verdict:
    """The answer's JSON against the incident's ground truth; the accepted reason carries the cause."""
    try:
        answer = find_json_object(content)
    except JsonNotFound as exc:
        return Verdict.reject(f"invalid_json: {exc}")
    missing = [f for f in FIELDS if not isinstance(answer.get(f), str) or not answer[f].strip()]
    if missing:
        return Verdict.reject(f"the JSON lacks {', '.join(missing)}: {answer}")

    for verdict in (grade_component(answer["component"], incident), grade_category(answer["category"], incident)):
        if not verdict:
            return verdict

    contradicted = [c for c in incident.contradictions if states(answer["cause"], c)]
    if contradicted:
        return Verdict.reject(f"cause {answer['cause']!r} states {contradicted[0]!r}, which is not the cause")

    hits = evidence_lines(answer["evidence_line"], incident.log_lines)
    accepted = set(incident.evidence)
    if not hits:
        return Verdict.reject(f"evidence_line {answer['evidence_line']!r} is not a line of the log")
    wrong = [line for line in hits if line not in accepted]
    if wrong:
        return Verdict.reject(
            f"evidence_line {answer['evidence_line']!r} points at "
            f"{wrong[0]!r}, which does not show the cause"
        )
    return Verdict.accept(f"{incident.component}, {incident.category}, evidence matches; cause {answer['cause']!r}")
