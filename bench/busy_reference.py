"""The reference server, keeping each answered request's time on its simulated engine in a file.

``python bench/busy_reference.py BUSY_LOG [reference server arguments]`` runs
``python -m pytest_qualify.reference`` with one addition for the bench: when a chat request's
answer is done (the scheduler's ``release_current``, which the handler calls as it records the
request's ``vllm:e2e_request_latency_seconds``), one line ``{"start": epoch_s, "end": epoch_s}``
goes to ``BUSY_LOG``, from the request's admission to the batch (its queue time excluded) to its
release. A refused request never reaches the engine and writes nothing, as it adds nothing to
vLLM's e2e histogram. ``bench/busy.py`` reads the file.
"""

from __future__ import annotations

import json
import runpy
import sys
import threading
import time


def install(path: str) -> None:
    from pytest_qualify.reference import scheduler

    lock = threading.Lock()
    # perf_counter on the server, epoch seconds in the file: one offset, taken once.
    offset = time.time() - time.perf_counter()
    fh = open(path, "a", encoding="utf-8", buffering=1)  # noqa: SIM115 - open for the server's life
    release = scheduler.Scheduler.release_current

    def release_current(self: scheduler.Scheduler) -> None:
        seat = scheduler.current_seat()
        if seat is not None and seat.admitted_s is not None and seat in self._running:
            line = json.dumps({"start": round(seat.admitted_s + offset, 6), "end": round(time.perf_counter() + offset, 6)})
            with lock:
                fh.write(line + "\n")
        release(self)

    scheduler.Scheduler.release_current = release_current  # type: ignore[method-assign]


def main() -> None:
    path, sys.argv = sys.argv[1], [sys.argv[0], *sys.argv[2:]]
    install(path)
    runpy.run_module("pytest_qualify.reference", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
