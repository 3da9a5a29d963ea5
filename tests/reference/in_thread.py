"""A server in a thread of the test's own process (no subprocess, no launch) on a free loopback
port: any handler class (``serve``), or the reference server's handler bound to a state
(``serving``)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from pytest_qualify.reference.handler import Handler
from pytest_qualify.reference.state import ReferenceState


@contextmanager
def serve(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """Serve ``handler`` in a daemon thread until the block ends; its base URL."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def serving(state: ReferenceState) -> AbstractContextManager[str]:
    """Serve ``state`` until the block ends; its base URL (no ``/v1``)."""
    return serve(type("BoundHandler", (Handler,), {"state": state}))
