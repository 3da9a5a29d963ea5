"""A stand-in for NVIDIA Dynamo's frontend in front of reference replicas, as its source shows it:
``x-dynamo-worker-instance-id`` pins a request to a worker (else the next in the round), and an
answer names its worker only when the request asks (``nvext.extra_fields: ["worker_id"]``), as
``nvext.worker_id = {prefill_worker_id, decode_worker_id}``: in a plain answer, or in a stream's
final chunk. Worker ids are numbers, as Dynamo's instance ids are."""

from __future__ import annotations

import http.client
import itertools
import json
import threading
import urllib.parse
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

PIN = "x-dynamo-worker-instance-id"


class _Frontend(BaseHTTPRequestHandler):
    workers: Mapping[str, str]  # worker id -> the replica's base URL
    pool: Any  # itertools.cycle over the worker ids
    lock: threading.Lock

    def log_message(self, fmt: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802
        self._forward("GET", None)

    def do_POST(self) -> None:  # noqa: N802
        self._forward("POST", self.rfile.read(int(self.headers.get("Content-Length") or 0)))

    def _forward(self, method: str, body: bytes | None) -> None:
        worker = self.headers.get(PIN) or self._next()
        if worker not in self.workers:
            self._send(404, b'{"error": {"message": "no such worker"}}', "application/json")
            return
        upstream = urllib.parse.urlsplit(self.workers[worker])
        conn = http.client.HTTPConnection(upstream.hostname, upstream.port, timeout=600)
        headers = {k: v for k, v in self.headers.items() if k.lower() in ("content-type", "authorization")}
        try:
            conn.request(method, self.path, body=body, headers=headers)
            answer = conn.getresponse()
            data, kind = answer.read(), answer.getheader("Content-Type") or "application/json"
        finally:
            conn.close()
        request = json.loads(body) if body else {}
        asked = "worker_id" in ((request.get("nvext") or {}).get("extra_fields") or [])
        if asked and answer.status == 200 and self.path.startswith("/v1/chat/completions"):
            data = _named(data, {"worker_id": {"prefill_worker_id": int(worker), "decode_worker_id": int(worker)}})
        self._send(answer.status, data, kind)

    def _next(self) -> str:
        with self.lock:
            return next(self.pool)

    def _send(self, status: int, data: bytes, kind: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def _named(data: bytes, nvext: dict[str, Any]) -> bytes:
    """The answer with ``nvext`` on it: a plain answer's object, or a stream's last chunk."""
    if not data.lstrip().startswith(b"data:"):
        return json.dumps({**json.loads(data), "nvext": nvext}).encode()
    lines = data.split(b"\n")
    chunks = [i for i, line in enumerate(lines) if line.startswith(b"data: {")]
    lines[chunks[-1]] = b"data: " + json.dumps({**json.loads(lines[chunks[-1]][6:]), "nvext": nvext}).encode()
    return b"\n".join(lines)


@contextmanager
def frontend(workers: Mapping[str, str]) -> Iterator[str]:
    """Serve the frontend over ``workers`` (id -> replica URL) until the block ends; its base URL."""
    handler = type("BoundFrontend", (_Frontend,), {"workers": dict(workers), "pool": itertools.cycle(list(workers)),
                                                   "lock": threading.Lock()})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
