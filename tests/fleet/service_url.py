"""A URL the operator took for one pod's own that is really a Service in front of two pods: its
first ``first`` chat requests go to pod ``a`` (the fleet's pinned probes), every later one to pod
``b``; every other request (``/health``, ``/v1/models``, ``/metrics``) to ``a``. What the run reads
of it before its graded run says "pod a"; the graded answers come from pod b."""

from __future__ import annotations

from contextlib import AbstractContextManager

from ..reference.in_thread import serve
from .stand_in import StandIn

CHAT_PATHS = ("/v1/chat/completions", "/v1/completions")


class _Service(StandIn):
    a: str
    b: str
    first: int
    chats: list[int]  # one counter, shared by the handler's threads

    def upstream(self, method: str, body: bytes | None) -> str:
        if method != "POST" or self.path.split("?")[0] not in CHAT_PATHS:
            return self.a
        with self.lock:
            self.chats[0] += 1
            return self.a if self.chats[0] <= self.first else self.b


def service(a: str, b: str, first: int) -> AbstractContextManager[str]:
    """Serve the Service over pods ``a`` and ``b`` (their URLs) until the block ends; its base URL."""
    return serve(_Service.bound(a=a, b=b, first=first, chats=[0]))
