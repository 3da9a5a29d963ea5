"""Hostile chat requests for the robustness module, built from a seeded, stored corpus of recipes.

Each example is one valid chat request with exactly one thing wrong, in one class of bad input
(malformed JSON, wrong types, bad ``max_tokens``, bad roles, bad tools, bad ``response_format``,
bad ``cache_salt``, oversized strings, bad media parts). An example carries the exact bytes to
send, so a failure can be replayed as it was.

Nothing is drawn at run time. ``fixtures/robustness_corpus.json`` holds, per class, the recipes of
``CORPUS_PER_CLASS`` examples: a builder of this module and the values drawn for it, from the data
in ``fixtures/robustness.toml``. A run builds its share of each class from the first recipes against
its own target (served name, window), in the corpus's order. The recipes were drawn by hypothesis
with a fixed seed (``hostile_strategies.py``, which the tests run to check that the stored corpus is
exactly that draw, and that every recipe builds a request with its one fault); the plugin itself
never imports hypothesis.

A prompt over the window is not in the corpus: the window bracket's over-window refusal proves
that property once a repetition (``suites/test_robustness.py``, ``test_over_window_refused``), and
:func:`over_window` is the one such prompt the robustness module sends where that proof is not
in the run.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from pytest_qualify.tasks import fixture_data

CHAT_PATH = "/v1/chat/completions"
CORPUS_FILE = "robustness_corpus.json"
# Recipes stored per class; a profile's budget (``modules.robustness_examples``) is at most this
# many per class (the profile schema's maximum is this times the classes).
CORPUS_PER_CLASS = 64


@dataclass(frozen=True)
class Hostile:
    """One hostile request: its class, what is wrong with it, and the exact body."""

    kind: str
    note: str
    body: bytes
    # A prompt over the window: the engine tokenizes all of it before refusing it, so its cost grows
    # with the window (seconds each at 262,144); the run sends one only where no proof is on record.
    over_window: bool = False

    @property
    def prompt_tokens_estimate(self) -> int:
        return len(self.body) // 3

    def replay(self) -> dict[str, Any]:
        """The request as data (never a credential): enough to send it again byte for byte."""
        request: dict[str, Any] = {"method": "POST", "path": CHAT_PATH, "headers": {"Content-Type": "application/json"}}
        try:
            request["body_utf8"] = self.body.decode("utf-8")
        except UnicodeDecodeError:
            request["body_base64"] = base64.b64encode(self.body).decode()
        return request

    def preview(self, chars: int = 300) -> str:
        text = self.body.decode("utf-8", errors="backslashreplace")
        if len(text) <= chars:
            return text
        return f"{text[:chars]}... ({len(self.body):,} bytes)"


@dataclass(frozen=True)
class RequestTarget:
    """What a request needs to be valid apart from its one fault."""

    served_name: str
    window_tokens: int


@cache
def data() -> Mapping[str, Any]:
    return fixture_data.robustness()


def classes() -> tuple[str, ...]:
    return tuple(data()["classes"]["order"])


def base_body(target: RequestTarget, variant: tuple[int, bool, int] = (0, False, 0)) -> dict[str, Any]:
    """The valid request a hostile example starts from. ``variant`` (prompt, stream, extra answer
    tokens) varies what is valid about it, so small classes of bad values still make many
    distinct requests."""
    base = data()["base"]
    prompt_index, stream, extra_tokens = variant
    body: dict[str, Any] = {
        "model": target.served_name,
        "messages": [{"role": "user", "content": base["prompts"][prompt_index % len(base["prompts"])]}],
        "max_tokens": base["max_tokens"] + extra_tokens,
    }
    if stream:
        body["stream"] = True
    return body


def _encode(body: Any) -> bytes:
    return json.dumps(body, ensure_ascii=False).encode("utf-8")


def _example(kind: str, note: str, body: Any) -> Hostile:
    return Hostile(kind, note, body if isinstance(body, bytes) else _encode(body))


def _short(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


# -- the builders: one per kind of recipe -----------------------------------------------------------
# Each takes the target and the recipe's drawn values (JSON data: a variant is a list of three) and
# returns the example. ``hostile_strategies.py`` draws the values from ``fixtures/robustness.toml``.

Variant = tuple[int, bool, int]


def _variant(raw: Any) -> Variant:
    prompt_index, stream, extra_tokens = raw
    return int(prompt_index), bool(stream), int(extra_tokens)


def truncated(target: RequestTarget, variant: Any, fraction: float) -> Hostile:
    valid = _encode(base_body(target, _variant(variant)))
    cut = min(len(valid) - 1, max(1, int(len(valid) * fraction)))
    return _example("malformed_json", f"body truncated to {cut} of {len(valid)} bytes", valid[:cut])


def _object_openings(valid: bytes) -> list[int]:
    """The byte offsets just after a ``{`` or a ``:`` outside any string literal: text spliced in
    there stands where an object wants a key or a value, so no damage text can leave the body valid
    JSON (inside a string literal it could, whatever the target's body holds there)."""
    at, in_string, escaped = [], False, False
    for i, byte in enumerate(valid):
        if in_string:
            escaped = not escaped and byte == 0x5C
            if byte == 0x22 and not escaped:
                in_string = False
            elif byte != 0x5C:
                escaped = False
        elif byte == 0x22:
            in_string = True
        elif byte in b"{:":
            at.append(i + 1)
    return at


def damaged(target: RequestTarget, variant: Any, fraction: float, text: str) -> Hostile:
    # Spliced in at the object opening nearest the fraction of the body (outside any string).
    valid = _encode(base_body(target, _variant(variant)))
    openings = _object_openings(valid)
    want = int(len(valid) * fraction)
    at = min(openings, key=lambda i: (abs(i - want), i))
    return _example("malformed_json", f"{text!r} inserted at byte {at}", valid[:at] + text.encode() + valid[at:])


def not_json(target: RequestTarget, text: str) -> Hostile:
    return _example("malformed_json", f"body {text!r}", text.encode())


def garbage(target: RequestTarget, raw_hex: str) -> Hostile:
    raw = bytes.fromhex(raw_hex)
    return _example("malformed_json", f"{len(raw) + 1} bytes that are not UTF-8", b"\xff" + raw)


def wrong_type(target: RequestTarget, name: str, variant: Any, value: Any) -> Hostile:
    body = base_body(target, _variant(variant))
    if name == "content":
        body["messages"][0]["content"] = value
        return _example("wrong_types", f"messages[0].content = {_short(value)}", body)
    body[name] = value
    return _example("wrong_types", f"{name} = {_short(value)}", body)


def bad_max_tokens(target: RequestTarget, variant: Any, name: str, value: Any) -> Hostile:
    # {"window_plus": k}: an integer k over the target's window (the window is the target's).
    if isinstance(value, dict) and set(value) == {"window_plus"}:
        value = target.window_tokens + int(value["window_plus"])
    body = base_body(target, _variant(variant))
    body.pop("max_tokens")
    body[name] = value
    return _example("max_tokens", f"{name} = {_short(value)} (window {target.window_tokens})", body)


def bad_role(target: RequestTarget, variant: Any, value: Any, missing: bool, with_system: bool) -> Hostile:
    body = base_body(target, _variant(variant))
    message = body["messages"][0]
    if missing:
        del message["role"]
        note = "a message without a role"
    else:
        message["role"] = value
        note = f"role = {_short(value)}"
    if with_system:
        body["messages"].insert(0, {"role": "system", "content": "You are terse."})
        note += " (after a valid system message)"
    return _example("roles", note, body)


TOOL_NAMES = ("get_weather", "get_time", "get_population")


def _valid_tool(name: str) -> dict[str, Any]:
    return {"type": "function", "function": {
        "name": name, "description": f"Look up {name.replace('_', ' ')}.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    }}


def bad_tool(target: RequestTarget, variant: Any, mutation: str, value: Any, count: int, index: int) -> Hostile:
    body = base_body(target, _variant(variant))
    tool_list: Any = [_valid_tool(n) for n in TOOL_NAMES[:count]]
    index %= count
    fn = tool_list[index]["function"]
    if mutation == "not_a_list":
        tool_list = value
    elif mutation == "not_an_object":
        tool_list[index] = value
    elif mutation == "bad_type":
        tool_list[index]["type"] = value
    elif mutation == "no_function":
        del tool_list[index]["function"]
    elif mutation == "bad_function":
        tool_list[index]["function"] = value
    elif mutation == "no_name":
        del fn["name"]
    elif mutation == "bad_name":
        fn["name"] = value
    elif mutation == "bad_description":
        fn["description"] = value
    elif mutation == "bad_parameters":
        fn["parameters"] = value
    body["tools"] = tool_list
    body["tool_choice"] = value if mutation == "bad_tool_choice" else "auto"
    shown = "" if mutation in ("no_function", "no_name") else f" = {_short(value)}"
    where = {"bad_tool_choice": "tool_choice", "not_a_list": "tools (not a list)"}.get(
        mutation, f"tools[{index}] {mutation.replace('_', ' ')}")
    return _example("tools", f"{where}{shown} ({count} tools)", body)


GOOD_SCHEMA = {"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]}


def bad_response_format(target: RequestTarget, variant: Any, mutation: str, value: Any) -> Hostile:
    body = base_body(target, _variant(variant))
    spec: dict[str, Any] = {"name": "answer", "schema": dict(GOOD_SCHEMA)}
    fmt: Any = {"type": "json_schema", "json_schema": spec}
    if mutation == "not_an_object":
        fmt = value
    elif mutation == "bad_type":
        fmt["type"] = value
    elif mutation == "no_type":
        del fmt["type"]
    elif mutation == "no_json_schema":
        del fmt["json_schema"]
    elif mutation == "bad_json_schema":
        fmt["json_schema"] = value
    elif mutation == "no_name":
        del spec["name"]
    elif mutation == "bad_name":
        spec["name"] = value
    elif mutation in ("bad_schema_value", "bad_schemas"):
        spec["schema"] = value
    body["response_format"] = fmt
    shown = "" if mutation.startswith("no_") else f" = {_short(value)}"
    return _example("response_format", f"response_format {mutation.replace('_', ' ')}{shown}", body)


def bad_cache_salt(target: RequestTarget, variant: Any, value: Any) -> Hostile:
    body = base_body(target, _variant(variant))
    body["cache_salt"] = value
    return _example("cache_salt", f"cache_salt = {_short(value)}", body)


def long_model(target: RequestTarget, variant: Any, chars: int) -> Hostile:
    body = base_body(target, _variant(variant))
    body["model"] = "m" * int(chars)
    return _example("oversized", f"model name of {int(chars):,} characters", body)


def bad_media(target: RequestTarget, variant: Any, mutation: str, value: Any, part: str, first: bool) -> Hostile:
    body = base_body(target, _variant(variant))
    if mutation == "bad_part_type":
        bad: dict[str, Any] = {"type": value, "hologram": {"url": "https://example.invalid/x"}}
        note = f"content part type = {_short(value)}"
    elif mutation == "bad_url":
        bad = {"type": part, part: {"url": value}}
        note = f"{part}.url = {_short(value)}"
    else:
        bad = {"type": part, part: {"url": value}}
        note = f"{part}.url = {_short(value)} ({mutation.replace('_', ' ')})"
    text = {"type": "text", "text": body["messages"][0]["content"]}
    body["messages"][0]["content"] = [bad, text] if first else [text, bad]
    return _example("media", note, body)


BUILDERS: dict[str, Callable[..., Hostile]] = {f.__name__: f for f in (
    truncated, damaged, not_json, garbage, wrong_type, bad_max_tokens, bad_role, bad_tool, bad_response_format,
    bad_cache_salt, long_model, bad_media,
)}


def build(recipe: Mapping[str, Any], target: RequestTarget) -> Hostile:
    """The example a recipe (``{"build": name, "args": [...]}``) makes for this target."""
    return BUILDERS[recipe["build"]](target, *recipe["args"])


def over_window(target: RequestTarget) -> Hostile:
    """One user message over the window by ``min_window_factor`` (5%): one word repeated, at least
    one token each in any tokenizer and about one in most, so the engine must tokenize it whole to
    refuse it, and it is not several times the window."""
    pool = data()["oversized"]
    count = int(target.window_tokens * float(pool["min_window_factor"]))
    text = " ".join([pool["words"][0]] * count)
    body = base_body(target)
    body["messages"][0]["content"] = text + "\n" + body["messages"][0]["content"]
    note = f"user message of {count:,} words, {float(pool['min_window_factor']):.2f}x the {target.window_tokens:,}-token window"
    return Hostile("oversized", note, _encode(body), over_window=True)


# -- the corpus ------------------------------------------------------------------------------------------


@cache
def corpus() -> Mapping[str, tuple[Mapping[str, Any], ...]]:
    """The stored recipes per class (``fixtures/robustness_corpus.json``), in their drawn order."""
    raw = fixture_data.read_json(CORPUS_FILE)
    return {kind: tuple(raw["classes"][kind]) for kind in classes()}


def examples_per_class(total: int, kinds: int) -> int:
    """The profile's budget is per run: spread over the classes, rounding up."""
    return max(1, -(-total // kinds))


def collect(kind: str, target: RequestTarget, count: int, send: Callable[[Hostile], None]) -> int:
    """Run ``send`` on ``count`` distinct examples of one class, the same ones on every run (the
    corpus's first recipes). Returns how many were sent: fewer than ``count`` only when the corpus
    holds fewer distinct requests of the class for this target."""
    chosen = examples(kind, target, count)
    for example in chosen:
        send(example)
    return len(chosen)


@cache
def examples(kind: str, target: RequestTarget, count: int) -> tuple[Hostile, ...]:
    """The ``count`` distinct examples :func:`collect` sends: the class's recipes built in order for
    this target, each body once. A malformed-JSON recipe whose damage lands inside a string for this
    target's served name leaves valid JSON: it is skipped, as the draw skipped such bodies."""
    seen: set[bytes] = set()
    chosen: list[Hostile] = []
    for recipe in corpus()[kind]:
        if len(chosen) >= count:
            break
        example = build(recipe, target)
        if example.body in seen or (kind == "malformed_json" and _parses(example.body)):
            continue
        seen.add(example.body)
        chosen.append(example)
    return tuple(chosen)


def _parses(body: bytes) -> bool:
    try:
        json.loads(body)
    except ValueError:
        return False
    return True
