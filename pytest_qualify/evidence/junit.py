"""JUnit XML evidence: per-testcase properties and the run's suite properties. No pytest here.

Per testcase: module, item, lane, repetition, the timing of the item's *first streamed request*
(or its first request when none streamed) — ttft_s, ttfvt_s, e2e_s, prompt_tokens,
completion_tokens, decode_tok_s, prefill_tok_s — plus ``requests`` (how many requests the item
recorded) and ``requests_e2e_s`` (their summed end-to-end time), and ``reason`` on failure.
These travel as the item's ``user_properties``, so they survive pytest-xdist and also land in a
``--junitxml`` file pytest writes itself.

Suite properties (profile, model, revision, served name, engine version, launch command with
secrets redacted, verdict) are written here on the controller, because
``record_testsuite_property`` does not work under xdist.

The file is xunit1-shaped (``<properties>`` inside ``<testcase>``), which is what pytest itself
writes for user properties and what CI viewers read. Some viewers read no ``<properties>`` at all
(GitLab's test report shows name, classname, time, the failure and ``system-out``), so every test
case also carries its key facts as text in ``<system-out>``, and a failure's message is its
one-line reason with the facts at the top of its body. Repetitions keep their ids
(``[rep2of3]``) in the name, so no two test cases share a classname and name.
"""

from __future__ import annotations

import platform
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pytest_qualify.client.timing import TIMING_PROPERTIES, RequestMetrics
from pytest_qualify.properties import FAILURE_KINDS

PRIMARY_KEYS = frozenset(TIMING_PROPERTIES) | {"timing_source", "timing_request", "cached_tokens"}
COUNT_KEYS = frozenset({"requests", "requests_e2e_s"})
# The protocol's per-testcase timing properties, present on every test case (empty when n/a).
TIMING_COLUMNS = ("ttft_s", "e2e_s", "prompt_tokens", "completion_tokens", "decode_tok_s", "prefill_tok_s")
PROTOCOL_PROPERTIES = ("module", "lane", "repetition", *TIMING_COLUMNS)
# Where each protocol property comes from in the item's user properties.
RENAMED = {"qualify_module": "module"}
# XML 1.0 cannot carry these characters at all; a model's answer may contain them.
_ILLEGAL_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def merge_answer_properties(props: list[tuple[str, Any]], metrics: RequestMetrics, streamed: bool,
                            cached_tokens: int | None = None) -> None:
    """Fold one request's metrics into an item's user properties, in place.

    The first streamed request is the item's timing (a context lane's main request is streamed;
    a helper request before it — a token count, a warm-up — is not); until one arrives, the first
    request stands in. Every request bumps ``requests`` and ``requests_e2e_s``.
    """
    current = dict(props)
    n = int(current.get("requests", 0)) + 1
    total = float(current.get("requests_e2e_s", 0.0)) + (metrics.e2e_s or 0.0)
    take = n == 1 or (streamed and current.get("timing_source") != "streamed")
    drop = COUNT_KEYS | (PRIMARY_KEYS if take else frozenset())
    props[:] = [(k, v) for k, v in props if k not in drop]
    if take:
        props.extend((k, round(v, 6) if isinstance(v, float) else v) for k, v in metrics.as_properties().items())
        if cached_tokens is not None:
            props.append(("cached_tokens", cached_tokens))
        props.append(("timing_source", "streamed" if streamed else "non-streamed"))
        props.append(("timing_request", n))
    props.append(("requests", n))
    props.append(("requests_e2e_s", round(total, 6)))


def suite_properties(summary: Mapping[str, Any]) -> list[tuple[str, str]]:
    p, d, t = summary["profile"], summary["profile"]["deployment"], summary["target"]
    v = summary["verdict"]
    reasons = list(v["reasons"]) + [f"{f['module']}: {f['item']}, repetition {f['repetition']}: {f['reason']}"
                                    for f in v["failures"][:20]]
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
    props += [(f"check_{c['title']}", f"{'ok' if c['ok'] else 'FAIL'}: {c['measured'] or 'not measured'} ({c['limit']})")
              for c in summary.get("checks") or ()]
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


def _clean(text: Any) -> str:
    return _ILLEGAL_XML.sub("\ufffd", str(text))


