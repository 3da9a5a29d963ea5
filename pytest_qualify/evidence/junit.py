"""JUnit XML evidence: the run's verdict as the test counts CI reads, and the run's suite
properties. No pytest here.

The file keeps the xunit2 / Jenkins junit-10.xsd structure (:func:`structure_errors` holds it to
those rules): suite-level ``<properties>`` only — the per-item figures (module, lane, repetition,
ttft_s, e2e_s, tokens, tok/s, which request the timing describes) live in ``summary.json``'s
``items`` and, as text, in each test case's ``<system-out>`` (GitLab's test report reads that,
not properties). Repetitions keep their ids (``[rep2of3]``) in the name, so no two test cases share a
classname and name.

Red exactly when the verdict is not PASS: besides one test case per item and repetition (a
failed item is a ``<failure>`` whose ``type`` is its failure kind, ``qualify.format`` /
``qualify.fact`` / ``qualify.other``), every run-level reason the gate gave (``Decision.findings``:
an SLO row, a regression, a module that did not run, a partial selection, a dead server, a run that
could not be judged, ...) is a test case of classname :data:`GATE_CLASSNAME` named after its gate
row: a ``<failure>`` when the deployment was judged, an ``<error>`` when it was not. Those cases
are the decision's own (``Decision.gate_cases``, built once by the gate): this file, pytest's
``--junitxml`` and the terminal's counts render the same list. Every message is one line that names
the item (or row) and the reason, short enough that pytest 9.2's message shortening leaves it
whole; the element text holds the full report.

Per testcase the timing is that of the item's *first streamed request* (or its first request when
none streamed), plus ``requests`` (how many requests the item recorded) and ``requests_e2e_s``
(their summed end-to-end time): ``client/timing.py`` ``merge_answer_properties`` folds them into
the item's ``user_properties`` as each answer comes, which travel under pytest-xdist into
summary.json.

Suite properties (profile, model, revision, served name, engine version, launch command with
secrets redacted, verdict, protocol scope, provenance) are written here on the controller, because
``record_testsuite_property`` does not work under xdist.
"""

from __future__ import annotations

import platform
import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from typing import Any

from pytest_qualify.evidence.report import failures_split, row_verdict
from pytest_qualify.gate.decide import GATE_CLASSNAME, MESSAGE_MAX, GateCase, message
from pytest_qualify.properties import FAILURE_KINDS, JUNIT_MODULE, LANE, REPETITION, Outcome

# The protocol's per-testcase timing properties, present on every test case (empty when n/a).
TIMING_COLUMNS = ("ttft_s", "e2e_s", "prompt_tokens", "completion_tokens", "decode_tok_s", "prefill_tok_s")
PROTOCOL_PROPERTIES = (JUNIT_MODULE, LANE, REPETITION, *TIMING_COLUMNS)
# XML 1.0 cannot carry these characters at all; a model's answer may contain them.
_ILLEGAL_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def suite_properties(summary: Mapping[str, Any]) -> list[tuple[str, str]]:
    p, d, t = summary["profile"], summary["profile"]["deployment"], summary["target"]
    v = summary["verdict"]
    reasons = list(v["reasons"]) + [f"{f['module']}: {f['item']}, repetition {f['repetition']}: {f['reason']}"
                                    for f in failures_split(summary)[0][:20]]
    props = [
        ("profile", p["name"]),
        ("model", d["model"]),
        ("revision", d["revision"]),
        ("served_name", d["served_name"]),
        ("engine", d["engine"]),
        ("engine_version", t.get("engine_version") or ""),
        ("target", t["mode"]),
        ("simulated", "true" if summary["simulated"] else "false"),
        ("launch_command", t.get("launch_command") or ""),
        ("repeat", str(summary["run"]["repeat"])),
        ("run_id", summary["run"]["id"]),
        ("verdict", v["result"]),
    ]
    protocol = summary.get("protocol")
    if protocol:
        props.append(("protocol", protocol["label"]))
        props.append(("left_out_modules", ",".join(protocol["left_out"])))
    prov = summary.get("provenance")
    if prov:
        props += [(f"version_{name}", value) for name, value in prov["versions"].items()]
        props.append(("host", prov["host"]["hostname"]))
        ci = prov.get("ci")
        if ci:
            props.append(("ci_system", ci["system"]))
            props += [(f"ci_{k}", str(val)) for k, val in ci.items() if k != "system" and val]
    overall = (summary.get("stats") or {}).get("overall")
    if overall and overall["attempts"]:
        props.append(("attempts_passed", f"{overall['passed']}/{overall['attempts']}"))
        props.append(("pass_probability_wilson95", f"{overall['wilson_low']:.4f}-{overall['wilson_high']:.4f}"))
    if reasons:
        props.append(("verdict_reasons", "; ".join(reasons)))
    # Failed items by kind, run-wide and per module: format (the answer contract was not followed)
    # apart from fact (a wrong value in the slot) and other (nothing judged: a timeout, a refusal).
    kinds = [(g["module"], g["failures_by_kind"]) for g in summary.get("gate", ()) if g.get("failures_by_kind")]
    for kind in FAILURE_KINDS:
        props.append((f"{kind}_failures", str(sum(k[kind] for _, k in kinds))))
    props += [(f"failures_by_kind_{module}", f"format={k['format']} fact={k['fact']} other={k['other']}")
              for module, k in kinds if any(k.values())]
    # Each module row as the gate decided it (PASS, FAIL, INCOMPLETE), as every other reader shows it.
    props += [(f"gate_{g['module']}", f"{row_verdict(g)}: {g['result']}") for g in summary.get("gate", ())]
    props += [(f"check_{c['title']}", f"{'ok' if row_verdict(c) == 'PASS' else row_verdict(c)}: "
               f"{c['measured'] or 'not measured'} ({c['limit']})")
              for c in summary.get("checks") or ()]
    props += [(f"claim_{c['name']}", f"{c['status']}: {c.get('measured_text') or 'not measured'} (claimed {c['claimed_text']})")
              for c in summary.get("claims") or ()]
    props += stage_properties(summary)
    return props


