"""Hostile chat requests for the robustness module, as hypothesis strategies over the data in
``fixtures/robustness.toml``.

Each example is one valid chat request with exactly one thing wrong, in one class of bad input
(malformed JSON, wrong types, bad ``max_tokens``, bad roles, bad tools, bad ``response_format``,
bad ``cache_salt``, oversized strings, bad media parts). An example carries the exact bytes to
send, so a failure can be replayed as it was. Imported by the suite and the tests only: it loads
hypothesis, which the plugin itself never does.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from hypothesis import strategies as st

from pytest_qualify.tasks import fixture_data

CHAT_PATH = "/v1/chat/completions"


@dataclass(frozen=True)
class Hostile:
    """One hostile request: its class, what is wrong with it, and the exact body."""

    kind: str
    note: str
    body: bytes
    # A prompt over the window: the engine tokenizes all of it before refusing it, so its cost grows
    # with the window (seconds each at 262,144); a class sends only a few (``over_window_examples``).
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


def variants() -> st.SearchStrategy[tuple[int, bool, int]]:
    return st.tuples(st.integers(0, len(data()["base"]["prompts"]) - 1), st.booleans(), st.integers(0, 16))


def _encode(body: Any) -> bytes:
    return json.dumps(body, ensure_ascii=False).encode("utf-8")


def _example(kind: str, note: str, body: Any) -> Hostile:
    return Hostile(kind, note, body if isinstance(body, bytes) else _encode(body))


def _short(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


# -- one strategy per class ------------------------------------------------------------------------


def malformed_json(target: RequestTarget) -> st.SearchStrategy[Hostile]:
    pool = data()["malformed_json"]

    def truncated(variant: tuple[int, bool, int], fraction: float) -> Hostile:
        valid = _encode(base_body(target, variant))
        cut = min(len(valid) - 1, max(1, int(len(valid) * fraction)))
        return _example("malformed_json", f"body truncated to {cut} of {len(valid)} bytes", valid[:cut])

    def damaged(variant: tuple[int, bool, int], fraction: float, text: str) -> Hostile:
        # Spliced in after the opening brace and before the closing one.
        valid = _encode(base_body(target, variant))
        at = min(len(valid) - 1, max(1, int(len(valid) * fraction)))
        body = valid[:at] + text.encode() + valid[at:]
        return _example("malformed_json", f"{text!r} inserted at byte {at}", body)

    def garbage(raw: bytes) -> Hostile:
        return _example("malformed_json", f"{len(raw) + 1} bytes that are not UTF-8", b"\xff" + raw)

    # Text spliced into a string literal can leave the JSON valid: such bodies are dropped.
    return st.one_of(
        st.builds(truncated, variants(), st.floats(0, 1)),
        st.builds(damaged, variants(), st.floats(0, 1), st.sampled_from(pool["damage"])),
        st.sampled_from(pool["bodies"]).map(lambda b: _example("malformed_json", f"body {b!r}", b.encode())),
        st.binary(max_size=64).map(garbage),
    ).filter(lambda example: not _parses(example.body))


def _parses(body: bytes) -> bool:
    try:
        json.loads(body)
    except ValueError:
        return False
    return True


def wrong_types(target: RequestTarget) -> st.SearchStrategy[Hostile]:
    pool = data()["wrong_types"]

    def field(name: str) -> st.SearchStrategy[Hostile]:
        def build(variant: tuple[int, bool, int], value: Any) -> Hostile:
            body = base_body(target, variant)
            if name == "content":
                body["messages"][0]["content"] = value
                return _example("wrong_types", f"messages[0].content = {_short(value)}", body)
            body[name] = value
            return _example("wrong_types", f"{name} = {_short(value)}", body)

        return st.builds(build, variants(), st.sampled_from(pool[name]))

    return st.one_of(*(field(name) for name in pool))


def max_tokens(target: RequestTarget) -> st.SearchStrategy[Hostile]:
    pool = data()["max_tokens"]

    def build(variant: tuple[int, bool, int], name: str, value: Any) -> Hostile:
        body = base_body(target, variant)
        body.pop("max_tokens")
        body[name] = value
        return _example("max_tokens", f"{name} = {_short(value)} (window {target.window_tokens})", body)

    values = st.one_of(
        st.sampled_from(pool["values"]),
        st.integers(max_value=0, min_value=-(2**62)),
        st.integers(min_value=target.window_tokens + 1, max_value=2**62),
    )
    return st.builds(build, variants(), st.sampled_from(pool["fields"]), values)


def roles(target: RequestTarget) -> st.SearchStrategy[Hostile]:
    pool = data()["roles"]

    def build(variant: tuple[int, bool, int], value: Any, missing: bool, with_system: bool) -> Hostile:
        body = base_body(target, variant)
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

    return st.builds(build, variants(), st.sampled_from(pool["values"]), st.booleans(), st.booleans())


def _valid_tool(name: str) -> dict[str, Any]:
    return {"type": "function", "function": {
        "name": name, "description": f"Look up {name.replace('_', ' ')}.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    }}


def tools(target: RequestTarget) -> st.SearchStrategy[Hostile]:
    pool = data()["tools"]
    names = ("get_weather", "get_time", "get_population")

    def build(variant: tuple[int, bool, int], mutation: str, value: Any, count: int, index: int) -> Hostile:
        body = base_body(target, variant)
        tool_list: Any = [_valid_tool(n) for n in names[:count]]
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

    mutations = {
        "not_a_list": pool["not_a_list"], "not_an_object": pool["not_an_object"], "bad_type": pool["bad_type"],
        "no_function": [None], "bad_function": pool["bad_function"], "no_name": [None],
        "bad_name": pool["bad_name"], "bad_description": pool["bad_description"],
        "bad_parameters": pool["bad_parameters"], "bad_tool_choice": pool["bad_tool_choice"],
    }
    return st.one_of(*(
        st.builds(build, variants(), st.just(m), st.sampled_from(values), st.integers(1, 3), st.integers(0, 2))
        for m, values in mutations.items()
    ))


def response_format(target: RequestTarget) -> st.SearchStrategy[Hostile]:
    pool = data()["response_format"]
    good_schema = {"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]}

    def build(variant: tuple[int, bool, int], mutation: str, value: Any) -> Hostile:
        body = base_body(target, variant)
        spec: dict[str, Any] = {"name": "answer", "schema": dict(good_schema)}
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

    mutations = {
        "not_an_object": pool["not_an_object"], "bad_type": pool["bad_type"], "no_type": [None],
        "no_json_schema": [None], "bad_json_schema": pool["bad_json_schema"], "no_name": [None],
        "bad_name": pool["bad_name"], "bad_schema_value": pool["bad_schema_value"], "bad_schemas": pool["bad_schemas"],
    }
    return st.one_of(*(st.builds(build, variants(), st.just(m), st.sampled_from(v)) for m, v in mutations.items()))


def cache_salt(target: RequestTarget) -> st.SearchStrategy[Hostile]:
    def build(variant: tuple[int, bool, int], value: Any) -> Hostile:
        body = base_body(target, variant)
        body["cache_salt"] = value
        return _example("cache_salt", f"cache_salt = {_short(value)}", body)

    return st.builds(build, variants(), st.sampled_from(data()["cache_salt"]["values"]))


def oversized(target: RequestTarget) -> st.SearchStrategy[Hostile]:
    pool = data()["oversized"]

    def over_window(variant: tuple[int, bool, int], word: str, factor: float, where: str) -> Hostile:
        # One word repeated: at least one token each in any tokenizer, and about one in most, so
        # the prompt is over the window by the factor's margin and not by several times the window
        # (a counter on each word made it 3-4 tokens a word: a million tokens to tokenize).
        count = int(target.window_tokens * factor)
        text = " ".join([word] * count)
        body = base_body(target, variant)
        if where == "system":
            body["messages"].insert(0, {"role": "system", "content": text})
        else:
            body["messages"][0]["content"] = text + "\n" + body["messages"][0]["content"]
        note = f"{where} message of {count:,} words, {factor:.2f}x the {target.window_tokens:,}-token window"
        return Hostile("oversized", note, _encode(body), over_window=True)

    def long_model(variant: tuple[int, bool, int], chars: int) -> Hostile:
        body = base_body(target, variant)
        body["model"] = "m" * chars
        return _example("oversized", f"model name of {chars:,} characters", body)

    factors = st.floats(pool["min_window_factor"], pool["max_window_factor"], allow_nan=False)
    return st.one_of(
        st.builds(over_window, variants(), st.sampled_from(pool["words"]), factors, st.sampled_from(["user", "system"])),
        st.builds(long_model, variants(), st.sampled_from(pool["model_name_chars"])),
    )


def media(target: RequestTarget) -> st.SearchStrategy[Hostile]:
    pool = data()["media"]

    def build(variant: tuple[int, bool, int], mutation: str, value: Any, part: str, first: bool) -> Hostile:
        body = base_body(target, variant)
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

    mutations = {
        "bad_part_type": pool["bad_part_types"], "bad_url": pool["bad_urls"], "bad_scheme": pool["bad_schemes"],
        "not_base64_data": pool["not_base64_data"], "bad_base64": pool["bad_base64"], "wrong_mime": pool["wrong_mime"],
    }
    return st.one_of(*(
        st.builds(build, variants(), st.just(m), st.sampled_from(v), st.sampled_from(pool["parts"]), st.booleans())
        for m, v in mutations.items()
    ))


STRATEGIES: dict[str, Callable[[RequestTarget], st.SearchStrategy[Hostile]]] = {
    "malformed_json": malformed_json,
    "wrong_types": wrong_types,
    "max_tokens": max_tokens,
    "roles": roles,
    "tools": tools,
    "response_format": response_format,
    "cache_salt": cache_salt,
    "oversized": oversized,
    "media": media,
}


def strategy(kind: str, target: RequestTarget) -> st.SearchStrategy[Hostile]:
    return STRATEGIES[kind](target)


def over_window_examples() -> int:
    """How many over-window prompts one class sends at most (``fixtures/robustness.toml``)."""
    return int(data()["oversized"]["over_window_examples"])


def examples_per_class(total: int, kinds: int) -> int:
    """The profile's budget is per run: spread over the classes, rounding up."""
    return max(1, -(-total // kinds))


def collect(kind: str, target: RequestTarget, count: int, send: Callable[[Hostile], None]) -> int:
    """Run ``send`` on ``count`` distinct examples of one class, the same ones on every run
    (derandomized, no example database, no shrinking: every request is sent once and judged by
    the caller). Returns how many were sent: fewer than ``count`` only when the class has fewer
    distinct requests."""
    chosen = examples(kind, target, count)
    for example in chosen:
        send(example)
    return len(chosen)


@cache
def examples(kind: str, target: RequestTarget, count: int) -> tuple[Hostile, ...]:
    """The ``count`` distinct examples :func:`collect` sends, drawn once a process: derandomized, so
    every repetition (and every run) draws the same ones, and drawing them again costs only time.
    (Hypothesis seeds a derandomized run from the test function's source: ``explore`` keeps its
    text, so the examples are the ones every earlier run sent.) Drawing stops once ``count`` are
    chosen: the draws after them could only be dropped."""
    from hypothesis import HealthCheck, Phase, given, settings

    seen: set[bytes] = set()
    chosen: list[Hostile] = []
    send = chosen.append
    over_window_room = [over_window_examples()]

    # Generated values repeat now and then; draw more than needed and send each body once. A prompt
    # over the window proves its point in a few examples (each costs the engine a whole window's
    # tokenizing): past ``over_window_examples`` the class's budget goes to its other examples.
    @settings(max_examples=count * 4, derandomize=True, database=None, deadline=None,
              phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(strategy(kind, target))
    def explore(example: Hostile) -> None:
        if len(seen) >= count:
            raise _Enough
        if example.body in seen or (example.over_window and over_window_room[0] <= 0):
            return
        over_window_room[0] -= example.over_window
        seen.add(example.body)
        send(example)

    try:
        explore()
    except _Enough:
        pass
    return tuple(chosen)


class _Enough(Exception):
    """Raised inside the draw once the class has its examples (hypothesis has no early stop)."""
