"""The way a replica's graded run reaches that replica, and the proof of who answered.

A qualification run asks one endpoint. To grade one replica of a fleet, its run attaches to a local
proxy that forwards every request to the replica (its own URL, or the router with the replica's pin
header: ``X-data-parallel-rank``, ``x-dynamo-worker-instance-id``, ...) and passes every answer back
unchanged, a stream piece by piece. On the way back it reads which replica served each chat answer
(the channel's served-by header, or its JSON field in a plain answer or a stream's chunk) and counts
it: the replica's hits, and any answer another replica served. Nothing is changed but the pin header
and, on a chat request, the fields the channel needs for its answer to name the replica (Dynamo's
``nvext.extra_fields``)."""

from __future__ import annotations

import http.client
import json
import threading
import urllib.parse
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from pytest_qualify.fleet.spec import Channel

HOP_BY_HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "content-length", "proxy-connection",
                        "upgrade", "host"})
CHAT_PATHS = ("/v1/chat/completions", "/v1/completions")


@dataclass(frozen=True)
class Tally:
    """The chat answers that went through: by status, and by the replica that said it served them
    (``None``: the answer named none)."""

    chat_requests: int
    answered: int  # HTTP 200
    served_by: dict[str | None, int]

    def as_dict(self) -> dict[str, Any]:
        return {"chat_requests": self.chat_requests, "answered": self.answered,
                "served_by": {("(not named)" if k is None else k): v for k, v in self.served_by.items()}}


class AttributionProxy:
    """A proxy on ``127.0.0.1`` in front of one replica; :attr:`url` is what its run attaches to."""

    def __init__(self, upstream: str, channel: Channel, pin: tuple[str, str] | None) -> None:
        self.upstream = urllib.parse.urlsplit(upstream)
        self.channel = channel
        self.pin = pin
        self._lock = threading.Lock()
        self._requests = 0
        self._answered = 0
        self._served_by: Counter[str | None] = Counter()
        handler = type("BoundProxyHandler", (_ProxyHandler,), {"proxy": self})
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def __enter__(self) -> AttributionProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def tally(self) -> Tally:
        with self._lock:
            return Tally(self._requests, self._answered, dict(self._served_by))

    def _count(self, status: int, served_by: str | None) -> None:
        with self._lock:
            self._requests += 1
            if status == 200:
                self._answered += 1
                self._served_by[served_by] += 1

    def connection(self) -> http.client.HTTPConnection:
        host = self.upstream.hostname or "127.0.0.1"
        if self.upstream.scheme == "https":
            return http.client.HTTPSConnection(host, self.upstream.port or 443, timeout=3600)
        return http.client.HTTPConnection(host, self.upstream.port or 80, timeout=3600)


class _ProxyHandler(BaseHTTPRequestHandler):
    proxy: AttributionProxy

    def log_message(self, fmt: str, *args: Any) -> None:
        pass  # the replica's run keeps its own evidence; nothing of a request is logged here

    def do_GET(self) -> None:  # noqa: N802
        self._forward("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._forward("POST")

    def _forward(self, method: str) -> None:
        proxy = self.proxy
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        is_chat = method == "POST" and self.path.split("?")[0] in CHAT_PATHS
        if is_chat and body and proxy.channel.request_fields:
            body = _asking(proxy.channel, body)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
        if proxy.pin is not None:
            headers = {k: v for k, v in headers.items() if k.lower() != proxy.pin[0].lower()}
            headers[proxy.pin[0]] = proxy.pin[1]
        path = (proxy.upstream.path.rstrip("/") + self.path) if proxy.upstream.path else self.path
        conn = proxy.connection()
        try:
            conn.request(method, path, body=body, headers=headers)
            upstream = conn.getresponse()
            self.send_response(upstream.status)
            for key, value in upstream.getheaders():
                if key.lower() not in HOP_BY_HOP:
                    self.send_header(key, value)
            known = upstream.getheader("Content-Length")
            if known is not None:
                self.send_header("Content-Length", known)
            self.end_headers()
            # Every piece goes on at once (the run measures its timing); the answer is counted before
            # its last piece (the one that completes its Content-Length, or a stream's [DONE]), so a
            # caller holding the whole answer always finds it in the tally. Who served is read from
            # the first 64 KiB and the last piece (a stream may name its worker in its final chunk).
            total = int(known) if known is not None and known.isdigit() else None
            first, last, received, counted = b"", b"", 0, not is_chat

            def count() -> None:
                seen = first if received <= len(first) else first + b"\n" + last
                proxy._count(upstream.status, _served_by(proxy.channel, dict(upstream.getheaders()), seen))

            while True:
                piece = upstream.read1(65536)
                if not piece:
                    break
                received += len(piece)
                last = piece
                if is_chat and len(first) < 65536:
                    first += piece
                if not counted and ((total is not None and received >= total) or b"data: [DONE]" in piece):
                    count()
                    counted = True
                self.wfile.write(piece)
                self.wfile.flush()
            if not counted:
                count()
        except (ConnectionError, OSError):
            self.close_connection = True
        finally:
            conn.close()


def _asking(channel: Channel, body: bytes) -> bytes:
    """The request's JSON with the channel's request fields merged in; a body that is not a JSON
    object goes on as it came."""
    try:
        doc = json.loads(body)
    except ValueError:
        return body
    return json.dumps(channel.asks(doc)).encode() if isinstance(doc, dict) else body


def _served_by(channel: Channel, headers: dict[str, str], data: bytes) -> str | None:
    """The replica the answer names: its header, else the first JSON document in it that names one."""
    named = channel.served_by(headers)
    if named is not None or not channel.served_by_field:
        return named
    for doc in _documents(data):
        named = channel.served_by({}, doc)
        if named is not None:
            return named
    return None


def _documents(data: bytes) -> Iterator[Any]:
    """A plain answer's JSON, or each chunk of a stream that parses (a cut line is skipped)."""
    try:
        yield json.loads(data)
        return
    except ValueError:
        pass
    for line in data.split(b"\n"):
        if line.startswith(b"data: {"):
            try:
                yield json.loads(line[6:])
            except ValueError:
                continue
