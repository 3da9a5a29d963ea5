"""Evidence: what a run leaves behind for the promotion record. No pytest in this package.

The writers, which render the gate's decision (``gate/decide.py``) into files and lines:

- ``verdict``  — the end of the run: the run record built once, ``decide`` called once, the bundle written
- ``summary``  — ``summary.json``: the run's facts, then the decision rendered (schema: ``bundle_format/schema.py``)
- ``report``   — ``report.md`` rendered from the summary
- ``junit``    — per-testcase properties (which request an item's timing describes) and junit.xml
- ``bundle``   — the files, redaction through ``redaction.py``, ``SHA256SUMS`` (``bundle_format/manifest.py``)
- ``terminal`` — the lines under the gate table, and the verdict as the run's last line
- ``job_summary`` — the CI job summary (``GITHUB_STEP_SUMMARY``), capped
- ``provenance`` — ``provenance.intoto.json``: an in-toto statement binding the bundle to the deployment
- ``plot``     — TTFT against prompt tokens, drawn with Pillow
- ``session``  — what is collected while the run goes on

Below them in this room, read by the gate's inputs and the pytest side:

- ``metrics``  — ``/metrics`` scrapes parsed tolerantly (vLLM names), deltas, per-lane properties
- ``answers``  — the answer journal (``answers.jsonl``), each answer with its role, and its run-end row

Elsewhere now: waivers, SLO rows and the baseline are the gate's inputs (``gate/``); the
statistics are ``stats.py``; the bundle's format and the reader of an earlier run are
``bundle_format/``.
"""
