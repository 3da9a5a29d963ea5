"""A URL the operator took for one pod's own that is really a Service in front of two pods: its
first ``first`` chat requests go to pod ``a`` (the fleet's pinned probes), every later one to pod
``b``; every other request (``/health``, ``/v1/models``, ``/metrics``) to ``a``. What the run reads
of it before its graded run says "pod a"; the graded answers come from pod b."""

from __future__ import annotations

import http.client
import threading
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

CHAT_PATHS = ("/v1/chat/completions", "/v1/completions")


class _Service(BaseHTTPRequestHandler):
    a: str
    b: str
    first: int
    chats: list[int]  # one counter, shared by the handler's threads
    lock: threading.Lock

    def log_message(self, fmt: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802
        self._forward("GET", None, self.a)

    def do_POST(self) -> None:  # noqa: N802
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        pod = self.a
        if self.path.split("?")[0] in CHAT_PATHS:
            with self.lock:
                self.chats[0] += 1
                pod = self.a if self.chats[0] <= self.first else self.b
        self._forward("POST", body, pod)

    def _forward(self, method: str, body: bytes | None, pod: str) -> None:
        upstream = urllib.parse.urlsplit(pod)
        conn = http.client.HTTPConnection(upstream.hostname, upstream.port, timeout=600)
        headers = {k: v for k, v in self.headers.items() if k.lower() in ("content-type", "authorization")}
        try:
            conn.request(method, self.path, body=body, headers=headers)
            answer = conn.getresponse()
            data, kind = answer.read(), answer.getheader("Content-Type") or "application/json"
        finally:
            conn.close()
        self.send_response(answer.status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@contextmanager
def service(a: str, b: str, first: int) -> Iterator[str]:
    """Serve the Service over pods ``a`` and ``b`` (their URLs) until the block ends; its base URL."""
    handler = type("BoundService", (_Service,), {"a": a, "b": b, "first": first, "chats": [0],
                                                 "lock": threading.Lock()})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
