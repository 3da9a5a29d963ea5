"""The reference server's own deterministic tokenizer and chat template (ChatML-like).

A token is a run of word characters, one punctuation character, or a special marker. Images and
videos count as fixed blocks. It is not any model's tokenizer: the suites must size prompts with
the server's ``/tokenize``, which is exactly what this makes testable.
"""

from __future__ import annotations

import functools
import json
import re
import zlib
from collections.abc import Iterable, Mapping
from typing import Any

# The reasoning and tool-call markers are one token each, as in the Qwen3 tokenizer the recipes
# serve (the parsers module checks that a forced marker came as that token).
TOKEN_RE = re.compile(r"<\|[a-z_]+\|>|</?(?:think|tool_call)>|\w+|[^\w\s]")
# The same text with those markers spelt in the tokens of their characters ("<" "think" ">"): what a
# forced text that did not take the markers' own tokens was generated as.
_SPELT_RE = re.compile(r"<\|[a-z_]+\|>|\w+|[^\w\s]")
IMAGE_TOKENS = 64
VIDEO_TOKENS = 256
VOCAB = 151_936


def tokens(text: str) -> list[str]:
    return TOKEN_RE.findall(text)


def count(text: str) -> int:
    return sum(1 for _ in TOKEN_RE.finditer(text))


def ids(text: str) -> list[int]:
    return list(_ids(text))


def spelt_ids(text: str) -> list[int]:
    """The ids of ``text`` with its reasoning and tool-call markers spelt in other tokens."""
    return [zlib.crc32(t.encode()) % VOCAB for t in _SPELT_RE.findall(text)]


@functools.lru_cache(maxsize=8)
def _ids(text: str) -> tuple[int, ...]:
    # A context lane's prompt is tokenized several times (the suite's /tokenize sizing calls, then
    # the chat request itself): the last few texts are kept, which makes a 240K lane's repeats free.
    return tuple(zlib.crc32(t.encode()) % VOCAB for t in tokens(text))


def _content_text(content: Any) -> tuple[str, int]:
    """Text of a message's content and the media tokens it carries."""
    if content is None:
        return "", 0
    if isinstance(content, str):
        return content, 0
    texts, media = [], 0
    for part in content:
        kind = part.get("type")
        if kind == "text":
            texts.append(part.get("text", ""))
        elif kind == "image_url":
            media += IMAGE_TOKENS
        elif kind == "video_url":
            media += VIDEO_TOKENS
    return "\n".join(texts), media


def render_chat(
    messages: Iterable[Mapping[str, Any]],
    tools: list[Any] | None = None,
    add_generation_prompt: bool = True,
) -> tuple[str, int]:
    """The rendered prompt text and the media tokens beside it."""
    parts, media = [], 0
    if tools:
        parts.append("<|im_start|>system\n# Tools\n" + json.dumps(tools, sort_keys=True) + "<|im_end|>\n")
    for msg in messages:
        text, m = _content_text(msg.get("content"))
        media += m
        if msg.get("tool_calls"):
            text += "".join(
                "<|tool_call|>" + json.dumps(c.get("function", {}), sort_keys=True) for c in msg["tool_calls"]
            )
        parts.append(f"<|im_start|>{msg.get('role', '')}\n{text}<|im_end|>\n")
    if add_generation_prompt:
        parts.append("<|im_start|>assistant\n")
    return "".join(parts), media


def count_chat(messages: Iterable[Mapping[str, Any]], tools: list[Any] | None = None,
               add_generation_prompt: bool = True) -> int:
    text, media = render_chat(messages, tools, add_generation_prompt)
    return count(text) + media
