"""How the reference server serves concurrent requests: vLLM's scheduler at ``--max-num-seqs``,
simulated. SIMULATED: it models the shape of vLLM's behaviour, never its speed.

A chat request takes a seat: at most ``max_num_seqs`` requests run at once (the batch), the others
wait in arrival order (first come, first served: vLLM's default scheduling policy), and each wait is
observed in ``vllm:request_queue_time_seconds`` as vLLM observes it. A running request decodes in
engine steps of one token per sequence; a step takes longer as the batch grows (more work per step,
more tokens per second in all), so TPOT rises with concurrency while output throughput grows, as on
a real engine.

The load module's fault switches that act on the request itself live here (a 5xx or a dropped
connection once a number of requests are in flight); those that change an answer under concurrency
are applied by ``oracle_load.py``, which reads this request's seat.
"""

from __future__ import annotations

import socket
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

# Each further sequence in the batch adds this share of a single sequence's step time.
STEP_GROWTH = 0.15
QUEUE_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)

_local = threading.local()


@dataclass
class Seat:
    """One request's place in the scheduler. ``others_at_arrival``: requests already in flight
    (running or waiting) when it arrived; ``batch``: sequences running once it was admitted."""

    arrived_s: float
    others_at_arrival: int
    admitted_s: float | None = None
    batch: int = 0

    @property
    def shared(self) -> bool:
        """The request met another one in flight: it was served under concurrency."""
        return self.others_at_arrival > 0 or self.batch > 1


def current_seat() -> Seat | None:
    """The seat of the request this thread serves (None outside a chat request, and in steering mode)."""
    return getattr(_local, "seat", None)


class Scheduler:
    def __init__(self, max_num_seqs: int, faults: Any, metrics: Any = None, top_level: int = 2) -> None:
        self.max_num_seqs = max(1, int(max_num_seqs))
        # The load faults' N when the switch has no =N: the profile's highest load level.
        self.top_level = top_level
        self.faults = faults
        self._cond = threading.Condition()
        self._waiting: deque[Seat] = deque()
        self._running: list[Seat] = []
        self._metrics = metrics
        self._queue_time = self._waiting_gauge = None
        if metrics is not None:
            from prometheus_client import Gauge, Histogram

            self._queue_time = Histogram("vllm:request_queue_time_seconds",
                                         "Histogram of time spent in WAITING phase for request.", ["model_name"],
                                         registry=metrics.registry, buckets=QUEUE_BUCKETS)
            self._waiting_gauge = Gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
                                        ["model_name"], registry=metrics.registry)

    def _gauges(self) -> None:
        if self._metrics is not None:
            self._metrics.running.labels(self._metrics.model).set(len(self._running))
            self._waiting_gauge.labels(self._metrics.model).set(len(self._waiting))

    def _fault_at_arrival(self, in_flight: int, handler: Any) -> None:
        """The load module's request faults: from the Nth request in flight on, a 5xx or a drop."""
        from pytest_qualify.reference.oracle import Rejection

        faults = self.faults
        if "load_500_at" in faults and in_flight >= faults.number("load_500_at", self.top_level):
            faults.engage("load_500_at")
            raise Rejection(500, "Internal Server Error", "InternalServerError")
        if "load_drop_at" in faults and in_flight >= faults.number("load_drop_at", self.top_level):
            faults.engage("load_drop_at")
            print(f"fault load_drop_at: closing a chat request met by {in_flight - 1} others in flight", flush=True)
            handler.close_connection = True
            handler.connection.shutdown(socket.SHUT_RDWR)
            raise ConnectionResetError("load_drop_at")

    @contextmanager
    def seat(self, handler: Any) -> Iterator[Seat]:
        """Hold a place in the batch for the request's whole life: wait in line, run, leave."""
        with self._cond:
            others = len(self._waiting) + len(self._running)
            self._fault_at_arrival(others + 1, handler)
            seat = Seat(time.perf_counter(), others)
            self._waiting.append(seat)
            self._gauges()
            while self._waiting[0] is not seat or len(self._running) >= self.max_num_seqs:
                self._cond.wait()
            self._waiting.popleft()
            self._running.append(seat)
            seat.admitted_s = time.perf_counter()
            seat.batch = len(self._running)
            self._gauges()
            self._cond.notify_all()
        if self._queue_time is not None:
            self._queue_time.labels(self._metrics.model).observe(seat.admitted_s - seat.arrived_s)
        _local.seat = seat
        try:
            yield seat
        finally:
            _local.seat = None
            self._leave(seat)

    def _leave(self, seat: Seat) -> None:
        with self._cond:
            if seat in self._running:
                self._running.remove(seat)
                self._gauges()
                self._cond.notify_all()

    def release_current(self) -> None:
        """This thread's request leaves the batch before it ends: a stream the client gives up on
        (vLLM aborts a request whose client is gone, and its place goes to the next in line)."""
        seat = current_seat()
        if seat is not None:
            self._leave(seat)

    def step_s(self, rate_tok_s: float) -> float:
        """One decode step's time at the current batch size (a single sequence: 1 / rate)."""
        return (1.0 + STEP_GROWTH * (max(1, len(self._running)) - 1)) / rate_tok_s

    def decode(self, tokens: int, rate_tok_s: float) -> None:
        """Spend ``tokens`` engine steps of this request's decode."""
        if rate_tok_s > 0 and tokens > 0:
            if "slow_decode" in self.faults:
                self.faults.engage("slow_decode")  # the rate handed in is the slowed one (serving.decode_rate)
            time.sleep(tokens * self.step_s(rate_tok_s))
