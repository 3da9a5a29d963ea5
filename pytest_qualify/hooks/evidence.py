"""The evidence's pytest side: waivers and the baseline loaded at configure (a bad file is a usage
error before any server starts), /metrics scraped at the run's start and end and around each
context-lane item, protocol names on every item, and pytest's own ``--junitxml`` file made to say
what the bundle's junit.xml says: the suite properties, a test case per run-level reason of the
gate, the xunit2 structure. The writers are ``evidence/`` (no pytest there)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Generator, Sequence
from pathlib import Path
from typing import Any

import pytest

from pytest_qualify.evidence.metrics import Snapshot
from pytest_qualify.gate.decide import GATE_CLASSNAME, Decision, GateCase, ItemResult
from pytest_qualify.evidence.session import EvidenceCollector, EvidenceState
from pytest_qualify.hooks.collection import item_label
from pytest_qualify.hooks.results import reason_of
from pytest_qualify.hooks.server_session import make_client
from pytest_qualify.redaction import redact
from pytest_qualify.run import RunState, module_of
from pytest_qualify import properties

def load_evidence_state(config: pytest.Config, state: RunState) -> EvidenceState:
    """Waivers and the baseline, loaded now: a bad file is a usage error before any server starts."""
    from pytest_qualify.gate.baseline import (
        DEFAULT_THRESHOLD_PCT, BaselineError, check_comparable, load_baseline,
    )
    from pytest_qualify.gate.waivers import WaiverError, WaiverSet, load_waivers
    from pytest_qualify.settings import Mode

    ev = EvidenceState()
    settings = state.settings
    if settings.waivers:
        try:
            ev.waivers = WaiverSet(load_waivers(Path(settings.waivers)), state.profile.waivable_modules,
                                   str(settings.waivers))
        except WaiverError as exc:
            raise pytest.UsageError(f"--qualify-waivers: {exc}") from None
    ev.fail_on_regression = settings.fail_on_regression_pct is not None
    ev.regression_threshold_pct = (
        settings.fail_on_regression_pct if settings.fail_on_regression_pct is not None else DEFAULT_THRESHOLD_PCT
    )
    if settings.baseline and not state.is_worker:
        try:
            ev.baseline = load_baseline(Path(settings.baseline))
            # The reference server is SIMULATED before it starts; an endpoint says so only once
            # contacted, and the gate refuses a mismatch then.
            check_comparable(ev.baseline, workload=state.profile.workload(settings.stage),
                             path=str(settings.baseline),
                             simulated=True if settings.mode == Mode.REFERENCE else None)
        except BaselineError as exc:
            raise pytest.UsageError(f"--qualify-baseline: {exc}") from None
        ev.baseline_path = str(settings.baseline)
    try:
        ev.workers = int(getattr(config.option, "numprocesses", 0) or 0)
    except (TypeError, ValueError):
        ev.workers = 0
    return ev


def scrape(state: RunState, name: str, client: Any = None) -> Snapshot | str:
    """GET /metrics, keep it as ``metrics-<name>.prom`` and return the parsed snapshot, or the
    error text: a missing /metrics (a router in front of vLLM) costs the cross-check, not the run.
    Without ``client`` a short-lived one is used (the session's is closed by the end of the run)."""
    from pytest_qualify.evidence.bundle import save_snapshot

    own = client is None
    try:
        if own:
            client = make_client(state)
        try:
            text = client.http.get("/metrics", timeout=10.0).raise_for_status().text
        finally:
            if own:
                client.close()
        return save_snapshot(state.run_dir, name, text, state.secrets)
    except Exception as exc:  # noqa: BLE001 - any failure is recorded as the reason
        return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


def _xunit2_cases(xml: Any, waived: Sequence[ItemResult], not_judged: Sequence[tuple[str, str]] = (),
                  secrets: Sequence[str] = ()) -> None:
    """Each finished test case of pytest's writer without ``<properties>`` (xunit2 has none: the
    figures go to ``system-out``), with a ``type`` and a one-line message on a failure or error, a
    failed item the gate waived shown as the bundle's junit.xml shows it: passed, with its waiver
    and its failure in ``system-out`` (a waived corpus item must not turn a PASS red), and an item
    the gate did not judge (``Decision.not_judged``: a refused key, a steered run's void answers)
    skipped with the gate's "not judged: …", as the bundle's junit.xml shows it."""
    from pytest_qualify.evidence.junit import classname_and_name, message

    waivers = {classname_and_name(r.nodeid): r.waiver for r in waived}
    unjudged = {classname_and_name(nodeid): redact(why, secrets) for nodeid, why in not_judged}
    for reporter in xml.node_reporters_ordered:
        case = reporter.to_xml()  # a finished reporter returns the same element every time
        why = unjudged.get((case.get("classname"), case.get("name")))
        if why is not None:
            was = [node for node in case if node.tag in ("failure", "error", "skipped")]
            for node in was:
                case.remove(node)
                xml.stats[node.tag] -= 1  # pytest counts a case by its outcome: this one is now skipped
            if was:
                out = case.find("system-out")
                if out is None:
                    out = ET.SubElement(case, "system-out")
                told = "\n".join(f"{node.get('message') or ''}\n{node.text or ''}" for node in was)
                out.text = (out.text or "") + ("\n\n" if out.text else "") + told
            skipped = ET.Element("skipped", type="pytest.skip", message=message(why))
            skipped.text = why
            case.insert(0, skipped)
            xml.stats["skipped"] += 1
            if not was:
                xml.stats["passed"] -= 1
        waiver = waivers.get((case.get("classname"), case.get("name")))
        for node in case.findall("failure") if waiver else ():
            case.remove(node)
            xml.stats["failure"] -= 1  # pytest counts a case by its outcome: this one now passed
            xml.stats["passed"] += 1
            out = case.find("system-out")
            if out is None:
                out = ET.SubElement(case, "system-out")
            out.text = f"WAIVED: {waiver}\n{node.get('message') or ''}\n\n{node.text or ''}\n" + (out.text or "")
        for props in case.findall("properties"):
            case.remove(props)
            text = "\n".join(f"{p.get('name')}: {p.get('value')}" for p in props if p.get("value") not in (None, ""))
            out = case.find("system-out")
            if out is None:
                out = ET.SubElement(case, "system-out")
            out.text = (text + "\n\n" + (out.text or "")).rstrip() + "\n"
        for node in (*case.findall("failure"), *case.findall("error")):
            node.set("type", node.get("type") or f"pytest.{node.tag}")
            node.set("message", message(node.get("message") or node.text or node.tag))


def _add_gate_cases(xml: Any, cases: Sequence[GateCase], secrets: Sequence[str]) -> None:
    """The decision's run-level test cases (``Decision.gate_cases``) into pytest's writer."""
    from pytest_qualify.evidence.junit import clean

    for g in cases:
        reporter = xml.node_reporter(g.nodeid)
        reporter.attrs.update(classname=GATE_CLASSNAME, name=g.name)
        node = ET.Element(g.tag, type=g.type, message=clean(redact(g.message, secrets)))
        node.text = clean(redact(g.text, secrets))
        reporter.append(node)  # counts it as a failure or an error
        reporter.finalize()


class EvidenceHooks:
    """Registered in every process: the per-item hooks run where the test runs (an xdist worker),
    the collecting ones only on the controller."""

    def __init__(self, state: RunState, ev: EvidenceState) -> None:
        self.state = state
        self.ev = ev
        self.collector = EvidenceCollector(ev)

    # -- the run's start and end (called by steps.RunSteps, on the controller) --

    def scrape_start(self) -> None:
        if self.state.startup_error or not self.state.base_url:
            return
        self._keep("start", scrape(self.state, "start"))

    def scrape_end(self) -> None:
        state = self.state
        if state.startup_error or not state.base_url:
            return
        if state.target is not None and state.target.died():
            self.ev.metrics_errors["end"] = "server died before the end of the run"
            return
        self._keep("end", scrape(state, "end"))

    def _keep(self, name: str, result: Snapshot | str) -> None:
        if isinstance(result, str):
            self.ev.metrics_errors[name] = result
        else:
            self.ev.snapshots[name] = result

    def add_junit_suite_properties(self, config: pytest.Config, decision: Decision) -> None:
        """pytest's own --junitxml file tells what the bundle's junit.xml tells (its writer runs after
        the end steps): the suite properties (from the summary, when it was written), the
        decision's test case per run-level reason (``decision.gate_cases``, so its counts are red
        exactly when the verdict is not PASS), and the xunit2 structure — the item's properties,
        which pytest writes inside each test case, move to its ``system-out``."""
        # pytest's writer is reached through its stash key, not a public hook, because none does
        # this: ``record_testsuite_property`` is a fixture (it runs inside a test, before the gate
        # has decided), the gate's cases are no test's reports (one sent through
        # ``pytest_runtest_logreport`` would also enter pytest's counts, ``--lf`` and the
        # terminal's list, which the end steps write themselves), and a written case cannot be
        # changed by any hook (a waived failure shown passed, xunit2's properties in system-out).
        # Where it is gone or changed the bundle's junit.xml, written by this project, is the record.
        try:
            from _pytest.junitxml import xml_key
        except ImportError:  # pytest moved it: the bundle's junit.xml still has them
            return
        xml = config.stash.get(xml_key, None)
        if xml is None:
            return
        from pytest_qualify.evidence.junit import suite_properties

        secrets = self.state.secrets
        if self.ev.summary is not None:
            for name, value in suite_properties(self.ev.summary):
                xml.add_global_property(name, redact(value, secrets))
        try:
            _xunit2_cases(xml, decision.waived, decision.not_judged, secrets)
            _add_gate_cases(xml, decision.gate_cases, secrets)
        except (AttributeError, TypeError):  # pytest's writer changed: the bundle's junit.xml is the record
            pass

    # -- pytest's hooks --

    def waiver_usage_error(self, items: list[pytest.Item]) -> str | None:
        """A waiver that names a hard serving-contract test, matches a whole module or another
        number of items than it expects, or waivers that together match a whole module or more
        items than the profile's ``max_waived``: a usage error, found at the end of collection, before the
        server starts (steps.collection_usage_error; on xdist workers too, for the controller)."""
        ev = self.ev
        if ev.waivers is None:
            return None
        from pytest_qualify.gate.waivers import (Candidate, count_conflicts, hard_module_conflicts, item_ids,
                                                 total_conflicts)

        candidates = [
            Candidate(item.nodeid, module, item_ids(item.nodeid, item_label(item)))
            for item in items
            if (module := module_of(item)) is not None
        ]
        conflicts = hard_module_conflicts(ev.waivers.waivers, candidates, ev.waivers.waivable_modules)
        conflicts = conflicts or count_conflicts(ev.waivers.waivers, candidates)
        conflicts = conflicts or total_conflicts(ev.waivers.waivers, candidates, dict(self.state.profile.max_waived))
        return f"--qualify-waivers {ev.waivers.source}: " + "; ".join(conflicts) if conflicts else None

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if not self.state.is_worker:
            self.collector.pytest_runtest_logreport(report)

    @pytest.hookimpl(wrapper=True)
    def pytest_pyfunc_call(self, pyfuncitem: pytest.Function) -> Generator[None, Any, Any]:
        """The protocol item's verdicts (``checks.require``) go to the answer journal while its body
        runs: the proof that a pass was graded; the slots each read go to the transcripts with it.
        Around the body itself, so a plugin that answers the call without running it leaves no verdict."""
        if module_of(pyfuncitem) is None:
            return (yield)
        from pytest_qualify import checks
        from pytest_qualify.evidence.answers import record_verdict

        run_dir, test, secrets = self.state.run_dir, pyfuncitem.nodeid, self.state.secrets
        token = checks.VERDICT_SINK.set(lambda verdict: record_verdict(run_dir, test, verdict, secrets))
        try:
            return (yield)
        finally:
            checks.VERDICT_SINK.reset(token)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, Any, Any]:
        """Scrape /metrics around each context-lane item: the server's own TTFT for the lane and any
        prefix-cache hit during it land in the item's properties, and a held stream's TTFT is the
        engine's where it is known (``evidence.metrics.lane_timing``)."""
        state = self.state
        props = dict(item.user_properties)
        lane = props.get(properties.LANE)
        if lane is None or state.client is None or state.startup_error or state.dead:
            return (yield)
        from pytest_qualify.evidence.bundle import lane_metrics_name

        label, rep = str(props.get(properties.ITEM, item.name)), int(props.get(properties.REPETITION, 1))
        before = scrape(state, lane_metrics_name(label, str(lane), rep, "before"), state.client)
        try:
            return (yield)
        finally:
            after = scrape(state, lane_metrics_name(label, str(lane), rep, "after"), state.client)
            if isinstance(before, str) or isinstance(after, str):
                item.user_properties.append(("metrics_error", before if isinstance(before, str) else after))
            else:
                from pytest_qualify.evidence.metrics import delta, lane_properties, lane_timing

                timed, d = dict(item.user_properties), delta(before, after)
                # A held stream's TTFT from the engine where it is known (replacing the client's figures).
                found = {**lane_properties(d, timed.get("requests")), **lane_timing(d, timed)}
                item.user_properties[:] = [(k, v) for k, v in item.user_properties if k not in found]
                item.user_properties.extend(found.items())

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        """Protocol names for pytest's own --junitxml too: ``module``, and ``reason`` on failure
        (user properties reach the file from the teardown report, also under xdist)."""
        report = yield
        props = item.user_properties
        keys = {k for k, _ in props}
        if properties.MODULE in keys:
            if properties.JUNIT_MODULE not in keys:
                props.append((properties.JUNIT_MODULE, dict(props)[properties.MODULE]))
            if report.failed and properties.REASON not in keys:
                props.append((properties.REASON, ("" if report.when == "call" else f"[{report.when}] ") + reason_of(report)))
            kind = getattr(call.excinfo.value, properties.FAILURE_KIND, None) if call.excinfo is not None else None
            if report.failed and kind and properties.FAILURE_KIND not in keys:
                # format | fact, as the verdict said (checks.require); the gate counts them apart.
                props.append((properties.FAILURE_KIND, kind))
                report.user_properties.append((properties.FAILURE_KIND, kind))
            if report.when == "teardown":
                # Every protocol name on every test case, empty where the item has no such value.
                from pytest_qualify.evidence.junit import PROTOCOL_PROPERTIES

                missing = [(k, "") for k in PROTOCOL_PROPERTIES if k not in keys and k != properties.JUNIT_MODULE]
                props.extend(missing)
                report.user_properties.extend(missing)
        return report


