"""What the fleet's stand-in routers share: a handler that takes each request to the upstream its
subclass picks, with the body and the content-type and authorization headers, and sends the
upstream's answer back. A server runs the subclass ``bound`` to its upstreams."""

from __future__ import annotations

import http.client
import threading
import urllib.parse
from collections.abc import Iterator, Mapping
from http.server import BaseHTTPRequestHandler
from typing import Any

FORWARDED = ("content-type", "authorization")


class StandIn(BaseHTTPRequestHandler):
    lock: threading.Lock  # one per bound class, shared by its request threads
    pool: Iterator[str]  # the round, for a stand-in that sends unpinned requests round the upstreams

    @classmethod
    def bound(cls, **fields: Any) -> type[StandIn]:
        """This stand-in with ``fields`` as class attributes and a lock of its own, for one server."""
        return type(f"Bound{cls.__name__.lstrip('_')}", (cls,), {**fields, "lock": threading.Lock()})

    def log_message(self, fmt: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802
        self.forward("GET", None)

    def do_POST(self) -> None:  # noqa: N802
        self.forward("POST", self.rfile.read(int(self.headers.get("Content-Length") or 0)))

    def forward(self, method: str, body: bytes | None) -> None:
        """Send back what the upstream ``upstream`` picks answers; a stand-in that changes the answer
        (or refuses the request) overrides this."""
        self.send(*self.relay(method, body, self.upstream(method, body)))

    def upstream(self, method: str, body: bytes | None) -> str:
        """The base URL of the upstream this request goes to."""
        raise NotImplementedError

    def next_in_round(self) -> str:
        with self.lock:
            return next(self.pool)

    def relay(self, method: str, body: bytes | None, upstream_url: str) -> tuple[int, bytes, str]:
        """The request sent on to ``upstream_url``: the answer's status, body and content type."""
        upstream = urllib.parse.urlsplit(upstream_url)
        conn = http.client.HTTPConnection(upstream.hostname, upstream.port, timeout=600)
        headers = {k: v for k, v in self.headers.items() if k.lower() in FORWARDED}
        try:
            conn.request(method, self.path, body=body, headers=headers)
            answer = conn.getresponse()
            return answer.status, answer.read(), answer.getheader("Content-Type") or "application/json"
        finally:
            conn.close()

    def send(self, status: int, data: bytes, kind: str, headers: Mapping[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)
