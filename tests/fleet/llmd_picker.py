"""A stand-in for llm-d's endpoint picker in front of reference replicas, as its session-affinity
scorer shows it: every answer carries ``x-session-token``, the base64 of the serving pod's
``namespace/name``, and a request carrying a pod's token goes to that pod; any other request (no
token, or one naming no pod) goes to the next pod of the round. ``unrouted`` pods are left out of
the round (a pod the picker never picks), as a scorer that always rates one pod zero would."""

from __future__ import annotations

import base64
import http.client
import itertools
import threading
import urllib.parse
from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TOKEN = "x-session-token"
NAMESPACE = "default"


def token(pod: str) -> str:
    """The pod's session token, as the picker writes it."""
    return base64.b64encode(f"{NAMESPACE}/{pod}".encode()).decode()


class _Picker(BaseHTTPRequestHandler):
    pods: Mapping[str, str]  # token -> the pod's base URL
    pool: Any  # itertools.cycle over the tokens of the round
    lock: threading.Lock

    def log_message(self, fmt: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802
        self._forward("GET", None)

    def do_POST(self) -> None:  # noqa: N802
        self._forward("POST", self.rfile.read(int(self.headers.get("Content-Length") or 0)))

    def _forward(self, method: str, body: bytes | None) -> None:
        asked = self.headers.get(TOKEN)
        pod = asked if asked in self.pods else self._next()
        upstream = urllib.parse.urlsplit(self.pods[pod])
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
        self.send_header(TOKEN, pod)
        self.end_headers()
        self.wfile.write(data)

    def _next(self) -> str:
        with self.lock:
            return next(self.pool)


@contextmanager
def picker(pods: Mapping[str, str], unrouted: Collection[str] = ()) -> Iterator[str]:
    """Serve the picker over ``pods`` (name -> replica URL) until the block ends; its base URL."""
    by_token = {token(name): url for name, url in pods.items()}
    round_ = [token(name) for name in pods if name not in unrouted]
    handler = type("BoundPicker", (_Picker,), {"pods": by_token, "pool": itertools.cycle(round_),
                                               "lock": threading.Lock()})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
