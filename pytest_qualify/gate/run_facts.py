"""What the gate reads of a run's measurements: the sections of ``summary.json`` that the SLOs, the
recipe's claims and the baseline comparison are computed from, and nothing else. No pytest here.

The summary's other fact sections (the target, the server's metrics, the provenance, the protocol)
are for the writers only; ``evidence/end_of_run.py`` keeps them beside the record, so the gate cannot
come to depend on a section it does not judge.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class RunFacts:
    """The run's measurements as the gate reads them, each a section of ``summary.json``:

    - ``items``: every item's section (``module``, ``lane``, ``outcome``, ``properties``): the SLO
      rows' figures and the baseline's flips;
    - ``timing``: the run's timing (``decode_tok_s``, ``prefill_tok_s``, ``lanes``, ``sweep``,
      ``load``): the SLO, claim and baseline figures;
    - ``simulated``: the run measured the SIMULATED reference server (a claim's source says so; a
      baseline of the other kind is refused);
    - ``serving_facts``: what the engine says of its capacity and start-up (``server/facts.py``), or
      None when none were read: the claims on serving facts and the baseline's capacity rows;
    - ``profile`` and ``run``: the profile's name and deployment and the run's id and workers, which
      the baseline names where the two runs differ.

    Every field has an empty default, so a test states only what it judges."""

    items: tuple[Mapping[str, Any], ...] = ()
    timing: Mapping[str, Any] = field(default_factory=dict)
    simulated: bool = False
    serving_facts: Mapping[str, Any] | None = None
    profile: Mapping[str, Any] = field(default_factory=dict)
    run: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, sections: Mapping[str, Any]) -> RunFacts:
        """The gate's part of the summary's fact sections (``evidence/summary.py`` ``facts_section``)."""
        items: Sequence[Mapping[str, Any]] = sections.get("items") or ()
        return cls(items=tuple(items), timing=sections.get("timing") or {}, simulated=bool(sections.get("simulated")),
                   serving_facts=sections.get("serving_facts"), profile=sections.get("profile") or {},
                   run=sections.get("run") or {})

    def summary_sections(self, gate: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """These facts shaped as ``summary.json`` holds them, with this run's ``gate`` rows: what
        ``baseline.compare`` holds against an earlier run's summary, which has that shape on disk."""
        out: dict[str, Any] = {"run": dict(self.run), "simulated": self.simulated, "profile": dict(self.profile),
                               "timing": self.timing, "items": list(self.items), "gate": list(gate)}
        if self.serving_facts is not None:
            out["serving_facts"] = self.serving_facts
        return out
