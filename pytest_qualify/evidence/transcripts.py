"""The run's transcripts (``transcripts.jsonl``): every protocol request as sent and its answer as
received, one line each, written by the answer journal's seam (``qualify_ask``) while the run goes;
and, per item, the answer slots its contract read. ``report.html`` is only a rendering of these
lines and ``summary.json``, so it can be rebuilt from a bundle. No pytest here.

A request is kept as data, not as bytes: a long text (a context lane's haystack) becomes its size,
its sha256, its first and last lines and where the strings the test named (the needles) sit in it,
and a data URL its media type, size and sha256 — the bundle stays small enough to attach, and the
digest still ties the record to the exact prompt. Every line passes through ``redaction.redact``
before it is written; xdist workers append under the same file lock as the journal.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_qualify.evidence.jsonl import append_line, read_lines
from pytest_qualify.redaction import redact

if TYPE_CHECKING:
    from pytest_qualify.client.endpoint import Answer

TRANSCRIPTS_FILE = "transcripts.jsonl"
# A text longer than this is kept as its digest, size, ends and marks.
LONG_TEXT_CHARS = 4000
END_LINES = 3
END_LINE_CHARS = 240
# A kind of line: a request and its answer, or the slots an item's contract read.
ASKED, SLOTS = "asked", "slots"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", errors="surrogateescape")).hexdigest()


def _cut(line: str) -> str:
    return line if len(line) <= END_LINE_CHARS else line[: END_LINE_CHARS - 1] + "\u2026"


def compact_text(text: str, marks: Mapping[str, str] | None = None) -> str | dict[str, Any]:
    """``text`` itself when short; else what identifies it: size, sha256, line count, its first and
    last lines, and each mark's first position (character, line, depth as a fraction of the text)."""
    if len(text) <= LONG_TEXT_CHARS:
        return text
    lines = text.splitlines()
    found = []
    for name, needle in (marks or {}).items():
        at = text.find(needle) if needle else -1
        found.append({"name": name, "value": needle, "char": at if at >= 0 else None,
                      "line": text.count("\n", 0, at) + 1 if at >= 0 else None,
                      "depth": round(at / len(text), 4) if at >= 0 else None})
    return {"compacted": True, "chars": len(text), "sha256": _digest(text), "lines": len(lines),
            "first_lines": [_cut(x) for x in lines[:END_LINES]],
            "last_lines": [_cut(x) for x in lines[-END_LINES:]] if len(lines) > END_LINES else [],
            "marks": found}


def _compact_value(value: Any, marks: Mapping[str, str] | None) -> Any:
    if isinstance(value, str):
        if value.startswith("data:") and "," in value[:200]:
            head = value[5: value.index(",")]
            return {"data_url": head, "chars": len(value), "sha256": _digest(value)}
        return compact_text(value, marks)
    if isinstance(value, Mapping):
        return {str(k): _compact_value(v, marks) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_compact_value(v, marks) for v in value]
    return value


def compact_messages(messages: Sequence[Mapping[str, Any]], marks: Mapping[str, str] | None = None) -> list[Any]:
    """The messages as sent, long texts and data URLs replaced by what identifies them."""
    return [_compact_value(dict(m), marks) for m in messages]


def answer_record(answer: Answer) -> dict[str, Any]:
    """What came back: visible content, tool calls (raw and parsed), reasoning, finish reason,
    usage, the stream's chunk counts (with its tokens per chunk and whether it came whole with its
    finish) and the client-observed timing."""
    from pytest_qualify.client.timing import request_metrics

    calls = []
    for call in answer.tool_calls:
        try:
            parsed: Any = call.parsed_arguments()
        except json.JSONDecodeError as exc:
            parsed = {"invalid JSON": str(exc)}
        calls.append({"id": call.id, "name": call.name, "arguments": call.arguments, "parsed": parsed})
    metrics = request_metrics(answer.timeline, answer.prompt_tokens, answer.completion_tokens, answer.stream)
    stream = answer.stream
    return {
        "content": answer.content,
        "reasoning": answer.reasoning,
        "reasoning_tokens": answer.reasoning_tokens,
        "tool_calls": calls,
        "finish_reason": answer.finish_reason,
        "usage": dict(answer.usage),
        "streamed": bool(answer.streamed),
        "stream": None if stream is None else {
            "chunks": stream.chunks, "content_deltas": stream.content_deltas, "finish_chunks": stream.finish_chunks,
            "usage_chunks": stream.usage_chunks, "tool_deltas": len(stream.tool_deltas), "done": stream.done,
            # How the output came: chunks that carried it, tokens per such chunk (each chunk's own where
            # the stream said so), and whether it all came in one chunk with the finish.
            "output_chunks": stream.output_chunks, "tokens_per_chunk": metrics.tokens_per_chunk,
            "chunk_tokens": [n for n in stream.chunk_tokens if n > 0], "whole_at_finish": stream.whole_at_finish},
        # TTFT at the first chunk with choices; the first content token's time beside it.
        "timing": {"ttft_s": metrics.ttft_s, "ttfvt_s": metrics.ttfvt_s, "e2e_s": metrics.e2e_s,
                   "prompt_tokens": metrics.prompt_tokens,
                   "completion_tokens": metrics.completion_tokens, "decode_tok_s": metrics.decode_tok_s},
    }


def asked_record(nodeid: str, key: str, messages: Sequence[Mapping[str, Any]], params: Mapping[str, Any],
                 answer: Answer | None = None, error: str | None = None,
                 marks: Mapping[str, str] | None = None) -> dict[str, Any]:
    """One request as sent (messages compacted, every other field as given: tools, response_format,
    sampling settings, the cache salt) and its answer, or the error that came instead."""
    return {"kind": ASKED, "nodeid": nodeid, "key": key,
            "request": {"messages": compact_messages(messages, marks), "params": _compact_value(dict(params), None)},
            "answer": answer_record(answer) if answer is not None else None, "error": error}


def slots_record(nodeid: str, slots: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The slots a verdict's contract read (``graders.Verdict.slots``), in order."""
    return {"kind": SLOTS, "nodeid": nodeid, "slots": [dict(s) for s in slots]}


def append(run_dir: Path, record: Mapping[str, Any], secrets: Sequence[str] = ()) -> None:
    append_line(run_dir / TRANSCRIPTS_FILE, redact(json.dumps(record, ensure_ascii=False, default=str), secrets))


def read(run_dir: Path) -> list[dict[str, Any]]:
    """The bundle's transcript lines, in the order written; a line cut by a killed worker is skipped."""
    return read_lines(run_dir / TRANSCRIPTS_FILE)


def by_item(records: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, list[Mapping[str, Any]]]]:
    """``{nodeid: {"asked": [...], "slots": [...]}}``: each item's requests and the slots read."""
    out: dict[str, dict[str, list[Mapping[str, Any]]]] = {}
    for r in records:
        entry = out.setdefault(str(r.get("nodeid", "")), {ASKED: [], SLOTS: []})
        if r.get("kind") == SLOTS:
            entry[SLOTS].extend(r.get("slots") or [])
        else:
            entry[ASKED].append(r)
    return out
