"""A prompt's size guessed before it is sent, for the per-request timeout when the caller gives
none (the server's own count, ``/tokenize``, is what sizes a lane)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

# A generous estimate of prompt size for the per-request timeout when the caller gives none:
# real tokenizers average 3.5-4.5 characters per token on English, and media blocks vary by model.
CHARS_PER_TOKEN_ESTIMATE = 3
IMAGE_TOKENS_ESTIMATE = 2048
VIDEO_TOKENS_ESTIMATE = 16384


def estimate_prompt_tokens(messages: Iterable[Mapping[str, Any]], tools: Any = None) -> int:
    """An upper-side estimate of a chat's prompt tokens, from characters and media parts."""
    chars = len(json.dumps(tools)) if tools else 0
    media = 0
    for msg in messages:
        content = msg.get("content") if isinstance(msg, Mapping) else None
        if isinstance(content, str):
            chars += len(content)
        elif isinstance(content, list):
            for part in content:
                if not isinstance(part, Mapping):
                    continue
                kind = part.get("type")
                if kind == "text":
                    chars += len(str(part.get("text", "")))
                elif kind == "image_url":
                    media += IMAGE_TOKENS_ESTIMATE
                elif kind == "video_url":
                    media += VIDEO_TOKENS_ESTIMATE
    return chars // CHARS_PER_TOKEN_ESTIMATE + media
