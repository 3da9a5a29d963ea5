"""The reference server on a given state in a thread of the test's own process (no subprocess, no
launch): the handler the server runs, bound to ``state``, on a free loopback port."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import ThreadingHTTPServer

from pytest_qualify.reference.handler import Handler
from pytest_qualify.reference.state import ReferenceState


@contextmanager
def serving(state: ReferenceState) -> Iterator[str]:
    """Serve ``state`` until the block ends; its base URL (no ``/v1``)."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), type("BoundHandler", (Handler,), {"state": state}))
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
