"""Request validation of the reference server: malformed requests get 400, as on vLLM.

Every refusal names the class of hostile input it belongs to (``HOSTILE_CLASSES``, the robustness
module's classes), so the ``hostile_500`` fault can answer exactly one class with a 500. The
checks are at least as strict as vLLM's request model; where vLLM's pydantic model coerces (a
numeric string for an integer), the reference refuses too: suites must send proper types.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pytest_qualify.reference.oracle import Rejection

ROLES = {"system", "user", "assistant", "tool", "developer"}
HOSTILE_CLASSES = (
    "malformed_json", "wrong_types", "max_tokens", "roles", "tools", "response_format", "cache_salt",
    "oversized", "media",
)
RESPONSE_FORMAT_TYPES = ("text", "json_object", "json_schema")
TOOL_CHOICES = ("none", "auto", "required")
INT64_MAX = 2**63 - 1


class Invalid(Rejection):
    """A 400 for malformed input, tagged with its class of hostile input."""

    def __init__(self, kind: str, message: str) -> None:
        assert kind in HOSTILE_CLASSES, kind
        super().__init__(400, message)
        self.kind = kind


def hostile_class(rejection: Rejection) -> str | None:
    return getattr(rejection, "kind", None)


def parse_json_body(raw: bytes) -> Any:
    """The body as JSON; an empty body is not JSON (malformed), the literal ``null`` is (a wrong type)."""
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise Invalid("malformed_json", f"invalid JSON body: {exc}") from None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# Optional top-level fields and what each must be: (check, expected), for "wrong types".
_FIELDS: dict[str, tuple[Any, str]] = {
    "temperature": (lambda v: _is_number(v) and v >= 0, "a non-negative number"),
    "top_p": (lambda v: _is_number(v) and 0 < v <= 1, "a number in (0, 1]"),
    "frequency_penalty": (_is_number, "a number"),
    "presence_penalty": (_is_number, "a number"),
    "n": (lambda v: _is_int(v) and v >= 1, "a whole number of at least 1"),
    "seed": (lambda v: _is_int(v) and -INT64_MAX - 1 <= v <= INT64_MAX, "a 64-bit whole number"),
    "top_k": (_is_int, "a whole number"),
    "stream": (lambda v: isinstance(v, bool), "true or false"),
    "logprobs": (lambda v: isinstance(v, bool), "true or false"),
    "parallel_tool_calls": (lambda v: isinstance(v, bool), "true or false"),
    "stop": (lambda v: isinstance(v, str) or (isinstance(v, list) and all(isinstance(s, str) for s in v)),
             "a string or a list of strings"),
    "stream_options": (lambda v: isinstance(v, Mapping), "an object"),
    "chat_template_kwargs": (lambda v: isinstance(v, Mapping), "an object"),
}


def validate_chat(body: Any, require_model: bool = True) -> None:
    if not isinstance(body, Mapping):
        raise Invalid("wrong_types", "request body must be a JSON object")
    if require_model and not isinstance(body.get("model"), str):
        raise Invalid("wrong_types", f"'model' must be a string, got {type(body.get('model')).__name__}")
    _validate_messages(body.get("messages"))
    for key, (check, expected) in _FIELDS.items():
        value = body.get(key)
        if value is not None and not check(value):
            raise Invalid("wrong_types", f"'{key}' must be {expected}, got {value!r:.80}")
    for key in ("max_tokens", "max_completion_tokens"):
        value = body.get(key)
        if value is not None and (not _is_int(value) or value < 1):
            raise Invalid("max_tokens", f"{key} must be at least 1, got {value!r:.80}")
    salt = body.get("cache_salt")
    if salt is not None and (not isinstance(salt, str) or not salt):
        raise Invalid("cache_salt", "Parameter 'cache_salt' must be a non-empty string if provided.")
    _validate_tools(body.get("tools"), body.get("tool_choice"))
    _validate_response_format(body.get("response_format"))
    _validate_structured_outputs(body.get("structured_outputs"), body.get("response_format"))


def _validate_messages(messages: Any) -> None:
    if not isinstance(messages, list) or not messages:
        raise Invalid("wrong_types", "'messages' must be a non-empty list")
    for i, msg in enumerate(messages):
        if not isinstance(msg, Mapping):
            raise Invalid("wrong_types", f"messages[{i}] must be an object")
        role = msg.get("role")
        if not isinstance(role, str):
            raise Invalid("roles", f"messages[{i}].role must be a string, got {role!r:.80}")
        if role not in ROLES:
            raise Invalid("roles", f"messages[{i}].role: unknown role {role!r:.80}")
        content = msg.get("content")
        if content is None and role == "assistant" and msg.get("tool_calls"):
            continue
        if isinstance(content, str):
            continue
        if not isinstance(content, list):
            raise Invalid("wrong_types", f"messages[{i}].content must be a string or a list of parts")
        for j, part in enumerate(content):
            _validate_part(part, f"messages[{i}].content[{j}]")


def _validate_part(part: Any, where: str) -> None:
    if not isinstance(part, Mapping):
        raise Invalid("wrong_types", f"{where} must be an object, got {part!r:.80}")
    if not isinstance(part.get("type"), str):
        raise Invalid("media", f"{where}.type must be a string, got {part.get('type')!r:.80}")
    kind = part["type"]
    if kind == "text":
        if not isinstance(part.get("text"), str):
            raise Invalid("wrong_types", f"{where}.text must be a string")
    elif kind in ("image_url", "video_url"):
        ref = part.get(kind)
        if not isinstance(ref, Mapping) or not isinstance(ref.get("url"), str):
            raise Invalid("media", f"{where}.{kind}.url must be a string")
        url = ref["url"]
        # The content of data: URLs is decoded (and refused) by the media oracle; here only what
        # no server can load at all: local files and schemes other than http(s) and data.
        scheme = url.split(":", 1)[0].lower() if ":" in url else ""
        if scheme not in ("http", "https", "data"):
            raise Invalid("media", f"{where}.{kind}.url: the URL must be either a HTTP or data URL, got {url[:60]!r}")
        if scheme == "data" and ";base64," not in url.split(",", 1)[0] + ",":
            raise Invalid("media", f"{where}.{kind}.url: only base64 data URLs are supported")
    else:
        raise Invalid("media", f"{where}: unsupported content part type {kind!r:.80}")


def _validate_tools(tools: Any, tool_choice: Any) -> None:
    names: list[str] = []
    if tools is not None:
        if not isinstance(tools, list):
            raise Invalid("tools", "'tools' must be a list")
        for i, tool in enumerate(tools):
            if not isinstance(tool, Mapping):
                raise Invalid("tools", f"tools[{i}] must be an object")
            if tool.get("type", "function") != "function":
                raise Invalid("tools", f"tools[{i}].type must be 'function', got {tool.get('type')!r:.80}")
            fn = tool.get("function")
            if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str) or not fn.get("name"):
                raise Invalid("tools", f"tools[{i}].function.name must be a non-empty string")
            description = fn.get("description")
            if description is not None and not isinstance(description, str):
                raise Invalid("tools", f"tools[{i}].function.description must be a string")
            params = fn.get("parameters")
            if params is not None and not isinstance(params, Mapping):
                raise Invalid("tools", f"tools[{i}].function.parameters must be an object")
            names.append(fn["name"])
    if tool_choice is None or tool_choice in TOOL_CHOICES:
        return
    if isinstance(tool_choice, Mapping):
        fn = tool_choice.get("function")
        name = fn.get("name") if isinstance(fn, Mapping) else None
        if tool_choice.get("type") == "function" and isinstance(name, str):
            if name not in names:
                raise Invalid("tools", f"tool_choice names {name!r:.80}, which is not among the request's tools")
            return
    raise Invalid("tools", f"tool_choice must be one of {', '.join(TOOL_CHOICES)} or a named function, got {tool_choice!r:.80}")


def _validate_response_format(fmt: Any) -> None:
    if fmt is None:
        return
    if not isinstance(fmt, Mapping) or fmt.get("type") not in RESPONSE_FORMAT_TYPES:
        raise Invalid("response_format", "response_format.type must be one of text, json_object, json_schema")
    if fmt["type"] != "json_schema":
        return
    spec = fmt.get("json_schema")
    if not isinstance(spec, Mapping):
        raise Invalid("response_format", "When response_format type is 'json_schema', the 'json_schema' field must be provided.")
    if not isinstance(spec.get("name"), str):
        raise Invalid("response_format", "response_format.json_schema.name must be a string")
    if not isinstance(spec.get("schema"), Mapping):
        raise Invalid("response_format", "response_format.json_schema.schema must be an object")
    import jsonschema

    try:
        jsonschema.Draft202012Validator.check_schema(spec["schema"])
    except jsonschema.SchemaError as exc:
        raise Invalid("response_format", f"response_format.json_schema.schema is not a valid JSON schema: {exc.message}") from None


STRUCTURED_KINDS = ("json", "regex", "choice")


def _validate_structured_outputs(constraint: Any, fmt: Any) -> None:
    """vLLM 0.32's rules for ``structured_outputs`` (the reference does not apply the constraint, but
    refuses what vLLM refuses, in its words): one kind of constraint at most, and not together with
    a JSON ``response_format`` (vLLM turns that into a constraint of its own; steering found it)."""
    if constraint is None:
        return
    if not isinstance(constraint, Mapping):
        raise Invalid("wrong_types", f"'structured_outputs' must be an object, got {constraint!r:.80}")
    if sum(constraint.get(kind) is not None for kind in STRUCTURED_KINDS) > 1:
        raise Invalid("response_format", "You can only use one kind of constraints for structured outputs "
                                         "('json', 'regex' or 'choice').")
    if isinstance(fmt, Mapping) and fmt.get("type") in ("json_object", "json_schema"):
        raise Invalid("response_format", "You can only use one kind of structured outputs constraint but multiple "
                                         "are specified")


def overwindow(window: int, prompt_tokens: int) -> Invalid:
    """vLLM's refusal of a prompt longer than the window (0.32 wording: it names window + 1,
    whatever the prompt's real size)."""
    return Invalid(
        "oversized",
        f"This model's maximum context length is {window} tokens. However, your prompt contains at least "
        f"{window + 1} input tokens, which exceeds this limit even without any output tokens. Please reduce "
        f"the length of the input prompt. (parameter=input_tokens, value={window + 1})",
    )


def validate_budget(body: Mapping[str, Any], prompt_tokens: int, window: int) -> None:
    """vLLM 0.32's answer-budget rules: ``max_tokens`` over the window is refused, a prompt that
    fills the whole window leaves no room and is refused, and otherwise ``max_tokens`` is cut to
    what fits (the server clamps; the answer then ends with finish ``length``)."""
    requested = body.get("max_completion_tokens") or body.get("max_tokens")
    if _is_int(requested) and requested > window:
        raise Invalid(
            "max_tokens",
            f"max_tokens={requested} cannot be greater than max_model_len={window}. Please request fewer "
            f"output tokens. (parameter=max_tokens, value={requested})",
        )
    if prompt_tokens >= window:
        raise Invalid("max_tokens", "max_tokens must be at least 1, got 0. (parameter=max_tokens, value=0)")