def stage_properties(summary: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The stage (only ``full`` is a qualification), the served identity at both ends, and the
    promoted run a post-promotion check was held to; nothing when the summary has no stage."""
    stage = summary.get("stage")
    if not stage:
        return []
    props = [("stage", stage["name"]), ("stage_is_qualification", "true" if stage["qualifies"] else "false"),
             ("stage_verdict", stage["verdict_line"])]
    identity = summary.get("identity") or {}
    for end in ("start", "end"):
        reading = identity.get(end)
        if reading:
            props.append((f"identity_{end}", _describe(reading)))
    if identity.get("changed"):
        props.append(("identity_changed", identity["changed"]))
    promoted = summary.get("promoted")
    if promoted:
        props += [("promoted_run_id", promoted["run_id"]), ("promoted_summary_sha256", promoted["summary_sha256"]),
                  ("promoted_bundle_sha256sums_sha256", promoted["bundle_sha256sums_sha256"])]
    return props


def _describe(reading: Mapping[str, Any]) -> str:
    from pytest_qualify.promotion.identity import Identity

    return Identity.from_dict(reading).describe()


def clean(text: Any) -> str:
    """Text XML 1.0 can carry (a model's answer may hold control characters)."""
    return _ILLEGAL_XML.sub("\ufffd", str(text))


def classname_and_name(nodeid: str) -> tuple[str, str]:
    # As pytest's own junitxml does: path segments become dots, the last part is the name.
    parts = nodeid.split("::")
    path = parts[0].replace("/", ".").replace("\\", ".")
    if path.endswith(".py"):
        path = path[:-3]
    return ".".join([path, *parts[1:-1]]).lstrip("."), parts[-1]


def key_facts(item: Mapping[str, Any]) -> str:
    """The item's facts as plain text lines, for viewers that read no properties."""
    props = item["properties"]
    head = [f"module: {item['module']}", f"item: {item['item']}"]
    if item.get("lane"):
        head.append(f"lane: {item['lane']}")
    head.append(f"repetition: {item['repetition']} of {item['repetitions']}")
    timing = [f"{k}={props[k]}" for k in TIMING_COLUMNS if props.get(k) not in (None, "")]
    lines = [" · ".join(head), "outcome: " + item["outcome"]]
    if timing:
        lines.append("timing (client-observed): " + " ".join(timing))
    for key in ("finish_reason", "finish_check", "metrics_error"):
        if props.get(key) not in (None, "", "ok"):
            lines.append(f"{key}: {props[key]}")
    if item["outcome"] != Outcome.PASSED:
        lines.append(f"reason: {item['reason']}")
    if item.get("waiver"):
        lines.append(f"WAIVED: {item['waiver']}")
    return "\n".join(lines)


def item_failure(item: Mapping[str, Any]) -> tuple[str, str]:
    """(type, message) of a failed item: its failure kind, and one line naming the item and the reason."""
    where = f"{item['module']}: {item['item']}, repetition {item['repetition']}"
    return f"qualify.{item.get('failure_kind') or 'other'}", message(f"{where}: {item['reason']}")


def build_xml(summary: Mapping[str, Any], cases: Mapping[str, Any], gate: Sequence[GateCase],
              suite_name: str = "pytest-qualify") -> bytes:
    """The bundle's junit.xml: the summary's items, and ``gate``, the decision's run-level test cases
    (``Decision.gate_cases``: the summary was rendered from that decision)."""
    items: Sequence[Mapping[str, Any]] = summary["items"]
    failed = [i for i in items if i["outcome"] in ("failed", "rerun") and not i.get("waiver") and not i.get("not_judged")]
    failures = len(failed) + sum(1 for g in gate if g.tag == "failure")
    errors = sum(1 for g in gate if g.tag == "error")
    skipped = sum(1 for i in items if i["outcome"] == Outcome.SKIPPED or i.get("not_judged"))
    suites = ET.Element("testsuites", name="pytest-qualify")
    suite = ET.SubElement(
        suites, "testsuite", name=suite_name, tests=str(len(items) + len(gate)), failures=str(failures),
        errors=str(errors), skipped=str(skipped), time=f"{summary['run']['duration_s']:.3f}",
        timestamp=summary["run"]["started_at"], hostname=platform.node(),
    )
    sprops = ET.SubElement(suite, "properties")
    for name, value in suite_properties(summary):
        ET.SubElement(sprops, "property", name=name, value=clean(value))
    for item in items:
        classname, name = classname_and_name(item["nodeid"])
        case = cases.get(item["nodeid"])
        tc = ET.SubElement(suite, "testcase", classname=classname, name=name,
                           time=f"{(item.get('duration_s') or 0.0):.3f}")
        body = clean(getattr(case, "longrepr", "") or item["reason"])
        facts = key_facts(item)
        if item.get("not_judged"):
            # The gate did not judge it (a refused key, a steered run's void answers): skipped
            # "not judged: …", as pytest's --junitxml shows it; what it reported stays in system-out.
            ET.SubElement(tc, "skipped", type="pytest.skip", message=clean(message(item["not_judged"])))
            if item["outcome"] != Outcome.SKIPPED and item["reason"] != item["not_judged"]:
                facts += f"\n\n{body}"
        elif item["outcome"] == Outcome.SKIPPED:
            ET.SubElement(tc, "skipped", type="pytest.skip", message=clean(message(item["reason"])))
        elif item["outcome"] == Outcome.UNGRADED:
            # pytest reported it passed; the gate's own "not graded" test case says why it does not count.
            facts += f"\n\n{item['reason']}"
        elif item["outcome"] != Outcome.PASSED and item.get("waiver"):
            # A waived failure is still reported as what it was, with its waiver beside it.
            facts += f"\n\n{body}"
        elif item["outcome"] != Outcome.PASSED:
            kind, msg = item_failure(item)
            fail = ET.SubElement(tc, "failure", type=kind, message=clean(msg))
            fail.text = clean(f"{item['reason']}\n{facts}\n\n") + body
        ET.SubElement(tc, "system-out").text = clean(facts)
    for g in gate:
        tc = ET.SubElement(suite, "testcase", classname=GATE_CLASSNAME, name=g.name, time="0.000")
        node = ET.SubElement(tc, g.tag, type=g.type, message=clean(g.message))
        node.text = clean(g.text)
    ET.indent(suites)
    data = b'<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suites, encoding="utf-8", xml_declaration=False)
    problems = structure_errors(data)
    if problems:  # the writer's own bug: the run cannot pass on a file CI would skip
        raise ValueError("junit.xml breaks the xunit2 structure: " + "; ".join(problems[:5]))
    return data


# -- the structure CI's readers accept: Jenkins' junit-10.xsd and pytest's xunit2 family ------------

_TIME = re.compile(r"(([0-9]{0,3},)*[0-9]{3}|[0-9]{0,3})*(\.[0-9]{0,3})?")  # junit-10.xsd SUREFIRE_TIME
_SUITES_ATTRS = {"name", "time", "tests", "failures", "errors"}
_SUITE_ATTRS = {"name", "tests", "failures", "errors", "group", "time", "skipped", "timestamp", "hostname", "id",
                "package", "file", "log", "url", "version"}
_SUITE_REQUIRED = ("name", "tests", "failures", "errors")
_SUITE_CHILDREN = {"testsuite", "properties", "testcase", "system-out", "system-err"}
_CASE_ATTRS = {"name", "classname", "time"}  # xunit2: no file, line or url
_OUTCOMES = ("failure", "error", "skipped")
_CASE_CHILDREN = {*_OUTCOMES, "system-out", "system-err", "rerunFailure", "rerunError", "flakyFailure", "flakyError"}


def structure_errors(xml_bytes: bytes) -> list[str]:
    """What keeps a JUnit file from the xunit2 / junit-10.xsd structure (empty: it keeps it), plus
    this project's own rules: ``type`` and a one-line ``message`` on every failure and error (a
    message pytest 9.2 would shorten is too long), one outcome per test case, unique test cases,
    and suite counts that match the test cases."""
    try:
        root = ET.fromstring(xml_bytes)
    except ET.ParseError as exc:
        return [f"not XML: {exc}"]
    problems: list[str] = []

    def attrs(el: ET.Element, allowed: set[str], where: str) -> None:
        extra = sorted(set(el.attrib) - allowed)
        if extra:
            problems.append(f"{where}: attribute(s) {extra} not allowed")

    def time(el: ET.Element, where: str) -> None:
        t = el.get("time")
        if t is not None and not _TIME.fullmatch(t):
            problems.append(f"{where}: time {t!r} is not a junit-10 time")

    if root.tag != "testsuites":
        return [f"root element is <{root.tag}>, not <testsuites>"]
    attrs(root, _SUITES_ATTRS, "testsuites")
    time(root, "testsuites")
    for child in root:
        if child.tag != "testsuite":
            problems.append(f"testsuites: <{child.tag}> not allowed")
    for suite in root.iter("testsuite"):
        where = f"testsuite {suite.get('name')!r}"
        attrs(suite, _SUITE_ATTRS, where)
        time(suite, where)
        problems += [f"{where}: no {a}" for a in _SUITE_REQUIRED if suite.get(a) is None]
        problems += [f"{where}: <{c.tag}> not allowed" for c in suite if c.tag not in _SUITE_CHILDREN]
        props = suite.findall("properties")
        if len(props) > 1:
            problems.append(f"{where}: {len(props)} <properties> elements")
        for p in (x for ps in props for x in ps):
            if p.tag != "property" or set(p.attrib) != {"name", "value"}:
                problems.append(f"{where}: <properties> holds <{p.tag} {sorted(p.attrib)}>, not a property with name and value")
        seen: set[tuple[str | None, str | None]] = set()
        counted = dict.fromkeys(_OUTCOMES, 0)
        cases = suite.findall("testcase")
        for tc in cases:
            key = (tc.get("classname"), tc.get("name"))
            here = f"testcase {key[0]}::{key[1]}"
            if key[1] is None:
                problems.append(f"{here}: no name")
            if key in seen:
                problems.append(f"{here}: appears twice")
            seen.add(key)
            attrs(tc, _CASE_ATTRS, here)
            time(tc, here)
            for c in tc:
                if c.tag not in _CASE_CHILDREN:
                    problems.append(f"{here}: <{c.tag}> not allowed in a testcase")
            outcomes = [c for c in tc if c.tag in _OUTCOMES]
            if len(outcomes) > 1:
                problems.append(f"{here}: {len(outcomes)} outcomes ({', '.join(c.tag for c in outcomes)})")
            for c in outcomes:
                counted[c.tag] += 1
                attrs(c, {"type", "message"}, f"{here} <{c.tag}>")
                if len(c):
                    problems.append(f"{here} <{c.tag}>: child elements not allowed")
                if c.tag == "skipped":
                    continue
                if not c.get("type"):
                    problems.append(f"{here} <{c.tag}>: no type")
                msg = c.get("message") or ""
                if not msg.strip():
                    problems.append(f"{here} <{c.tag}>: no message")
                elif "\n" in msg or len(msg) > MESSAGE_MAX:
                    problems.append(f"{here} <{c.tag}>: message is not one line within {MESSAGE_MAX} characters")
            for c in tc:
                if c.tag in ("system-out", "system-err") and (len(c) or c.attrib):
                    problems.append(f"{here} <{c.tag}>: text only")
        for attr, tag in (("failures", "failure"), ("errors", "error"), ("skipped", "skipped")):
            if suite.get(attr) is not None and suite.get(attr) != str(counted[tag]):
                problems.append(f"{where}: {attr}={suite.get(attr)} but {counted[tag]} <{tag}> test cases")
        if suite.get("tests") is not None and suite.get("tests") != str(len(cases)):
            problems.append(f"{where}: tests={suite.get('tests')} but {len(cases)} test cases")
    return problems


def counts(xml_bytes: bytes) -> dict[str, int]:
    """tests, failures, errors and skipped summed over the file's suites, as CI reads them."""
    root = ET.fromstring(xml_bytes)
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    return {k: sum(int(s.get(k) or 0) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
