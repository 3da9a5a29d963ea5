"""Reading a stream: its chunks on a helper thread, so that silence after the first chunk can be
timed (``StreamIdle``) and the request's deadline kept (``Deadline``); whether it ended with
``data: [DONE]``; cutting a stream we stopped waiting for."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from pytest_qualify.client.answer import as_dict
from pytest_qualify.client.errors import StreamIdle

# A stream may go silent this long after its first chunk when the profile does not say otherwise.
DEFAULT_STREAM_IDLE_S = 30.0


def watch_for_done(stream: Any) -> Callable[[], bool | None]:
    """Whether the stream ended with ``data: [DONE]``: the SDK ends its iteration on it and on a
    closed connection alike, so its events are watched as they pass. None when this SDK's stream
    does not show its events (nothing is judged then)."""
    events = getattr(stream, "_iter_events", None)
    if events is None or not callable(events):
        return lambda: None
    seen: list[bool] = []
    used: list[bool] = []  # the SDK read its events through the watch (else nothing is judged)

    def watched() -> Iterator[Any]:
        used.append(True)
        for sse in events():
            if str(getattr(sse, "data", "")).startswith("[DONE]"):
                seen.append(True)
            yield sse

    try:
        stream._iter_events = watched
    except Exception:  # noqa: BLE001 - a stream we cannot watch is read as it is
        return lambda: None
    return lambda: bool(seen) if used else None


def chunks_with_idle_limit(stream: Any, idle_s: float, deadline: float, t0: float) -> Iterator[dict[str, Any]]:
    """The stream's chunks as dicts, read by a helper thread so that silence can be timed.

    httpx's read timeout is one number for every read, and the first read legitimately waits for
    the whole prefill (minutes on a long lane); after the first token a healthy server sends
    tokens every few hundred milliseconds. So the request budget governs until the first chunk,
    and ``idle_s`` after it; either limit closes the connection and raises at once. Any chunk
    starts the clock, a bare role chunk too: vLLM sends the role with the first token, after the
    prefill (its chat stream generator answers the first engine output with it), so silence after
    any chunk is a stalled decode. A router that sent the role before the prefill would need a
    ``stream_idle_s`` above its prefill time. SSE comments (``: keep-alive``) are not chunks: a
    server that sends only those has stopped answering, and is idle."""
    items: queue.Queue[tuple[str, Any]] = queue.Queue()

    def read() -> None:
        try:
            for chunk in stream:
                items.put(("chunk", as_dict(chunk)))
            items.put(("end", None))
        except BaseException as exc:  # handed to the caller's thread, which raises it
            items.put(("error", exc))

    threading.Thread(target=read, name="qualify-stream-reader", daemon=True).start()
    received = 0
    running = False  # the idle clock: on from the first chunk
    last = time.perf_counter()
    while True:
        now = time.perf_counter()
        wait = deadline - now
        if running:
            wait = min(wait, last + idle_s - now)
        try:
            kind, value = items.get(timeout=max(wait, 0.0))
        except queue.Empty:
            abandon(stream)
            now = time.perf_counter()
            if running and now - last >= idle_s:
                raise StreamIdle("streamed chat completion", idle_s, received, now - t0) from None
            raise Deadline() from None
        if kind == "end":
            return
        if kind == "error":
            raise value
        received += 1
        last = time.perf_counter()
        running = True
        yield value


def abandon(stream: Any) -> None:
    """Cut a stream we stopped waiting for: shut its socket down, so the reader thread ends and
    the connection is never handed to another request."""
    import socket

    response = getattr(stream, "response", None)
    try:
        network = response.extensions.get("network_stream") if response is not None else None
        sock = network.get_extra_info("socket") if network is not None else None
        if sock is not None:
            sock.shutdown(socket.SHUT_RDWR)
    except Exception:  # best effort: the reader is a daemon thread and dies with the run
        pass


class Deadline(Exception):
    """A stream still running at the request's time limit."""
