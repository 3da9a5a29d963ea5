"""Waivers that together cover a module are refused before any request, with one verdict, in
attach mode too: the attached endpoint (read at session start when nothing can refuse the run at
collection) is not asked anything, no verdict is printed and no bundle is left; exit 4 in one line."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from ..helpers import suite
from .profile_files import write

UNION = """
[[waiver]]
item = "test_corpus_item[image-*]"
reason = "the route answers media requests with a refusal"
expires = 2099-12-31
expect = 12

[[waiver]]
item = "test_corpus_item[mixed-*]"
reason = "the route answers media requests with a refusal"
expires = 2099-12-31
expect = 4

[[waiver]]
item = "test_corpus_item[video-*]"
reason = "the route answers media requests with a refusal"
expires = 2099-12-31
expect = 14
"""


class _Recording(BaseHTTPRequestHandler):
    """An endpoint that records every request it is sent and answers none usefully."""

    seen: list[str] = []

    def _any(self) -> None:
        self.seen.append(f"{self.command} {self.path}")
        self.send_response(503)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_POST = _any

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def recording():
    seen: list[str] = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), type("Handler", (_Recording,), {"seen": seen}))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()


@pytest.mark.parametrize("xdist", [(), ("-n", "2")], ids=["one-process", "xdist"])
def test_a_waiver_set_covering_a_module_is_refused_in_attach_mode_before_any_request(qualify_pytest, tmp_path: Path,
                                                                                    recording, xdist):
    url, seen = recording
    waivers = write(tmp_path, UNION)
    result = qualify_pytest("--qualify-waivers", str(waivers), *xdist, endpoint=url, modules=("multimodal",),
                            suites=suite("multimodal"))
    out, err = result.stdout.str(), result.stderr.str()
    assert result.ret == pytest.ExitCode.USAGE_ERROR, out[-3000:]
    assert "together match every item of module 'multimodal' (30 of 30)" in err
    assert [line for line in err.splitlines() if line.startswith("ERROR:")] and \
        len([line for line in err.splitlines() if line.startswith("ERROR:")]) == 1, err
    assert seen == [], seen  # the endpoint was asked nothing
    assert "QUALIFICATION" not in out and "INCOMPLETE" not in out, out[-2000:]  # one verdict: the usage error
    evidence = qualify_pytest.evidence
    assert not evidence.exists() or not any(p.is_dir() for p in evidence.iterdir()), list(evidence.rglob("*"))
