"""The one connection probe of an endpoint (``target.probe_health``): what attach mode's
reachability check and the server watch read. Any HTTP answer counts as reachable; no answer is
an error naming the transport's failure; a timeout is told apart (a hung server is not a dead one)."""

from __future__ import annotations

import http.server
import socket
import threading
import time

import pytest

from pytest_qualify.server.lifecycle import free_port
from pytest_qualify.server.target import probe_health, unreachable_reason


class _Handler(http.server.BaseHTTPRequestHandler):
    status = 404
    delay_s = 0.0

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        time.sleep(self.delay_s)
        self.send_response(self.status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def endpoint():
    servers = []

    def serve(status: int = 404, delay_s: float = 0.0) -> str:
        handler = type("Handler", (_Handler,), {"status": status, "delay_s": delay_s})
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield serve
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("status", [200, 404, 503])
def test_any_http_answer_is_reachable(endpoint, status):
    url = endpoint(status)
    assert probe_health(url, 5.0).status == status
    assert unreachable_reason(url, attempts=1) is None


def test_no_listener_is_an_error_naming_the_transport_failure():
    url = f"http://127.0.0.1:{free_port()}"
    probe = probe_health(url, 2.0)
    assert probe.status is None and not probe.timed_out and probe.error.startswith("ConnectError: ")
    assert unreachable_reason(url, attempts=2, pause_s=0.0) == probe.error


def test_a_slow_answer_is_a_timeout_not_a_refusal(endpoint):
    probe = probe_health(endpoint(200, delay_s=1.0), 0.2)
    assert probe.status is None and probe.timed_out and probe.error.startswith(("ReadTimeout", "ConnectTimeout"))


def test_a_closed_connection_without_an_answer_is_an_error():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]

        def drop() -> None:
            conn, _ = listener.accept()
            conn.close()

        threading.Thread(target=drop, daemon=True).start()
        probe = probe_health(f"http://127.0.0.1:{port}", 5.0)
    assert probe.status is None and not probe.timed_out and probe.error