def _classname_and_name(nodeid: str) -> tuple[str, str]:
    # As pytest's own junitxml does: path segments become dots, the last part is the name.
    parts = nodeid.split("::")
    path = parts[0].replace("/", ".").replace("\\", ".")
    if path.endswith(".py"):
        path = path[:-3]
    return ".".join([path, *parts[1:-1]]).lstrip("."), parts[-1]


def testcase_properties(item: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The properties of one protocol item: every protocol name on every test case (empty when
    the item has no such value, e.g. no lane or no streamed request), then the item's own."""
    props = dict(item["properties"])
    out: list[tuple[str, str]] = [
        ("module", item["module"]),
        ("item", item["item"]),
        ("lane", str(item.get("lane") or "")),
        ("repetition", str(item["repetition"])),
        ("repetitions", str(item["repetitions"])),
    ]
    out += [(k, _text(props.get(k))) for k in TIMING_COLUMNS]
    if item.get("failure_kind"):
        out.append(("failure_kind", str(item["failure_kind"])))  # format | fact | other, on every failed case
    done = {k for k, _ in out} | {"qualify_module", "reason", "waiver", "failure_kind"}
    out += [(RENAMED.get(k, k), _text(v)) for k, v in props.items() if k not in done and RENAMED.get(k, k) not in done]
    if item["outcome"] != "passed":
        out.append(("reason", item["reason"]))
    if item.get("waiver"):
        out.append(("waiver", item["waiver"]))
    return out


def _text(value: Any) -> str:
    return "" if value is None else str(value)


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
    if item["outcome"] != "passed":
        lines.append(f"reason: {item['reason']}")
    if item.get("waiver"):
        lines.append(f"WAIVED: {item['waiver']}")
    return "\n".join(lines)


def build_xml(summary: Mapping[str, Any], cases: Mapping[str, Any], suite_name: str = "pytest-qualify") -> bytes:
    items: Sequence[Mapping[str, Any]] = summary["items"]
    failures = sum(1 for i in items if i["outcome"] in ("failed", "rerun") and not i.get("waiver"))
    skipped = sum(1 for i in items if i["outcome"] == "skipped")
    suites = ET.Element("testsuites", name="pytest-qualify")
    suite = ET.SubElement(
        suites, "testsuite", name=suite_name, tests=str(len(items)), failures=str(failures), errors="0",
        skipped=str(skipped), time=f"{summary['run']['duration_s']:.3f}", timestamp=summary["run"]["started_at"],
        hostname=platform.node(),
    )
    sprops = ET.SubElement(suite, "properties")
    for name, value in suite_properties(summary):
        ET.SubElement(sprops, "property", name=name, value=_clean(value))
    for item in items:
        classname, name = _classname_and_name(item["nodeid"])
        case = cases.get(item["nodeid"])
        tc = ET.SubElement(suite, "testcase", classname=classname, name=name,
                           time=f"{(item.get('duration_s') or 0.0):.3f}")
        tprops = ET.SubElement(tc, "properties")
        for key, value in testcase_properties(item):
            ET.SubElement(tprops, "property", name=_clean(key), value=_clean(value))
        body = _clean(getattr(case, "longrepr", "") or item["reason"])
        facts = key_facts(item)
        if item["outcome"] == "skipped":
            ET.SubElement(tc, "skipped", message=_clean(item["reason"]))
        elif item["outcome"] != "passed" and item.get("waiver"):
            # A waived failure is still reported as what it was, with its waiver beside it.
            facts += f"\n\n{body}"
        elif item["outcome"] != "passed":
            fail = ET.SubElement(tc, "failure", message=_clean(item["reason"]))
            fail.text = _clean(f"{item['reason']}\n{facts}\n\n") + body
        ET.SubElement(tc, "system-out").text = _clean(facts)
    ET.indent(suites)
    return b'<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suites, encoding="utf-8", xml_declaration=False)


def all_testcases_have(xml_bytes: bytes, names: Iterable[str]) -> list[str]:
    """Test cases missing any of ``names`` as a property (empty list: all have them)."""
    root = ET.fromstring(xml_bytes)
    wanted = set(names)
    missing = []
    for tc in root.iter("testcase"):
        have = {p.get("name") for p in tc.iter("property")}
        if not wanted <= have:
            missing.append(f"{tc.get('classname')}::{tc.get('name')} lacks {sorted(wanted - have)}")
    return missing
