"""One HTTP start-up for both servers of this room, the SIMULATED reference server
(``handler.py``) and the steering proxy (``steer.py``): a threaded server on ``host:port`` whose
handler class carries the server's state, a banner line once it listens, and a quiet end on
Ctrl-C or SIGTERM-turned-interrupt (the plugin stops the process group)."""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class _Server(ThreadingHTTPServer):
    # A burst of connections, as a module asking at a max_num_seqs of 32 opens, is accepted as vLLM's
    # server accepts it: the standard library's listen backlog of 5 refuses the rest.
    request_queue_size = 128


def serve_http(host: str, port: int, handler: type[BaseHTTPRequestHandler], state: Any, banner: str) -> None:
    """Serve until interrupted: ``handler`` subclassed with ``state`` as a class attribute (every
    request's handler instance reads it), ``banner`` printed once the socket listens."""
    bound = type(f"Bound{handler.__name__}", (handler,), {"state": state})
    httpd = _Server((host, port), bound)
    httpd.daemon_threads = True  # a request still streaming never holds the process up at its end
    print(banner, flush=True)
    try:
        httpd.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        httpd.server_close()
