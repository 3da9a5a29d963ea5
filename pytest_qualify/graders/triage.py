"""Timeout triage: the answer's JSON names the component, the cause and an evidence line.

Graded on the incident's ground truth (``fixtures/triage/incidents.toml``): the component equal
after normalisation (and never a red herring), the cause hitting every group of required keywords,
the evidence identifying only accepted log lines — quoted fully, in part (a distinctive piece, or
pieces around an ellipsis) or by its timestamp.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from functools import cache

from pytest_qualify.graders import Verdict
from pytest_qualify.graders.text import JsonNotFound, find_json_object, normalize

FIELDS = ("component", "cause", "evidence_line")
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
    cause: str
    cause_keywords: tuple[tuple[str, ...], ...]
    evidence: tuple[str, ...]
    red_herrings: tuple[str, ...]
    prompt: str

    @property
    def log(self) -> str:
        return "\n".join(self.log_lines) + "\n"


@cache
def load_incidents() -> tuple[Incident, ...]:
    """The incidents of ``fixtures/triage/incidents.toml``, with their logs read in."""
    from importlib import resources

    base = resources.files("pytest_qualify.fixtures").joinpath("triage")
    data = tomllib.loads(base.joinpath("incidents.toml").read_text())
    incidents = []
    for raw in data["incident"]:
        log = base.joinpath(raw["log"]).read_text()
        lines = tuple(line for line in log.splitlines() if line.strip())
        missing = [e for e in raw["evidence"] if e not in lines]
        if missing:
            raise ValueError(f"fixtures/triage: incident {raw['id']}: evidence not in {raw['log']}: {missing[0]!r}")
        incidents.append(Incident(
            id=raw["id"], symptom=raw["symptom"], log_lines=lines, component=raw["component"],
            aliases=tuple(raw.get("aliases", ())), cause=raw["cause"],
            cause_keywords=tuple(tuple(group) for group in raw["cause_keywords"]),
            evidence=tuple(raw["evidence"]), red_herrings=tuple(raw["red_herrings"]),
            prompt=data["prompt"].format(symptom=raw["symptom"], log=log),
        ))
    return tuple(incidents)


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


def grade_triage(content: str | None, incident: Incident) -> Verdict:
    """The answer's JSON against the incident's ground truth."""
    try:
        answer = find_json_object(content)
    except JsonNotFound as exc:
        return Verdict.reject(f"invalid_json: {exc}")
    missing = [f for f in FIELDS if not isinstance(answer.get(f), str) or not answer[f].strip()]
    if missing:
        return Verdict.reject(f"the JSON lacks {', '.join(missing)}: {answer}")

    named = normalize_component(answer["component"])
    if named in {normalize_component(r) for r in incident.red_herrings}:
        return Verdict.reject(
            f"component {answer['component']!r} is a red herring; "
            f"the cause is in {incident.component!r}"
        )
    if named not in {normalize_component(c) for c in (incident.component, *incident.aliases)}:
        return Verdict.reject(f"component {answer['component']!r} is not {incident.component!r}")

    cause = normalize(answer["cause"])
    for group in incident.cause_keywords:
        if not any(normalize(word) in cause for word in group):
            return Verdict.reject(
                f"cause {answer['cause']!r} names none of {list(group)}"
            )

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
    return Verdict.accept(f"{incident.component}, cause and evidence match")
