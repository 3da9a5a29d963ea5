"""How the reference server shapes an oracle's reply into what it sends: the token budget applied
(a cut answer or call ends ``length``, as on vLLM), the completion's token count, the stream's
deltas of a few tokens each, the prompt's media tokens per kind. Pure functions; no HTTP here."""

from __future__ import annotations

import json

from pytest_qualify.reference import oracle, tokenizer

CONTENT_PIECE_TOKENS = 4


def media_tokens(req: oracle.ChatRequest) -> dict[str, int] | None:
    """Prompt tokens per kind of media, as vLLM reports them (``null`` for a text-only prompt)."""
    counts: dict[str, int] = {}
    for part in req.media_parts():
        kind = {"image_url": "image", "video_url": "video"}.get(str(part.get("type")))
        if kind:
            counts[kind] = counts.get(kind, 0) + (tokenizer.IMAGE_TOKENS if kind == "image" else tokenizer.VIDEO_TOKENS)
    return counts or None


def pieces(text: str) -> list[str]:
    """Split text into stream deltas of a few tokens, keeping every character."""
    toks = list(tokenizer.TOKEN_RE.finditer(text))
    if not toks:
        return [text] if text else []
    cuts = [toks[i].start() for i in range(0, len(toks), CONTENT_PIECE_TOKENS)][1:]
    out, prev = [], 0
    for cut in cuts:
        out.append(text[prev:cut])
        prev = cut
    out.append(text[prev:])
    return out


def cut(text: str, tokens: int) -> str:
    """The text's first ``tokens`` tokens."""
    toks = list(tokenizer.TOKEN_RE.finditer(text))
    return text[: toks[tokens - 1].end()] if tokens > 0 and toks else ""


def shape(reply: oracle.Reply, max_tokens: int) -> tuple[str | None, list[tuple[str, str]], str]:
    """Apply the token budget: an answer longer than ``max_tokens`` is cut, finish ``length``;
    tool calls too (the call in progress keeps the arguments generated so far, later ones go)."""
    calls = [(n, a if isinstance(a, str) else json.dumps(a)) for n, a in reply.tool_calls]
    content = reply.content
    finish = reply.finish_reason or ("tool_calls" if calls else "stop")
    if content is not None and tokenizer.count(content) > max_tokens:
        content = cut(content, max_tokens)
        finish = "length"
    if calls and completion_tokens(None, calls, None) > max_tokens:
        left, kept = max_tokens, []
        for name, args in calls:
            need = tokenizer.count(name) + tokenizer.count(args)
            if need <= left:
                kept.append((name, args))
                left -= need
                continue
            if left > tokenizer.count(name):
                kept.append((name, cut(args, left - tokenizer.count(name))))
            break
        calls, finish = kept, "length"
    return content, calls, finish


def completion_tokens(content: str | None, calls: list[tuple[str, str]], reasoning: str | None) -> int:
    n = tokenizer.count(content or "") + tokenizer.count(reasoning or "")
    n += sum(tokenizer.count(name) + tokenizer.count(args) for name, args in calls)
    return max(1, n + 1)  # the end-of-sequence token counts, as it does on a real server
