"""Request validation of the reference server: malformed requests get 400, as on vLLM."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_qualify.reference.oracle import Rejection

ROLES = {"system", "user", "assistant", "tool", "developer"}


def _bad(message: str) -> Rejection:
    return Rejection(400, message)


def validate_chat(body: Any, require_model: bool = True) -> None:
    if not isinstance(body, Mapping):
        raise _bad("request body must be a JSON object")
    if require_model and not isinstance(body.get("model"), str):
        raise _bad("'model' must be a string")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _bad("'messages' must be a non-empty list")
    for i, msg in enumerate(messages):
        if not isinstance(msg, Mapping):
            raise _bad(f"messages[{i}] must be an object")
        if msg.get("role") not in ROLES:
            raise _bad(f"messages[{i}].role: unknown role {msg.get('role')!r}")
        content = msg.get("content")
        if content is None and msg.get("role") == "assistant" and msg.get("tool_calls"):
            continue
        if isinstance(content, str):
            continue
        if not isinstance(content, list):
            raise _bad(f"messages[{i}].content must be a string or a list of parts")
        for j, part in enumerate(content):
            if not isinstance(part, Mapping) or not isinstance(part.get("type"), str):
                raise _bad(f"messages[{i}].content[{j}] must be an object with a 'type'")
            kind = part["type"]
            if kind == "text" and not isinstance(part.get("text"), str):
                raise _bad(f"messages[{i}].content[{j}].text must be a string")
            if kind in ("image_url", "video_url"):
                ref = part.get(kind)
                if not isinstance(ref, Mapping) or not isinstance(ref.get("url"), str):
                    raise _bad(f"messages[{i}].content[{j}].{kind}.url must be a string")
            elif kind != "text":
                raise _bad(f"messages[{i}].content[{j}]: unsupported content part type {kind!r}")
    for key in ("max_tokens", "max_completion_tokens"):
        value = body.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise _bad(f"{key} must be at least 1, got {value!r}")
    temperature = body.get("temperature")
    if temperature is not None and (not isinstance(temperature, (int, float)) or isinstance(temperature, bool) or temperature < 0):
        raise _bad(f"temperature must be a non-negative number, got {temperature!r}")
    salt = body.get("cache_salt")
    if salt is not None and (not isinstance(salt, str) or not salt):
        raise _bad("cache_salt must be a non-empty string")
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            raise _bad("'tools' must be a list")
        for i, tool in enumerate(tools):
            fn = tool.get("function") if isinstance(tool, Mapping) else None
            if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str) or not fn.get("name"):
                raise _bad(f"tools[{i}].function.name must be a non-empty string")
            params = fn.get("parameters")
            if params is not None and not isinstance(params, Mapping):
                raise _bad(f"tools[{i}].function.parameters must be an object")
    fmt = body.get("response_format")
    if fmt is not None:
        if not isinstance(fmt, Mapping) or fmt.get("type") not in ("text", "json_object", "json_schema"):
            raise _bad("response_format.type must be one of text, json_object, json_schema")
        if fmt["type"] == "json_schema":
            spec = fmt.get("json_schema")
            if not isinstance(spec, Mapping) or not isinstance(spec.get("schema"), Mapping):
                raise _bad("response_format.json_schema.schema must be an object")
            import jsonschema

            try:
                jsonschema.Draft202012Validator.check_schema(spec["schema"])
            except jsonschema.SchemaError as exc:
                raise _bad(f"response_format.json_schema.schema is not a valid JSON schema: {exc.message}") from None
