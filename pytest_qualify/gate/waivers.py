"""Operator waivers for failed corpus items: a TOML file, checked strictly. No pytest here.

::

    [[waiver]]
    item = "test_multimodal.py::test_video[clip07]"   # a test id without the repetition, or a glob
    reason = "clip07's caption names a brand the model is told not to read out; ticket MM-12"
    expires = 2026-09-30                               # last day the waiver is valid
    # expect = 2                                       # required for a glob: the items it matches

Rules, because a waiver is the one way to turn a failure into a pass:

- only modules the profile marks waivable (the corpus) accept waivers; a waiver that names a
  test of a hard serving-contract module is a usage error;
- a waiver without a reason or an expiry date, or past its expiry date, is a usage error;
- a pattern (``*`` or ``?``) states how many items it expects to match (``expect = N``, items
  without their repetitions), held to the collection: another count is a usage error, so a
  pattern cannot quietly grow to waive more than its author read;
- no waiver may match every item of a module, nor may all waivers together: a module is judged,
  not waived;
- all waivers together may match at most the profile's ``[modules] max_waived`` items of a module
  (items without their repetitions; the seed waived 2 of 30 corpus items);
- a waiver that matches no test at all is reported as stale (it may hide a renamed test);
- waived items are listed in the report with the waiver's reason, never hidden.

Patterns: ``*`` matches any run of characters and ``?`` one character; everything else,
including the ``[...]`` of parametrized ids, is literal. A pattern is matched against the item
id (``test_x[case]``), the file-qualified id (``test_mod.py::test_x[case]``) and the full
node id, each without the ``repNofM`` repetition part.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_qualify.datafile import read_toml
from pytest_qualify.properties import Outcome
from pytest_qualify.repetition import without_repetition

KEYS = {"item", "reason", "expires", "expect"}


class WaiverError(ValueError):
    """A waiver file that cannot be used; the message names the file, the waiver and the rule."""


@dataclass(frozen=True)
class Waiver:
    pattern: str
    reason: str
    expires: dt.date
    index: int  # 1-based position in the file, for messages
    expect: int | None = None  # how many items (without repetitions) it matches; required for a glob

    @property
    def is_pattern(self) -> bool:
        return "*" in self.pattern or "?" in self.pattern

    @property
    def label(self) -> str:
        return f"waiver #{self.index} ({self.pattern!r})"

    def matches(self, ids: Iterable[str]) -> bool:
        rx = _compile(self.pattern)
        return any(rx.fullmatch(i) for i in ids)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"item": self.pattern, "reason": self.reason, "expires": self.expires.isoformat()}
        if self.expect is not None:
            out["expect"] = self.expect
        return out


def _compile(pattern: str) -> re.Pattern[str]:
    return re.compile("".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern), re.S)


def item_ids(nodeid: str, item: str | None = None) -> tuple[str, ...]:
    """Every id a waiver may name for one test item (repetition parts removed)."""
    full = without_repetition(nodeid)
    path, _, rest = full.partition("::")
    ids = [full]
    if rest:
        ids += [f"{path.rsplit('/', 1)[-1]}::{rest}", rest]
    if item:
        ids.append(without_repetition(f"x::{item}").split("::", 1)[1])
    return tuple(dict.fromkeys(ids))


def _date(value: Any, where: str) -> dt.date:
    if isinstance(value, dt.datetime):
        return value.date()
    if isinstance(value, dt.date):
        return value
    if isinstance(value, str):
        try:
            return dt.date.fromisoformat(value)
        except ValueError:
            pass
    raise WaiverError(f"{where}: 'expires' must be a date like 2026-09-30, got {value!r}")


def load_waivers(path: Path, today: dt.date | None = None) -> tuple[Waiver, ...]:
    """Parse and check a waiver file; raise :class:`WaiverError` on any rule broken."""
    today = today or dt.date.today()
    raw = read_toml(path, "waiver file", WaiverError)
    extra = set(raw) - {"waiver"}
    if extra:
        raise WaiverError(f"waiver file {path}: unknown top-level key(s) {sorted(extra)}; expected [[waiver]] tables")
    entries = raw.get("waiver", [])
    if not isinstance(entries, list):
        raise WaiverError(f"waiver file {path}: 'waiver' must be an array of tables ([[waiver]])")
    waivers = []
    for i, entry in enumerate(entries, start=1):
        where = f"waiver file {path}: waiver #{i}"
        if not isinstance(entry, dict):
            raise WaiverError(f"{where}: must be a table")
        unknown = set(entry) - KEYS
        if unknown:
            raise WaiverError(f"{where}: unknown key(s) {sorted(unknown)}; expected {sorted(KEYS)}")
        item, reason = entry.get("item"), entry.get("reason")
        if not isinstance(item, str) or not item.strip():
            raise WaiverError(f"{where}: 'item' must name a test id or a glob pattern")
        if not isinstance(reason, str) or not reason.strip():
            raise WaiverError(f"{where} ({item!r}): a waiver needs a 'reason'")
        if "expires" not in entry:
            raise WaiverError(f"{where} ({item!r}): a waiver needs an 'expires' date")
        expires = _date(entry["expires"], f"{where} ({item!r})")
        if expires < today:
            raise WaiverError(
                f"{where} ({item!r}) expired on {expires.isoformat()} (today is {today.isoformat()}): "
                "renew it with a new reason or fix the failure"
            )
        expect = entry.get("expect")
        if expect is not None and (isinstance(expect, bool) or not isinstance(expect, int) or expect < 1):
            raise WaiverError(f"{where} ({item!r}): 'expect' must be the number of items it matches (1 or more), "
                              f"got {expect!r}")
        waiver = Waiver(item.strip(), reason.strip(), expires, i, expect)
        if waiver.is_pattern and expect is None:
            raise WaiverError(f"{where} ({item!r}): a pattern must state how many items it expects to match "
                              "(expect = N, items without their repetitions)")
        waivers.append(waiver)
    return tuple(waivers)


@dataclass(frozen=True)
class Candidate:
    """A test item as waiver rules see it: its ids and its module."""

    nodeid: str
    module: str
    ids: tuple[str, ...]


def candidates(results: Iterable[Any]) -> list[Candidate]:
    """Item results (``gate.ItemResult``) as waiver rules see them."""
    return [Candidate(r.nodeid, r.module, item_ids(r.nodeid, r.item)) for r in results]


def hard_module_conflicts(
    waivers: Sequence[Waiver], items: Iterable[Candidate], waivable_modules: Sequence[str]
) -> list[str]:
    """One message per waiver that names a test of a module that cannot be waived."""
    problems: dict[int, str] = {}
    for cand in items:
        if cand.module in waivable_modules:
            continue
        for w in waivers:
            if w.index not in problems and w.matches(cand.ids):
                problems[w.index] = (
                    f"{w.label} names {without_repetition(cand.nodeid)} of the hard serving-contract module "
                    f"'{cand.module}'; only {', '.join(waivable_modules) or 'no modules'} accept waivers"
                )
    return [problems[i] for i in sorted(problems)]


def count_conflicts(waivers: Sequence[Waiver], items: Iterable[Candidate]) -> list[str]:
    """One message per waiver whose matches are not what it says: another count than its
    ``expect``, or every item of a module (a module is judged, never waived whole)."""
    per_module: dict[str, set[str]] = {}
    ids_of: dict[str, tuple[str, ...]] = {}
    module_of_item: dict[str, str] = {}
    for cand in items:
        label = without_repetition(cand.nodeid)
        per_module.setdefault(cand.module, set()).add(label)
        ids_of[label] = cand.ids
        module_of_item[label] = cand.module
    problems = []
    for w in waivers:
        matched = {label for label, ids in ids_of.items() if w.matches(ids)}
        if not matched:
            continue  # stale: reported with the verdict
        whole = sorted(m for m in {module_of_item[label] for label in matched}
                       if len(per_module[m]) > 1 and per_module[m] <= matched)
        if whole:
            problems.append(f"{w.label} matches every item of module '{whole[0]}' ({len(per_module[whole[0]])} items): "
                            "a waiver names items, never a whole module")
        elif w.expect is not None and len(matched) != w.expect:
            problems.append(f"{w.label} expects to match {w.expect} item(s) and matches {len(matched)} "
                            f"({', '.join(sorted(matched)[:3])}{', ...' if len(matched) > 3 else ''})")
    return problems


def total_conflicts(waivers: Sequence[Waiver], items: Iterable[Candidate], max_waived: Mapping[str, int]) -> list[str]:
    """One message per module whose items all waivers together match beyond what the profile
    allows: every item of it (a module is judged, never waived whole, not even by several waivers
    that each name part of it), or more than its ``max_waived`` items. Each waiver alone may keep
    to its ``expect`` and still, with the others, waive the whole module."""
    per_module: dict[str, dict[str, tuple[str, ...]]] = {}
    for cand in items:
        per_module.setdefault(cand.module, {})[without_repetition(cand.nodeid)] = cand.ids
    problems = []
    for module, labels in per_module.items():
        if module not in max_waived:
            continue  # not waivable: hard_module_conflicts says so
        by: list[Waiver] = []
        matched: set[str] = set()
        for w in waivers:
            hit = {label for label, ids in labels.items() if w.matches(ids)}
            if hit:
                by.append(w)
                matched |= hit
        named = ", ".join(w.label for w in by)
        if len(labels) > 1 and len(matched) == len(labels):
            problems.append(f"{named} together match every item of module '{module}' ({len(matched)} of "
                            f"{len(labels)}): a module is judged, never waived whole")
        elif len(matched) > max_waived[module]:
            problems.append(f"{named} together match {len(matched)} items of module '{module}'; the profile "
                            f"allows at most {max_waived[module]} (modules.max_waived)")
    return problems


@dataclass
class WaiverSet:
    """The run's waivers, and which items each one matched (for the report and stale check)."""

    waivers: tuple[Waiver, ...]
    waivable_modules: tuple[str, ...]
    source: str = ""
    matched: dict[int, list[str]] = field(default_factory=dict)  # waiver index -> node ids seen
    applied: dict[int, list[str]] = field(default_factory=dict)  # waiver index -> failed node ids waived

    def observe(self, items: Iterable[Candidate]) -> None:
        for cand in items:
            for w in self.waivers:
                if w.matches(cand.ids):
                    self.matched.setdefault(w.index, []).append(cand.nodeid)

    def waiver_for(self, result: Any) -> str | None:
        """decide's hook (gate/decide.py): the waiver reason for a failed item, or None."""
        # Only a failure can be waived: a skipped or interrupted item proves nothing either way.
        if result.module not in self.waivable_modules or result.outcome != Outcome.FAILED:
            return None
        ids = item_ids(result.nodeid, result.item)
        for w in self.waivers:
            if w.matches(ids):
                self.applied.setdefault(w.index, []).append(result.nodeid)
                return f"{w.reason} (waiver #{w.index}, expires {w.expires.isoformat()})"
        return None

    def stale(self) -> list[Waiver]:
        return [w for w in self.waivers if w.index not in self.matched]

    def unused(self) -> list[Waiver]:
        """Matched items, but none of them failed: the waiver is no longer needed."""
        return [w for w in self.waivers if w.index in self.matched and w.index not in self.applied]

    def as_dict(self) -> dict[str, Any]:
        return {
            "file": self.source,
            "waivers": [
                {**w.as_dict(), "matched": sorted(set(self.matched.get(w.index, []))),
                 "applied_to": sorted(set(self.applied.get(w.index, []))),
                 "status": "stale" if w.index not in self.matched
                 else "applied" if w.index in self.applied else "unused"}
                for w in self.waivers
            ],
        }
