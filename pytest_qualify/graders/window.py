"""Window bracket: an over-window prompt must be refused with HTTP 400 and a message naming the limit.

vLLM has worded the refusal several ways; each names the window in tokens:
"This model's maximum context length is 4096 tokens. However, your prompt contains at least 4097
input tokens ...", "... However, your request has 4097 input tokens ...", and in the engine's own
check "The decoder prompt (length 4097) is longer than the maximum model length of 4096."
"""

from __future__ import annotations

import re
from pytest_qualify.graders import Verdict

_LIMIT_WORDS = re.compile(r"context length|model length|max_model_len|maximum (?:context|model|sequence)|too long|longer than", re.I)


def _numbers(text: str) -> set[int]:
    return {int(re.sub(r"[,_ ]", "", m)) for m in re.findall(r"\d{1,3}(?:[,_ ]\d{3})+|\d+", text)}


def check_overwindow_refusal(status: int | None, message: str, window_tokens: int, prompt_tokens: int) -> Verdict:
    """``status``/``message``: what the server did with a ``prompt_tokens``-token prompt (None:
    it answered). Accept HTTP 400 whose message names the limit and the window."""
    what = f"over-window prompt ({prompt_tokens} tokens, window {window_tokens})"
    if status is None:
        return Verdict.reject(f"{what} was answered (HTTP 200) instead of refused with HTTP 400")
    shown = " ".join(str(message).split())[:200]
    if status != 400:
        return Verdict.reject(f"{what} got HTTP {status}, expected 400: {shown!r}")
    if window_tokens not in _numbers(shown):
        return Verdict.reject(f"{what} refused with HTTP 400, but the message does not name the window {window_tokens}: {shown!r}")
    if not _LIMIT_WORDS.search(shown):
        return Verdict.reject(f"{what} refused with HTTP 400, but the message does not say it is about the length limit: {shown!r}")
    return Verdict.accept(f"{what} refused with HTTP 400: {shown!r}")

