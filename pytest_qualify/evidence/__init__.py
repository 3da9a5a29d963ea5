"""Evidence: what a run leaves behind for the promotion record. No pytest in this package.

- ``metrics``  — ``/metrics`` scrapes parsed tolerantly (vLLM names), deltas, per-lane properties
- ``junit``    — per-testcase properties (which request an item's timing describes) and junit.xml
- ``summary``  — ``summary.json``, the run as data, validated by ``schemas/summary.schema.json``
- ``report``   — ``report.md`` rendered from the summary
- ``waivers``  — operator waivers for failed corpus items, checked strictly
- ``baseline`` — head-to-head against an earlier summary.json, regressions flagged or failed
- ``plot``     — TTFT against prompt tokens (matplotlib, optional)
- ``bundle``   — the files, their names, redaction through ``redaction.py`` and ``SHA256SUMS``
- ``session``  — what is collected while the run goes on
- ``verdict``  — the end of the run: waivers and baseline applied, the bundle written
- ``terminal`` — the lines under the gate table
"""
