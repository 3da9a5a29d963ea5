"""``report.html``: the bundle as one self-contained page a signer can look into. No pytest here.

A pure rendering of ``summary.json``, the run's transcripts (``transcripts.jsonl``) and the TTFT
plot's bytes: the same bundle gives the same bytes, so ``python -m pytest_qualify report DIR``
rebuilds it and ``SHA256SUMS`` still holds. Nothing is fetched: no script, font or stylesheet from
anywhere, the plot is a data URL, and the page's Content-Security-Policy forbids every request but
``data:`` images. It reads without JavaScript (``<details>``); its filter (failed / format / fact,
and per module) is radio inputs and ``:checked`` selectors. Every text from the run — an answer
above all — is untrusted and goes through :func:`html.escape`.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from pytest_qualify.evidence.report import claim_result, fact_value, failures_split, row_verdict
from pytest_qualify.evidence.transcripts import ASKED, SLOTS, by_item

HTML_FILE = "report.html"
CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"
# Request fields shown in the request's settings table, in this order (the rest follow, sorted).
SETTINGS_ORDER = ("model", "stream", "max_tokens", "temperature", "seed", "top_p", "stop", "n", "tool_choice",
                  "parallel_tool_calls", "response_format", "structured_outputs", "chat_template_kwargs",
                  "stream_options", "timeout_s", "cache_salt")
STATUS_FILTERS = (("all", "all items"), ("failed", "failed"), ("format", "format failures"),
                  ("fact", "fact failures"))

STYLE = """
:root{--fg:#1b1f24;--muted:#57606a;--line:#d0d7de;--bg:#fff;--soft:#f6f8fa;--fail:#b42318;--failbg:#fdecea;
--pass:#1a7f37;--passbg:#e9f6ec;--warn:#9a6700;--warnbg:#fff8c5;--sim:#6f42c1;--simbg:#f3edff}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;color:var(--fg);background:var(--bg)}
header,nav,main,footer{max-width:1180px;margin:0 auto;padding:0 20px}
h1{font-size:22px;margin:18px 0 8px}h2{font-size:17px;margin:22px 0 8px;border-bottom:1px solid var(--line);padding-bottom:4px}
h3{font-size:14px;margin:14px 0 6px}h4{font-size:13px;margin:10px 0 4px;color:var(--muted);text-transform:uppercase;letter-spacing:.04em}
code,pre,.mono{font-family:ui-monospace,"SFMono-Regular",Menlo,Consolas,"DejaVu Sans Mono",monospace;font-size:12.5px}
pre{background:var(--soft);border:1px solid var(--line);border-radius:6px;padding:8px 10px;margin:4px 0;white-space:pre-wrap;word-break:break-word;max-height:28em;overflow:auto}
table{border-collapse:collapse;margin:4px 0 10px}td,th{border:1px solid var(--line);padding:3px 8px;text-align:left;vertical-align:top}
th{background:var(--soft);font-weight:600}
.verdict{display:inline-block;padding:2px 12px;border-radius:6px;font-weight:700;font-size:18px;letter-spacing:.03em}
.v-PASS{background:var(--passbg);color:var(--pass);border:1px solid var(--pass)}
.v-FAIL{background:var(--failbg);color:var(--fail);border:1px solid var(--fail)}
.v-INCOMPLETE{background:var(--warnbg);color:var(--warn);border:1px solid var(--warn)}
.sim{background:var(--simbg);color:var(--sim);border:1px solid var(--sim);border-radius:6px;padding:8px 12px;margin:8px 0;font-weight:600}
.badge{display:inline-block;min-width:44px;text-align:center;border-radius:4px;padding:0 6px;font-weight:700;font-size:12px}
.b-ok{background:var(--passbg);color:var(--pass)}.b-fail{background:var(--failbg);color:var(--fail)}.b-other{background:var(--soft);color:var(--muted)}
.b-incomplete{background:var(--warnbg);color:var(--warn)}.gate>details.unjudged>summary{background:var(--warnbg)}
.kind{font-size:11px;color:var(--muted);border:1px solid var(--line);border-radius:4px;padding:0 4px;margin-left:4px}
.muted{color:var(--muted)}.reason{color:var(--fail)}
details>summary{cursor:pointer;list-style:none}details>summary::-webkit-details-marker{display:none}
details>summary::before{content:"\\25B8";display:inline-block;width:1em;color:var(--muted)}details[open]>summary::before{content:"\\25BE"}
.gate{border:1px solid var(--line);border-radius:6px;overflow:hidden}
.gate .row,.gate>details>summary{display:grid;grid-template-columns:1.1em minmax(0,1fr) 260px 70px;gap:8px;padding:5px 10px;border-top:1px solid var(--line);align-items:baseline}
.gate .row{grid-template-columns:minmax(0,1fr) 260px 70px;padding-left:28px}
.gate .head{background:var(--soft);font-weight:600;border-top:0}
.gate>details.failing>summary{background:var(--failbg)}
.items{padding:4px 10px 10px 28px;border-top:1px solid var(--line);background:#fcfcfd}
details.item{border:1px solid var(--line);border-radius:6px;margin:5px 0;background:var(--bg);scroll-margin-top:96px}
details.item>summary{padding:4px 8px}details.item.failed>summary{background:var(--failbg)}
details.item>.body{padding:4px 12px 10px;border-top:1px solid var(--line)}
.asked{border-left:3px solid var(--line);padding-left:10px;margin:10px 0}
.cols{display:grid;grid-template-columns:minmax(0,1fr) minmax(0,1fr);gap:14px}
@media (max-width:900px){.cols{grid-template-columns:1fr}}
.msg{margin:4px 0}.role{font-weight:600;font-size:12px;color:var(--muted)}
nav.filter{position:sticky;top:0;background:var(--bg);border-bottom:1px solid var(--line);padding-top:6px;padding-bottom:6px;z-index:2}
nav.filter label{display:inline-block;border:1px solid var(--line);border-radius:14px;padding:1px 10px;margin:2px 2px;cursor:pointer;font-size:13px}
.visually-hidden{position:absolute;left:-9999px}
img.plot{max-width:100%;border:1px solid var(--line);border-radius:6px}
a{color:#0969da}details.inline{display:inline}details.inline[open]{display:block}
"""


def _e(value: Any) -> str:
    return escape("" if value is None else str(value), quote=True)


def _json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False, default=str)


def _pre(text: Any, cls: str = "") -> str:
    return f'<pre{f" class={chr(34)}{cls}{chr(34)}" if cls else ""}>{_e(text)}</pre>'


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "-", text).strip("-") or "x"


def _num(value: Any) -> float | None:
    try:
        return float(value) if value not in (None, "") and not isinstance(value, bool) else None
    except (TypeError, ValueError):
        return None


def _seconds(value: Any) -> str:
    v = _num(value)
    if v is None:
        return "-"
    return f"{v * 1000:.1f} ms" if v < 1 else f"{v:.3f} s"


def _count(value: Any) -> str:
    v = _num(value)
    return "-" if v is None else f"{v:,.0f}"


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]], raw: bool = False) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c if raw else _e(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _kv(rows: Sequence[tuple[str, str]]) -> str:
    """A two-column table whose values are already HTML."""
    return "<table><tbody>" + "".join(f"<tr><th>{_e(k)}</th><td>{v}</td></tr>" for k, v in rows) + "</tbody></table>"


# -- header ----------------------------------------------------------------------------------------


def _identity_cells(r: Mapping[str, Any] | None) -> list[str]:
    if not r:
        return ["not read", "-", "-", "-", "-"]
    window = f"{r['window_tokens']:,}" if r.get("window_tokens") is not None else "-"
    engine = (r.get("engine_version") or "-") + (f" ({r['error']})" if r.get("error") else "")
    return [r.get("served_name") or "-", r.get("model_root") or "-", r.get("revision") or "- (not visible)", window, engine]


def _header(s: Mapping[str, Any], files: Sequence[str]) -> str:
    v, run, p, t = s["verdict"], s["run"], s["profile"], s["target"]
    d = p["deployment"]
    stage = s.get("stage")
    result = v["result"]
    label = result + (" (SIMULATED)" if s["simulated"] else "")
    out = [f'<h1>Qualification report: {_e(d["served_name"])} <span class="verdict v-{_e(result)}" id="verdict">'
           f"{_e(label)}</span></h1>"]
    if s["simulated"]:
        out.append('<div class="sim">SIMULATED — this run qualified the built-in reference server, a deterministic '
                   "oracle, not vLLM and not a model. Its verdict says nothing about a real deployment and must not "
                   "be attached to a promotion record.</div>")
    if stage and not stage.get("qualifies", True):
        out.append(f'<p><strong>{_e(stage.get("verdict_line"))}</strong> — stage {_e(stage["name"])}: covers '
                   f'{_e(", ".join(stage["modules"]))} only; only the full stage qualifies a deployment.</p>')
    if v["reasons"]:
        out.append("<p>" + ("The gate failed because:" if result == "FAIL" else
                            "Not fully judged (not a pass, not a judged failure):" if result == "INCOMPLETE" else
                            "Notes:") + "</p><ul class=reasons>" + "".join(f"<li>{_e(r)}</li>" for r in v["reasons"]) + "</ul>")
    elif result == "PASS":
        out.append("<p>Every hard assertion passed in every repetition"
                   + (f"; {len(v['waived'])} failed item(s) were waived (listed below)." if v["waived"] else ".") + "</p>")
    stage_text = "-"
    if stage:
        stage_text = f"{stage['name']} — {stage['title']}; modules {', '.join(stage['modules'])}"
        if stage.get("lanes"):
            stage_text += f"; lanes {', '.join(stage['lanes'])}"
    rows = [
        ("Run", f'<code>{_e(run["id"])}</code> · started {_e(run["started_at"])} · {run["duration_s"]:.1f} s · '
                f'<code>--repeat {_e(run["repeat"])}</code>' + (f" · {_e(run['workers'])} xdist workers" if run.get("workers") else "")),
        ("Stage", _e(stage_text)),
        ("Profile", f'{_e(p["name"])} <span class="muted">({_e(p["source"])})</span>'),
        ("Model", f'{_e(d["model"])} <span class="muted">revision {_e(d["revision"] or "-")}, served as '
                  f'{_e(d["served_name"])}</span>'),
        ("Plugin", f"pytest-qualify {_e(run['tool_version'])}"),
        ("Engine", f'{_e(t.get("engine_version") or "-")} <span class="muted">(server /version; profile: '
                   f'{_e(d.get("engine") or "-")})</span>'),
        ("Target", _e(t["mode"] + (" — SIMULATED reference server" if s["simulated"] else ""))),
    ]
    out.append(_kv(rows))
    identity, promoted = s.get("identity"), s.get("promoted")
    if identity or promoted:
        id_rows = []
        if promoted:
            id_rows.append([f"qualified (run {promoted['run_id']})", *_identity_cells(promoted.get("identity"))])
        if identity:
            id_rows += [["start of this run", *_identity_cells(identity.get("start"))],
                        ["end of this run", *_identity_cells(identity.get("end"))]]
        out.append("<h3>Served identity at both ends</h3>" + _table(
            ("Reading", "Served name", "Model root", "Revision", "Window", "Engine version"), id_rows))
        if identity and identity.get("changed"):
            out.append(f'<p class="reason"><strong>Identity changed during the run:</strong> {_e(identity["changed"])}</p>')
        for m in (promoted or {}).get("mismatches") or []:
            out.append(f'<p class="reason">{_e(m)}</p>')
    def link(f: str) -> str:
        return f'<a href="{_e(f)}">{_e(f)}</a>'

    scrapes = [f for f in files if f.startswith("metrics-")]
    links = " · ".join(link(f) for f in files if f not in scrapes)
    if scrapes:
        links += (f' · <details class="inline"><summary>{len(scrapes)} /metrics scrapes</summary>'
                  + " · ".join(link(f) for f in scrapes) + "</details>")
    out.append(f"<div><strong>Files in this bundle:</strong> {links}</div>")
    return "<header>" + "".join(out) + "</header>"


# -- the filter ------------------------------------------------------------------------------------


def _filter_inputs(modules: Sequence[str]) -> str:
    radios = [f'<input type="radio" class="visually-hidden" name="show" id="show-{k}"{" checked" if k == "all" else ""}>'
              for k, _ in STATUS_FILTERS]
    radios.append('<input type="radio" class="visually-hidden" name="mod" id="mod-all" checked>')
    radios += [f'<input type="radio" class="visually-hidden" name="mod" id="mod-{_slug(m)}">' for m in modules]
    return "".join(radios)


def _filter_nav(modules: Sequence[str]) -> str:
    shows = "".join(f'<label for="show-{k}">{_e(text)}</label>' for k, text in STATUS_FILTERS)
    mods = '<label for="mod-all">all modules</label>' + "".join(
        f'<label for="mod-{_slug(m)}">{_e(m)}</label>' for m in modules)
    return f'<nav class="filter" id="filter"><strong>Show:</strong> {shows} &nbsp; <strong>Module:</strong> {mods}</nav>'


def _filter_style(modules: Sequence[str]) -> str:
    rules = [
        "#show-failed:checked~main .item:not(.failed),#show-format:checked~main .item:not(.kind-format),"
        "#show-fact:checked~main .item:not(.kind-fact){display:none}",
        "#show-failed:checked~main .module:not(.failing),#show-format:checked~main .module:not(.has-format),"
        "#show-fact:checked~main .module:not(.has-fact){display:none}",
        "#show-failed:checked~main .gate .row.ok,#show-format:checked~main .gate .row,"
        "#show-fact:checked~main .gate .row{display:none}",
    ]
    on = [f"#show-{k}:checked~nav label[for=show-{k}]" for k, _ in STATUS_FILTERS]
    on += ["#mod-all:checked~nav label[for=mod-all]"]
    for m in modules:
        slug = _slug(m)
        rules.append(f"#mod-{slug}:checked~main .module:not(.m-{slug}),#mod-{slug}:checked~main .gate .row"
                     "{display:none}")
        on.append(f"#mod-{slug}:checked~nav label[for=mod-{slug}]")
    rules.append(",".join(on) + "{background:#0969da;color:#fff;border-color:#0969da}")
    return "<style>" + "".join(rules) + "</style>"


# -- one request and its answer --------------------------------------------------------------------


def _long_text(c: Mapping[str, Any]) -> str:
    out = [f'<p class="muted">Long text, not shown whole: {c["chars"]:,} characters, {c["lines"]:,} lines, '
           f'sha256 <code>{_e(c["sha256"])}</code></p>']
    if c.get("marks"):
        out.append("<h4>Needle positions</h4>" + _table(
            ("Needle", "Value", "Character", "Line", "Depth"),
            [(m["name"], m["value"], "not found" if m["char"] is None else f"{m['char']:,}",
              "-" if m["line"] is None else f"{m['line']:,}",
              "-" if m["depth"] is None else f"{m['depth']:.1%}") for m in c["marks"]]))
    out.append("<h4>First lines</h4>" + _pre("\n".join(c.get("first_lines") or [])))
    if c.get("last_lines"):
        out.append("<h4>Last lines</h4>" + _pre("\n".join(c["last_lines"])))
    return "".join(out)


def _content(value: Any) -> str:
    if isinstance(value, str):
        return _pre(value)
    if isinstance(value, Mapping):
        if value.get("compacted"):
            return _long_text(value)
        if "data_url" in value:
            return (f'<p class="muted">data URL <code>{_e(value["data_url"])}</code>, {value["chars"]:,} characters, '
                    f'sha256 <code>{_e(value["sha256"])}</code></p>')
        kind = value.get("type")
        if kind == "text":
            return _content(value.get("text"))
        if kind and isinstance(value.get(kind), (Mapping, str)):
            inner = value[kind]
            url = inner.get("url") if isinstance(inner, Mapping) else inner
            return f'<div><span class="kind">{_e(kind)}</span>{_content(url)}</div>'
        return _pre(_json(value))
    if isinstance(value, list):
        return "".join(_content(v) for v in value)
    return _pre(_json(value))


def _messages(messages: Sequence[Mapping[str, Any]]) -> str:
    out = []
    for m in messages:
        extra = {k: v for k, v in m.items() if k not in ("role", "content")}
        out.append(f'<div class="msg"><span class="role">{_e(m.get("role"))}</span>'
                   + (_content(m["content"]) if m.get("content") is not None else "")
                   + (_pre(_json(extra)) if extra else "") + "</div>")
    return "".join(out)


def _settings(params: Mapping[str, Any], tool_sets: dict[str, str]) -> str:
    keys = [k for k in SETTINGS_ORDER if k in params] + sorted(k for k in params if k not in SETTINGS_ORDER and k != "tools")
    # One line per field, as JSON: a table per request would be most of a long run's page.
    lines = "\n".join(f"{k}: {json.dumps(params[k], ensure_ascii=False, default=str)}" for k in keys)
    out = _pre(lines, "settings")
    tools = params.get("tools")
    if tools:
        ref = tool_sets.setdefault(_json(tools), f"tools-{len(tool_sets) + 1}")
        names = ", ".join(str((t.get("function") or {}).get("name", "?")) for t in tools if isinstance(t, Mapping))
        out += f'<p>tools ({len(tools)}): {_e(names)} — <a href="#{ref}">schemas ({ref})</a></p>'
    return out


def _answer(a: Mapping[str, Any] | None, error: str | None) -> str:
    if a is None:
        return f'<p class="reason"><strong>No answer:</strong> {_e(error or "-")}</p>'
    out = ["<h4>Visible content</h4>" + (_pre(a["content"]) if a.get("content") not in (None, "")
                                          else f'<p class="muted">{"none" if a.get("content") is None else "empty"}</p>')]
    if a.get("reasoning"):
        out.append("<h4>Reasoning field</h4>" + _pre(a["reasoning"]))
    for call in a.get("tool_calls") or []:
        out.append(f'<h4>Tool call <code>{_e(call["name"])}</code></h4>' + _pre(_json(call.get("parsed"))))
    timing = a.get("timing") or {}
    stream = a.get("stream")
    rows = [
        ("finish_reason", f"<code>{_e(a.get('finish_reason'))}</code>"),
        ("streamed", _e("yes" if a.get("streamed") else "no")
         + (f" — {stream['chunks']} chunks ({stream['content_deltas']} content, {stream['finish_chunks']} finish, "
            f"{stream['usage_chunks']} usage, {stream['tool_deltas']} tool deltas)" if stream else "")),
        ("TTFT (first chunk)", _e(_seconds(timing.get("ttft_s")))),
        ("first content token", _e(_seconds(timing.get("ttfvt_s")))),
        ("end to end", _e(_seconds(timing.get("e2e_s")))),
        ("tokens", _e(f"{_count(timing.get('prompt_tokens'))} prompt, {_count(timing.get('completion_tokens'))} completion"
                      + (f", {_count(a['reasoning_tokens'])} reasoning" if a.get("reasoning_tokens") else ""))),
        ("usage", f"<code>{_e(json.dumps(_no_nulls(a.get('usage') or {}), ensure_ascii=False))}</code>"),
    ]
    out.append(_kv(rows))
    return "".join(out)


def _no_nulls(value: Any) -> Any:
    """``usage`` without the fields the server left null (an OpenAI client fills in every field)."""
    if isinstance(value, Mapping):
        return {k: _no_nulls(v) for k, v in value.items() if v is not None}
    return value


def _asked(n: int, total: int, r: Mapping[str, Any], tool_sets: dict[str, str]) -> str:
    req = r.get("request") or {}
    return (f'<div class="asked"><h3>Request {n} of {total}</h3><div class="cols">'
            f'<div class="request"><h4>Request as sent</h4>{_settings(req.get("params") or {}, tool_sets)}'
            f'{_messages(req.get("messages") or [])}</div>'
            f'<div class="answer"><h4>Answer as received</h4>{_answer(r.get("answer"), r.get("error"))}</div>'
            "</div></div>")


# -- items and the gate ----------------------------------------------------------------------------


def _item_status(i: Mapping[str, Any]) -> tuple[str, str]:
    if i["outcome"] == "passed":
        return "PASS", "b-ok"
    if i.get("not_judged"):  # the gate's: a refused key, a steered run's void answers — never a FAIL
        return "NOT JUDGED", "b-other"
    if i.get("waiver"):
        return "WAIVED", "b-other"
    if i["outcome"] == "skipped":
        return "SKIP", "b-other"
    if i["outcome"] == "ungraded":
        return "NOT GRADED", "b-other"
    return "FAIL", "b-fail"


PROPS_SHOWN_ELSEWHERE = frozenset({"qualify_module", "item", "repetition", "repetitions", "module", "lane"})


def _item(n: int, i: Mapping[str, Any], story: Mapping[str, list[Mapping[str, Any]]], tool_sets: dict[str, str]) -> str:
    status, badge = _item_status(i)
    failed = status == "FAIL"
    kind = i.get("failure_kind") or ("other" if failed else "")
    classes = ["item"] + (["failed", f"kind-{_slug(kind)}"] if failed else [])
    where = f"repetition {i['repetition']} of {i['repetitions']}" + (f" · lane {i['lane']}" if i.get("lane") else "")
    head = (f'<summary><span class="badge {badge}">{status}</span> <strong>{_e(i["item"])}</strong> '
            f'<span class="muted">{_e(where)}</span>' + (f'<span class="kind">{_e(kind)}</span>' if failed else "")
            + (f' — <span class="reason">{_e(_short(i.get("not_judged") or i["reason"]))}</span>'
               if i.get("not_judged") or i.get("reason") else "") + "</summary>")
    body = []
    props = i.get("properties") or {}
    rows = [("outcome", _e(i["outcome"] + (f" (waived: {i['waiver']})" if i.get("waiver") else ""))),
            ("failure kind", _e(kind or "-"))]
    if i.get("reason"):
        rows.append(("grader's reason", f'<pre class="reason">{_e(i["reason"])}</pre>'))
    rows.append(("timing", _e(f"TTFT (first chunk) {_seconds(props.get('ttft_s'))}, first content token "
                              f"{_seconds(props.get('ttfvt_s'))}, end to end {_seconds(props.get('e2e_s'))}, "
                              f"{_count(props.get('prompt_tokens'))} prompt / {_count(props.get('completion_tokens'))} "
                              "completion tokens")))
    rows.append(("test", f"<code>{_e(i['nodeid'])}</code>"))
    body.append(_kv(rows))
    slots = story.get(SLOTS) or []
    if slots:
        body.append("<h4>Answer slot the contract read</h4>" + _table(
            ("Slot", "Value read", "Format failure"),
            [(s.get("name"), _json(s.get("slot")) if s.get("format_error") is None else "-", s.get("format_error") or "-")
             for s in slots]))
    asked = story.get(ASKED) or []
    body += [_asked(k, len(asked), r, tool_sets) for k, r in enumerate(asked, start=1)]
    if not asked:
        body.append('<p class="muted">This item asked no protocol question through qualify_ask (a probe of '
                    "/health, /metrics or a refusal).</p>")
    extra = {k: v for k, v in props.items() if k not in PROPS_SHOWN_ELSEWHERE and v not in ("", None)}
    if extra:
        body.append('<details><summary>Recorded properties</summary><p class="mono">'
                    + " · ".join(f"{_e(k)}={_e(v)}" for k, v in sorted(extra.items())) + "</p></details>")
    return (f'<details class="{" ".join(classes)}" id="item-{n}">{head}<div class="body">{"".join(body)}</div></details>')


def _short(text: str, limit: int = 160) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "\u2026"


def _order(items: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Failed items first, then waived or skipped ones, then passed; each group in run order."""
    rank = {"FAIL": 0, "NOT GRADED": 1, "NOT JUDGED": 1, "WAIVED": 2, "SKIP": 3, "PASS": 4}
    return sorted(items, key=lambda i: rank[_item_status(i)[0]])


def _badge(verdict: str) -> str:
    """A gate row's badge: ok, FAIL, or the verdict of a row that was not judged (INCOMPLETE)."""
    return {"PASS": '<span class="badge b-ok">ok</span>', "FAIL": '<span class="badge b-fail">FAIL</span>'}.get(
        verdict, f'<span class="badge b-incomplete">{_e(verdict)}</span>')


def _row_state(row: Mapping[str, Any]) -> str:
    """A run-level row's class: failing only when the gate judged it failed."""
    return {"PASS": "ok", "FAIL": "failing"}.get(row_verdict(row), "unjudged")


def _gate(s: Mapping[str, Any], stories: Mapping[str, Any], tool_sets: dict[str, str]) -> str:
    items_by_module: dict[str, list[Mapping[str, Any]]] = {}
    for i in s["items"]:
        items_by_module.setdefault(i["module"], []).append(i)
    index = {id(i): n for n, i in enumerate(s["items"], start=1)}
    out = ['<div class="gate" id="gate"><div class="row head"><span>Gate</span><span>Result</span><span></span></div>']
    for g in s["gate"]:
        module = g["module"]
        items = _order(items_by_module.get(module, []))
        failed = [i for i in items if _item_status(i)[0] == "FAIL"]
        kinds = {i.get("failure_kind") or "other" for i in failed}
        verdict = row_verdict(g)  # the gate's, never re-judged from the items: a void run's failed items are not judged
        state = {"PASS": [], "FAIL": ["failing"]}.get(verdict, ["unjudged"])
        classes = ["module", f"m-{_slug(module)}"] + state + [f"has-{_slug(k)}" for k in sorted(kinds)]
        badge = _badge(verdict)
        rendered = "".join(_item(index[id(i)], i, stories.get(i["nodeid"], {}), tool_sets) for i in items)
        # A failing or unjudged row starts open: its failed or unjudged items are then one click away.
        opened = " open" if state else ""
        out.append(f'<details class="{" ".join(classes)}" id="module-{_slug(module)}"{opened}><summary><span>{_e(g["title"])} '
                   f'<span class="muted">({len(items)} item runs{f", {len(failed)} failed" if failed else ""})</span>'
                   f'</span><span>{_e(g["result"])}</span>{badge}</summary><div class="items">'
                   f'{rendered or "<p class=muted>No item of this module ran.</p>"}</div></details>')
    # SLO, check and claim rows: the gate's verdict of each (nothing measured is INCOMPLETE, never FAIL).
    for r in s.get("slo") or []:
        out.append(f'<div class="row {_row_state(r)}"><span>{_e(r["title"])}</span><span>'
                   f'{_e(r.get("measured_text") or "not measured")} (limit {_e(r["limit_text"])})</span>'
                   f'{_badge(row_verdict(r))}</div>')
    for c in s.get("checks") or []:
        out.append(f'<div class="row {_row_state(c)}"><span>{_e(c["title"])}</span><span>'
                   f'{_e(c.get("measured") or "not measured")} ({_e(c["limit"])})</span>'
                   f'{_badge(row_verdict(c))}</div>')
    for c in s.get("claims") or []:
        out.append(f'<div class="row claim {_row_state(c)}" id="claim-{_slug(c["name"])}"><span>{_e(c["title"])}</span>'
                   f'<span>{_e(claim_result(c))}</span>{_badge(row_verdict(c))}</div>')
    return "".join(out) + "</div>"


def _serving(s: Mapping[str, Any]) -> str:
    """The serving facts and the recipe's claims, as report.md shows them."""
    sf = s.get("serving_facts")
    out = []
    if sf:
        out.append(f'<h2 id="serving-facts">Serving facts{" (SIMULATED)" if sf.get("simulated") else ""}</h2>')
        out.append(f'<p class="muted">Engine {_e(sf.get("engine_version") or "version unknown")}, {_e(sf["mode"])} mode; '
                   f'log patterns: {_e(sf.get("characterised") or "not yet characterised")}.</p>')
        out.append(_table(("Fact", "Value", "Status", "Source"),
                          [(f["label"], fact_value(f, "{}"), f.get("status"), f.get("source") or "") for f in sf["facts"].values()]))
        for note in ((sf.get("concurrency") or {}).get("note"), sf.get("note")):
            if note:
                out.append(f"<p><strong>{_e(note)}</strong></p>")
    claims = s.get("claims") or []
    if claims:
        out.append('<h2 id="claims">Recipe claims</h2>')
        out.append(_table(("Claim", "Claimed (tolerance)", "Measured", "Held", "Measured by", "The recipe says"),
                          [(c["title"].split(": ", 1)[-1], c["claimed_text"], c.get("measured_text") or "—",
                            c["status"] + (" (required)" if c["required"] and c["measured"] is None else ""),
                            c["source"], c.get("said") or "") for c in claims]))
    return "<section>" + "".join(out) + "</section>" if out else ""


def _failures(s: Mapping[str, Any]) -> str:
    index = {i["nodeid"]: n for n, i in enumerate(s["items"], start=1)}
    failures = failures_split(s)[0]  # an item the gate did not judge is no failed item
    if not failures:
        return ""
    rows = [(f'<a href="#item-{index[f["nodeid"]]}">{_e(f["item"])}</a>' if f.get("nodeid") in index else _e(f["item"]),
             _e(f["module"]), _e(f["repetition"]), _e(f.get("lane") or "-"), _e(f.get("failure_kind") or "-"),
             _e(_short(f["reason"], 300))) for f in failures]
    return (f"<h2>Failed items ({len(failures)})</h2>"
            + _table(("Item", "Module", "Repetition", "Lane", "Kind", "Reason"), rows, raw=True)
            + '<p class="muted">Each failed item is also first in its gate row below, with its requests and answers.</p>')


def _timing(s: Mapping[str, Any], plot_png: bytes | None) -> str:
    out = ["<h2>TTFT against prompt tokens</h2>"]
    if plot_png:
        data = base64.b64encode(plot_png).decode("ascii")
        out.append(f'<img class="plot" id="plot" alt="TTFT against prompt tokens, one colour per context lane" '
                   f'src="data:image/png;base64,{data}">')
    else:
        notes = (s.get("artifacts") or {}).get("notes") or []
        out.append(f'<p class="muted">No plot in this bundle{": " + _e("; ".join(notes)) if notes else "."}</p>')
    slo = s.get("slo") or []
    if slo:
        out.append("<h3>SLO rows</h3>" + _table(
            ("SLO", "Measured", "Limit", "Result"),
            [(r["title"], r.get("measured_text") or "not measured", r["limit_text"],
              "ok" if row_verdict(r) == "PASS" else row_verdict(r))
             for r in slo]))
    else:
        out.append('<p class="muted">The profile sets no SLO.</p>')
    lanes = s["timing"]["lanes"]
    if lanes:
        def spread(x: Mapping[str, Any] | None) -> str:
            return "-" if not x else f"{_seconds(x['median'])} ({_seconds(x['min'])} – {_seconds(x['max'])}, n={x['n']})"
        out.append("<h3>Context lanes</h3>" + _table(
            ("Lane", "TTFT (first chunk)", "End to end", "Passed"),
            [(lane["lane"], spread(lane["ttft_s"]), spread(lane["e2e_s"]), f"{lane['passed']}/{lane['items']}")
             for lane in lanes]))
    return "<section>" + "".join(out) + "</section>"


def _tool_sets(tool_sets: Mapping[str, str]) -> str:
    if not tool_sets:
        return ""
    rows = "".join(f'<details id="{ref}"><summary>{ref}</summary>{_pre(text)}</details>' for text, ref in tool_sets.items())
    return "<h2>Tool schemas offered</h2>" + rows


def render(summary: Mapping[str, Any], records: Sequence[Mapping[str, Any]], plot_png: bytes | None,
           files: Sequence[str]) -> str:
    """The page: ``summary`` (summary.json), ``records`` (transcripts.jsonl's lines), the plot's PNG
    bytes (or None) and the bundle's file names to link to."""
    s = summary
    stories = by_item(records)
    modules = [g["module"] for g in s["gate"]]
    tool_sets: dict[str, str] = {}
    gate = _gate(s, stories, tool_sets)  # first, so the tool sets are numbered in page order
    served = s["profile"]["deployment"]["served_name"]
    title = f"{served} — {s['verdict']['result']}" + (" (SIMULATED)" if s["simulated"] else "")
    stats = s.get("stats") or {}
    overall = stats.get("overall")
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>Qualification report: {_e(title)}</title><style>{STYLE}</style>{_filter_style(modules)}</head><body>",
        _filter_inputs(modules),
        _header(s, files),
        _filter_nav(modules),
        "<main>",
        _failures(s),
        "<h2>Gate</h2>",
        (f'<p class="muted">{overall["passed"]}/{overall["attempts"]} attempts passed. Open a gate row for its items '
         "(failed first), an item for its requests, answers and the grader's reason.</p>") if overall else "",
        gate,
        _serving(s),
        _timing(s, plot_png),
        _tool_sets(tool_sets),
        "</main>",
        f'<footer><p class="muted">Rendered from summary.json (schema {_e(s["schema"])} v{_e(s["schema_version"])}) and '
        "transcripts.jsonl of this bundle; rebuild with <code>python -m pytest_qualify report BUNDLE_DIR</code>.</p></footer>",
        "</body></html>",
    ]
    return "\n".join(p for p in parts if p) + "\n"
