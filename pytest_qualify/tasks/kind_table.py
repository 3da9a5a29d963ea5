"""The per-kind corpus table under the gate table: items and attempts passed per kind of media."""

from __future__ import annotations

from collections.abc import Iterable

from pytest_qualify.tasks.corpus import KIND_TITLES, KINDS


def kind_table(results: Iterable[tuple[str, str, bool]]) -> list[str]:
    """Per-kind corpus results from ``(kind, item id, passed)`` per item and repetition.

    An item counts as passed only when it passed in every repetition (pass^k), as in the gate;
    attempts count each repetition separately.
    """
    items: dict[str, dict[str, bool]] = {}
    attempts: dict[str, list[int]] = {}
    for kind, item, passed in results:
        items.setdefault(kind, {})
        items[kind][item] = items[kind].get(item, True) and passed
        counts = attempts.setdefault(kind, [0, 0])
        counts[0] += int(passed)
        counts[1] += 1
    rows = []
    totals = [0, 0, 0, 0]  # items passed, items, attempts passed, attempts
    for kind in sorted(items, key=lambda k: (KINDS.index(k) if k in KINDS else len(KINDS), k)):
        row = [sum(items[kind].values()), len(items[kind]), *attempts[kind]]
        totals = [t + x for t, x in zip(totals, row)]
        rows.append((KIND_TITLES.get(kind, kind), row))
    rows.append(("total", totals))
    lines = ["Corpus kind | Items passed | Attempts passed", "------------+--------------+----------------"]
    for title, (passed, n, ok, tries) in rows:
        lines.append(f"{title:<11} | {f'{passed}/{n}':<12} | {ok}/{tries}")
    return lines
