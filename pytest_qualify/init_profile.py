"""A starter profile from a running endpoint (``python -m pytest_qualify init``).

Writing a profile by hand from a serve command is where a wrong window or a missing parser slips
in; the endpoint itself knows most of it. This room asks it: ``/v1/models`` (served name, root,
``max_model_len``), ``/version``, ``/tokenize``, the media limits (1..N tiny corpus images and
videos until a 400 names the limit, in vLLM's words: "At most 4 image(s) may be provided in one
prompt."), whether tool calls come back parsed with ``tool_choice: "auto"``, whether reasoning
arrives in its own field, whether a caller's ``enable_thinking`` changes anything, and whether the
prefix cache reports ``cached_tokens``. Every value of the written profile carries a comment that
says how it was found: probed (and what answered) or a default.

What an endpoint cannot tell is not guessed: the serve command (the profile is for attach mode,
and a launch with it stops with a message saying so), the revision when the root does not show
it, the quantization, the KV-cache dtype, and ``--max-num-seqs`` unless ``/metrics`` shows it (vLLM
0.32 does not; the reference server does), which sets the load levels. No pytest here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# Sent at most this many media parts of a kind before giving up on finding the limit.
MAX_MEDIA_PROBE = 8
PROBE_IMAGE = "image-01.png"
PROBE_VIDEO = "video-01.mp4"
# vLLM 0.32.0 (and the reference server, which copies it): "At most 4 image(s) may be provided in
# one prompt." Older vLLM said "At most 4 image(s) may be provided in one request".
_LIMIT_RE = re.compile(r"at most (\d+) (image|video)", re.IGNORECASE)
_AUTO_TOOL_REFUSED_RE = re.compile(r"auto.{0,20}tool choice|enable-auto-tool-choice", re.IGNORECASE)
THINK_MARKERS = ("<think>", "</think>")
DEFAULT_ANSWER_TOKENS = 256  # the protocol's visible-answer budget (262k)
DEFAULT_REASONING_HEADROOM = 1024  # only when thinking is on by default
MAX_LOAD_LEVEL = 4096  # the profile schema's highest load level
SERVE_REFUSAL = ("this profile was written by `python -m pytest_qualify init` from a running endpoint, "
                 "which cannot say how it was launched: attach with --qualify-endpoint URL, or write "
                 "[serve] command and args from the real serve command")


class InitError(RuntimeError):
    """The endpoint could not be probed (unreachable, no /v1/models, an unknown served name)."""


@dataclass(frozen=True)
class Finding:
    """One value of the profile and how it was found: ``probed: ...`` or ``default: ...``."""

    value: Any
    how: str


@dataclass(frozen=True)
class Probed:
    endpoint: str
    served_name: Finding
    model: Finding
    revision: Finding  # None when the root does not show one
    window_tokens: Finding
    engine: Finding
    tokenize: Finding  # bool
    images: Finding
    videos: Finding
    auto_tools: Finding  # bool: tool_choice "auto" accepted
    tool_calls_parsed: Finding  # bool | None (accepted, but no call came back)
    reasoning_split: Finding  # bool | None (no reasoning seen at all)
    thinking_enabled: Finding
    thinking_overridable: Finding
    cached_tokens: Finding  # bool: usage.prompt_tokens_details.cached_tokens reported
    admission: Finding = Finding(None, "not visible from the endpoint")  # int | None: max_num_seqs in /metrics


class Endpoint:
    """What a probe needs from a client: GET and POST JSON, raising with the status and body.
    ``client.QualifyClient`` is one; tests may pass another."""

    def get_json(self, path: str) -> Any: ...  # pragma: no cover - interface

    def post_json(self, path: str, body: Mapping[str, Any], timeout_s: float | None = None) -> Any: ...  # pragma: no cover

    def metrics_text(self) -> str: ...  # pragma: no cover - interface


@dataclass(frozen=True)
class ProbeReply:
    status: int
    body: Any

    @property
    def message(self) -> dict[str, Any]:
        try:
            return dict(self.body["choices"][0]["message"])
        except (KeyError, IndexError, TypeError):
            return {}

    @property
    def error(self) -> str:
        from pytest_qualify.client.errors import error_message

        return " ".join(error_message(self.body).split())


def _post(ep: Endpoint, body: Mapping[str, Any]) -> ProbeReply:
    from pytest_qualify.client.errors import AuthRejected, EndpointError

    try:
        return ProbeReply(200, ep.post_json("/v1/chat/completions", body))
    except (EndpointError, AuthRejected) as exc:
        return ProbeReply(exc.status, exc.body)


def _quote(text: str, limit: int = 120) -> str:
    text = " ".join(str(text).split())
    return repr(text if len(text) <= limit else text[: limit - 1] + "…")


# -- the probes ---------------------------------------------------------------------------------


def probe_identity(ep: Endpoint, served_name: str | None) -> dict[str, Finding]:
    from pytest_qualify.promotion.identity import read_identity

    try:
        models = ep.get_json("/v1/models")["data"]
    except Exception as exc:  # noqa: BLE001 - the reason is the message
        raise InitError(f"GET /v1/models failed: {type(exc).__name__}: {exc}") from None
    ids = [m.get("id") for m in models if isinstance(m, Mapping)]
    if not ids:
        raise InitError("GET /v1/models lists no model")
    if served_name is None:
        if len(ids) > 1:
            raise InitError(f"GET /v1/models lists {len(ids)} models {ids}: name one with --served-name")
        served_name = str(ids[0])
    elif served_name not in ids:
        raise InitError(f"GET /v1/models does not list {served_name!r} (it lists {ids})")
    try:
        version: str | None = str(ep.get_json("/version").get("version") or "") or None
        version_how = f"probed: GET /version says {version!r}"
    except Exception as exc:  # noqa: BLE001
        version, version_how = None, f"not probed: GET /version failed ({type(exc).__name__})"
    ident = read_identity(served_name, models, version)
    if ident.window_tokens is None:
        raise InitError(f"GET /v1/models: {served_name!r} reports no max_model_len")
    engine = (f"vLLM {version}" if version and version[:1].isdigit() and "reference" not in version
              else version or "unknown")
    return {
        "served_name": Finding(served_name, "probed: GET /v1/models id"),
        "model": Finding(ident.model_root or served_name,
                         "probed: GET /v1/models root" if ident.model_root else "default: the served name (no root)"),
        "revision": Finding(ident.revision, "probed: the root's snapshot path" if ident.revision
                            else "not visible: the root shows no revision; pin it by hand"),
        "window_tokens": Finding(ident.window_tokens, "probed: GET /v1/models max_model_len"),
        "engine": Finding(engine, version_how),
    }


def probe_tokenize(ep: Endpoint, served_name: str) -> Finding:
    try:
        count = ep.post_json("/tokenize", {"model": served_name, "prompt": "hello world"}).get("count")
    except Exception as exc:  # noqa: BLE001
        return Finding(False, f"probed: POST /tokenize failed ({type(exc).__name__}); the context lanes and "
                              "the window bracket need it")
    return Finding(isinstance(count, int), f"probed: POST /tokenize counts ({count} tokens for 'hello world')")


def probe_media(ep: Endpoint, served_name: str, kind: str, part: Callable[[], dict[str, Any]],
                max_parts: int = MAX_MEDIA_PROBE) -> Finding:
    """Send 1..max_parts parts of ``kind`` until a 400 names the limit."""
    for n in range(1, max_parts + 1):
        content = [part() for _ in range(n)] + [{"type": "text", "text": "Describe what you see in one word."}]
        reply = _post(ep, {"model": served_name, "messages": [{"role": "user", "content": content}],
                           "max_tokens": 1, "temperature": 0})
        if reply.status == 200:
            continue
        match = _LIMIT_RE.search(reply.error)
        if match and match.group(2).lower() == kind:
            return Finding(int(match.group(1)), f"probed: {n} {kind}(s) refused with HTTP {reply.status} "
                                                f"{_quote(reply.error)}")
        if n == 1:
            return Finding(0, f"probed: one {kind} refused with HTTP {reply.status} not naming a limit "
                              f"({_quote(reply.error)}): no {kind}s")
        return Finding(n - 1, f"probed: {n - 1} {kind}(s) answered, {n} refused with HTTP {reply.status} "
                              f"{_quote(reply.error)}")
    return Finding(max_parts, f"probed: {max_parts} {kind}(s) answered and none refused: the limit is at least "
                              f"{max_parts}; set the server's real limit by hand (the media admission module "
                              "sends one over it)")


def probe_tools(ep: Endpoint, served_name: str) -> tuple[Finding, Finding]:
    """Whether ``tool_choice: "auto"`` is accepted, and whether a call came back parsed."""
    from pytest_qualify.tasks.fixture_data import tool_fixtures

    fx = tool_fixtures()
    case = fx.cases[0]
    reply = _post(ep, {"model": served_name, "tools": list(fx.tools), "tool_choice": "auto",
                       "messages": [{"role": "system", "content": fx.system}, {"role": "user", "content": case.prompt}],
                       "max_tokens": 256, "temperature": 0})
    if reply.status != 200:
        why = ("the server has no auto tool choice (--enable-auto-tool-choice --tool-call-parser)"
               if _AUTO_TOOL_REFUSED_RE.search(reply.error) else "refused")
        return (Finding(False, f"probed: tool_choice auto got HTTP {reply.status} {_quote(reply.error)}: {why}"),
                Finding(False, "probed: no tool call possible"))
    calls = reply.message.get("tool_calls") or []
    content = str(reply.message.get("content") or "")
    accepted = Finding(True, "probed: tool_choice auto accepted (HTTP 200)")
    if calls:
        name = (calls[0].get("function") or {}).get("name")
        return accepted, Finding(True, f"probed: the answer carried a parsed tool_calls entry ({name!r})")
    if "<tool_call>" in content or "<function=" in content:
        return accepted, Finding(False, "probed: the call came back as text in the content, not parsed: "
                                        "check --tool-call-parser")
    return accepted, Finding(None, "probed: no tool call came back (the model did not call); parsing not shown")


def _reasoning(message: Mapping[str, Any]) -> str:
    return str(message.get("reasoning_content") or message.get("reasoning") or "")


def probe_thinking(ep: Endpoint, served_name: str) -> tuple[Finding, Finding, Finding]:
    """(reasoning split into its own field, thinking on by default, enable_thinking overridable)."""
    base = {"model": served_name, "max_tokens": 64, "temperature": 0,
            "messages": [{"role": "user", "content": "What is 2 + 2? Answer with one number."}]}
    replies = {label: _post(ep, {**base, **extra}) for label, extra in (
        ("default", {}),
        ("on", {"chat_template_kwargs": {"enable_thinking": True}}),
        ("off", {"chat_template_kwargs": {"enable_thinking": False}}),
    )}

    def seen(label: str) -> tuple[bool, bool]:
        msg = replies[label].message
        content = str(msg.get("content") or "")
        return bool(_reasoning(msg)), any(m in content for m in THINK_MARKERS)

    field_any = any(seen(label)[0] for label in replies)
    tags_any = any(seen(label)[1] for label in replies)
    if field_any:
        split = Finding(True, "probed: reasoning came back in its own field (a reasoning parser is on)")
    elif tags_any:
        split = Finding(False, "probed: reasoning came back in the content between think tags (no reasoning parser)")
    else:
        split = Finding(None, "probed: no reasoning seen in any answer; whether it would be split is not shown")
    default_on = any(seen("default"))
    enabled = Finding(default_on, "probed: a plain request's answer " + ("carried" if default_on else "carried no")
                      + " reasoning")
    statuses = {label: r.status for label, r in replies.items()}
    if any(code != 200 for code in statuses.values()):
        overridable = Finding(False, f"probed: a request with chat_template_kwargs was refused ({statuses})")
    else:
        flipped = any(seen("on")) if not default_on else not any(seen("off"))
        ask = "enable_thinking=true" if not default_on else "enable_thinking=false"
        overridable = Finding(flipped, f"probed: a caller's {ask} " + ("changed" if flipped else "did not change")
                              + " whether reasoning came back")
    return split, enabled, overridable


PREFIX_PROBE_TEXT = " ".join(f"Line {i}: the quick brown fox jumps over the lazy dog." for i in range(40))


def probe_cached_tokens(ep: Endpoint, served_name: str) -> Finding:
    """The same prompt twice: whether ``usage.prompt_tokens_details.cached_tokens`` is reported."""
    body = {"model": served_name, "max_tokens": 1, "temperature": 0,
            "messages": [{"role": "user", "content": PREFIX_PROBE_TEXT + " Say OK."}]}
    cached = []
    for _ in range(2):
        reply = _post(ep, body)
        details = ((reply.body or {}).get("usage") or {}).get("prompt_tokens_details") if reply.status == 200 else None
        cached.append(details.get("cached_tokens") if isinstance(details, Mapping) else None)
    if cached[-1] is None:
        return Finding(False, "probed: usage.prompt_tokens_details.cached_tokens not reported (vLLM: "
                              "--enable-prompt-tokens-details): the context module cannot see a prefix-cache hit")
    return Finding(True, f"probed: cached_tokens reported ({cached[-1]} on a repeated prompt"
                         + (", so the prefix cache is on)" if cached[-1] else ")"))


def probe_admission(ep: Endpoint) -> Finding:
    """The admission limit (``max_num_seqs``) where ``/metrics`` shows it, else None and why not."""
    from pytest_qualify.server.facts import admission_limit

    try:
        text = ep.metrics_text()
    except Exception as exc:  # noqa: BLE001 - any failure leaves the limit unseen, never the probe failed
        return Finding(None, f"not visible from the endpoint: GET /metrics failed ({type(exc).__name__})")
    found = admission_limit(text)
    if found is None:
        return Finding(None, "not visible from the endpoint: GET /metrics shows no max_num_seqs (vLLM 0.32 "
                             "exports none); the server's --max-num-seqs")
    limit, metric = found
    return Finding(limit, f"probed: GET /metrics {metric} max_num_seqs")


def probe(ep: Endpoint, endpoint: str, served_name: str | None = None,
          media_part: Callable[[str], dict[str, Any]] | None = None) -> Probed:
    """Every probe, in the order an operator would check them."""
    if media_part is None:
        from pytest_qualify.tasks.corpus import media_part as corpus_part

        media_part = corpus_part
    ident = probe_identity(ep, served_name)
    name = str(ident["served_name"].value)
    auto, parsed = probe_tools(ep, name)
    split, enabled, overridable = probe_thinking(ep, name)
    return Probed(
        endpoint=endpoint,
        tokenize=probe_tokenize(ep, name),
        images=probe_media(ep, name, "image", lambda: media_part(PROBE_IMAGE)),
        videos=probe_media(ep, name, "video", lambda: media_part(PROBE_VIDEO)),
        auto_tools=auto, tool_calls_parsed=parsed,
        reasoning_split=split, thinking_enabled=enabled, thinking_overridable=overridable,
        cached_tokens=probe_cached_tokens(ep, name),
        admission=probe_admission(ep),
        **ident,
    )


# -- the profile --------------------------------------------------------------------------------


def lanes_for(window_tokens: int, budget_tokens: int) -> list[tuple[str, int]]:
    """Three context lanes sized to the window, as the built-in profiles are: 1/8, 1/2 and 15/16 of
    a long window (262,144 -> 32K/128K/240K), 1/4, 1/2 and 3/4 of a short one (4,096 -> 1K/2K/3K);
    each leaves the answer budget free, and is named by its size."""
    fractions = (1 / 8, 1 / 2, 15 / 16) if window_tokens >= 16384 else (1 / 4, 1 / 2, 3 / 4)
    step = 1024 if window_tokens >= 4096 else 64
    out: list[tuple[str, int]] = []
    for f in fractions:
        tokens = min(int(window_tokens * f) // step * step, (window_tokens - budget_tokens) // step * step)
        if tokens < 16 or any(tokens == t for _, t in out):
            continue
        name = f"{tokens // 1024}K" if tokens % 1024 == 0 else str(tokens)
        out.append((name, tokens))
    return out


def modules_for(p: Probed) -> tuple[list[str], list[str]]:
    """The protocol modules this endpoint can be held to, and why any is left out."""
    from pytest_qualify.profiles import protocol_modules

    left_out = []
    drop = set()
    if not p.tokenize.value:
        drop |= {"context", "window"}
        left_out.append("context, window: no POST /tokenize to size the prompts")
    if not p.auto_tools.value:
        drop.add("tools")
        left_out.append("tools: tool_choice auto is refused")
    if not p.images.value and not p.videos.value:
        drop |= {"multimodal", "media_admission"}
        left_out.append("multimodal, media_admission: no images or videos accepted")
    return [m for m in protocol_modules() if m not in drop], left_out


def load_levels_for(max_num_seqs: int) -> list[int]:
    """The load module's concurrency levels for an admission of ``max_num_seqs`` sequences: one
    request alone (the answers the others are held to), then doubling up to the admission limit,
    the limit itself the highest (1, 2, 4, 6 for 6): every level the engine admits at once. A limit
    of 1 gets 2 as well: the load module compares at least two levels, and at 2 the second request
    queues behind the one admitted."""
    admission = min(max(1, int(max_num_seqs)), MAX_LOAD_LEVEL)
    levels, level = [], 1
    while level < admission:
        levels.append(level)
        level *= 2
    return levels + [admission] if admission > 1 else [1, 2]


def _fallback_levels() -> list[int]:
    # The admission limit unseen: one request alone, then two and four, which queue behind a
    # limit of 1 and run at once under a higher one (the built-in profiles' levels).
    return [1, 2, 4]


def _toml(value: Any) -> str:
    return json.dumps(value)  # strings, integers, booleans and lists of them read the same in TOML


def _line(key: str, finding: Finding) -> str:
    return f"{key} = {_toml(finding.value)}  # {finding.how}"


def render(p: Probed, name: str, written_at: str) -> str:
    """The profile's TOML text, every value commented with how it was found."""
    modules, left_out = modules_for(p)
    headroom = DEFAULT_REASONING_HEADROOM if p.thinking_enabled.value else 0
    if p.admission.value is not None:
        admission = p.admission
        levels = Finding(load_levels_for(int(admission.value)),
                         f"default: one request alone, doubling up to the admission limit (max_num_seqs "
                         f"{admission.value}, probed); set the production concurrency")
    else:
        admission = Finding(1, f"default: {p.admission.how}")
        levels = Finding(_fallback_levels(), "default: one request alone, then two and four (the admission limit "
                                             "was not visible); set the production concurrency")
    lanes = lanes_for(int(p.window_tokens.value), DEFAULT_ANSWER_TOKENS + headroom)
    out = [
        f"# Written by `python -m pytest_qualify init --endpoint {p.endpoint}` at {written_at}.",
        "# Every value says how it was found: probed (what the endpoint answered) or a default.",
        "# Attach mode only: an endpoint cannot say how it was launched, so [serve] refuses to launch.",
        f"name = {_toml(name)}",
        f"description = {_toml(f'Probed from {p.endpoint} ({p.served_name.value}, window {p.window_tokens.value:,}); attach mode')}",
        "",
        "[deployment]",
        _line("model", p.model),
    ]
    if p.revision.value:
        out.append(_line("revision", p.revision))
    else:
        out.append(f"# revision: {p.revision.how}")
    out += [
        _line("served_name", p.served_name),
        _line("engine", p.engine),
        "# quantization, kv_cache_dtype: not visible from the endpoint; add them from the serve command",
        "",
        "[limits]",
        _line("window_tokens", p.window_tokens),
        _line("answer_tokens", Finding(DEFAULT_ANSWER_TOKENS, "default: the protocol's visible-answer budget")),
        _line("reasoning_headroom_tokens", Finding(headroom, "default: " + (
            "thinking is on by default, so the answer budget holds reasoning too" if headroom
            else "thinking is off by default"))),
        _line("max_num_seqs", admission),
        _line("images_per_request", p.images),
        _line("videos_per_request", p.videos),
        _line("lane_tolerance_tokens", Finding(max(32, int(p.window_tokens.value) // 1024),
                                               "default: 1/1024 of the window, at least 32")),
        f"# lanes: default, sized to the probed window ({', '.join(n for n, _ in lanes)}); "
        f"counted with POST /tokenize ({'probed: it answers' if p.tokenize.value else 'NOT available'})",
        f"# prefix cache: {p.cached_tokens.how}",
    ]
    for lane_name, tokens in lanes:
        out += ["", "[[limits.lanes]]", f"name = {_toml(lane_name)}", f"prompt_tokens = {tokens}"]
    out += [
        "",
        "[thinking]",
        _line("enabled", p.thinking_enabled),
        _line("overridable", p.thinking_overridable),
        f"# reasoning field: {p.reasoning_split.how}",
        "",
        "[timeouts]",
        _line("startup_s", Finding(1800, "default: unused in attach mode")),
        _line("request_s", Finding(120, "default: seconds for one chat request, as the 262k profile allows")),
        _line("per_1k_prompt_tokens_s", Finding(1.0, "default: the 262k profile's allowance per 1K prompt tokens")),
        "",
    ]
    if "load" in modules:  # a required module's table: the load module has no levels without it
        out += ["[load]"]
        if p.admission.value is None:
            out.append(f"# levels: the admission limit was not visible ({p.admission.how}), so they do not "
                       "rise to it; set them from the serve command's --max-num-seqs")
        out += [
            _line("levels", levels),
            _line("requests_per_level", Finding(max(8, 2 * levels.value[-1]), "default: the mix's requests at each "
                                                "level, enough to keep the highest level in flight")),
            _line("probes_per_level", Finding(4, "default: decode probes at each level (TTFT, TPOT, ITL)")),
            _line("probe_tokens", Finding(32, "default: each decode probe's exact output length")),
            "",
        ]
    out += [
        "[serve]",
        "# Not probed and not guessed: " + SERVE_REFUSAL + ".",
        "attach_only = true  # default: an endpoint cannot say how it was launched, so launch mode is refused",
        f"command = {_toml(['sh', '-c', 'echo ' + _shell_quote('pytest-qualify: ' + SERVE_REFUSAL) + ' >&2; exit 2'])}",
        "",
        "[modules]",
        f"# tool calls: {p.auto_tools.how}; {p.tool_calls_parsed.how}",
    ]
    out += [f"# not required: {why}" for why in left_out]
    out.append(f"required = {_toml(modules)}")
    return "\n".join(out) + "\n"


def _shell_quote(text: str) -> str:
    import shlex

    return shlex.quote(text)


def report_lines(p: Probed) -> list[str]:
    """What was found, one line each, for the terminal."""
    rows: Sequence[tuple[str, Finding]] = (
        ("served name", p.served_name), ("model (root)", p.model), ("revision", p.revision),
        ("window", p.window_tokens), ("engine", p.engine), ("/tokenize", p.tokenize),
        ("images per request", p.images), ("videos per request", p.videos),
        ("auto tool choice", p.auto_tools), ("tool calls parsed", p.tool_calls_parsed),
        ("reasoning field", p.reasoning_split), ("thinking on", p.thinking_enabled),
        ("thinking overridable", p.thinking_overridable), ("cached_tokens", p.cached_tokens),
        ("admission limit", p.admission),
    )
    return [f"{label:<21} {f.value!s:<32} {f.how}" for label, f in rows]
