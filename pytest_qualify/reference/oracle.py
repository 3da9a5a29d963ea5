"""How the reference server decides what to answer: oracle modules, discovered by name.

Each ``pytest_qualify/reference/oracle_*.py`` module may define:

- ``PRIORITY: int`` — lower runs first (default 100);
- ``FAULTS: dict[str, str]`` — its fault switches that change what an answer says (text, tool
  calls) and what they do: the steering proxy can force these on a real vLLM;
- ``SERVED_FAULTS: dict[str, str]`` — its fault switches that change how an answer is served
  (finish, emptiness, reasoning, usage, status, stream shape): the reference server's alone;
- ``admit(req, ctx) -> None`` — raise :class:`Rejection` to refuse a request (media limits, ...);
- ``answer(req, ctx) -> Reply | None`` — the answer when the request is one of its tasks;
- ``finalize(req, reply, ctx) -> Reply`` — change any answer after it is chosen (server-wide
  faults such as a reasoning leak).

Oracles read the request (and the project's fixture ground truth), never test names.
"""

from __future__ import annotations

import importlib
import pkgutil
import threading
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from types import ModuleType
from typing import Any

from pytest_qualify.profiles import Profile


class Rejection(Exception):
    """Refuse the request with this HTTP status and an OpenAI-shaped error body."""

    def __init__(self, status: int, message: str, err_type: str = "BadRequestError", param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.err_type = err_type
        self.param = param  # vLLM's error.param (e.g. "image" on a media-limit refusal)


@dataclass(frozen=True)
class ChatRequest:
    body: Mapping[str, Any]

    @property
    def messages(self) -> list[Mapping[str, Any]]:
        return list(self.body.get("messages") or [])

    @property
    def tools(self) -> list[Mapping[str, Any]]:
        return list(self.body.get("tools") or [])

    @property
    def stream(self) -> bool:
        return bool(self.body.get("stream"))

    @property
    def response_format(self) -> Mapping[str, Any] | None:
        return self.body.get("response_format")

    def texts(self, role: str | None = None) -> list[str]:
        out = []
        for msg in self.messages:
            if role is not None and msg.get("role") != role:
                continue
            content = msg.get("content")
            if isinstance(content, str):
                out.append(content)
            elif isinstance(content, list):
                out.extend(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
        return out

    def last_user_text(self) -> str:
        texts = self.texts("user")
        return texts[-1] if texts else ""

    def all_text(self) -> str:
        return "\n".join(self.texts())

    def media_parts(self) -> list[Mapping[str, Any]]:
        parts = []
        for msg in self.messages:
            content = msg.get("content")
            if isinstance(content, list):
                parts.extend(p for p in content if isinstance(p, dict) and p.get("type") not in (None, "text"))
        return parts

    def thinking_requested(self) -> bool:
        kwargs = self.body.get("chat_template_kwargs") or {}
        return bool(kwargs.get("enable_thinking") or kwargs.get("thinking"))


@dataclass
class Reply:
    content: str | None = None
    tool_calls: list[tuple[str, Any]] = field(default_factory=list)  # (name, arguments dict or JSON text)
    reasoning: str | None = None
    finish_reason: str | None = None
    # A fault may report prefix-cache hits the cache did not have (None: report the real hits).
    cached_tokens: int | None = None
    # The answer faults that changed this answer (the steering log's proof that a fault engaged).
    faults: tuple[str, ...] = ()
    # The generated ids, returned on the choice where the request asks ``return_token_ids`` (vLLM's
    # ``token_ids``); None: the server's tokenizer's ids of the answer's text are not known here.
    token_ids: tuple[int, ...] | None = None


@dataclass
class OracleContext:
    profile: Profile
    faults: Any  # pytest_qualify.reference.faults.Faults
    # How the server counts a chat prompt's tokens (messages, tools), for the faults keyed on a
    # context lane: None is the reference tokenizer; steering mode counts with the real vLLM's
    # /tokenize, since the lanes are sized in that server's tokens.
    count_chat: Callable[[Any, Any], int | None] | None = None
    _counts: Counter[str] = field(default_factory=Counter)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def occurrence(self, kind: str) -> int:
        """How many times a task of this kind has been seen, this one included (1-based)."""
        with self._lock:
            self._counts[kind] += 1
            return self._counts[kind]


@cache
def oracle_modules() -> tuple[ModuleType, ...]:
    import pytest_qualify.reference as pkg

    mods = [
        importlib.import_module(f"{pkg.__name__}.{info.name}")
        for info in pkgutil.iter_modules(pkg.__path__)
        if info.name.startswith("oracle_")
    ]
    return tuple(sorted(mods, key=lambda m: (getattr(m, "PRIORITY", 100), m.__name__)))


def known_faults() -> dict[str, str]:
    faults: dict[str, str] = {}
    for mod in oracle_modules():
        faults.update(getattr(mod, "FAULTS", {}))
        faults.update(getattr(mod, "SERVED_FAULTS", {}))
    return faults


def admit(req: ChatRequest, ctx: OracleContext) -> None:
    for mod in oracle_modules():
        check = getattr(mod, "admit", None)
        if check is not None:
            check(req, ctx)


def answer(req: ChatRequest, ctx: OracleContext) -> Reply:
    for mod in oracle_modules():
        fn = getattr(mod, "answer", None)
        if fn is None:
            continue
        reply = fn(req, ctx)
        if reply is not None:
            break
    else:
        reply = Reply(content="I do not know.")
    for mod in oracle_modules():
        post = getattr(mod, "finalize", None)
        if post is not None:
            reply = post(req, reply, ctx)
    return reply
