"""The reference server's scheduler (reference/scheduler.py) and length controls (oracle_load.py):
requests beyond max_num_seqs wait in arrival order and their wait is in vLLM's queue-time
histogram; a step takes longer as the batch grows; ``ignore_eos`` / ``min_tokens`` decode exactly the
asked tokens, as vLLM does; the load faults engage only under concurrency."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import httpx
import pytest

from pytest_qualify.evidence.metrics import parse
from pytest_qualify.profiles import load_profile
from pytest_qualify.reference.faults import Faults
from pytest_qualify.reference.oracle import Rejection
from pytest_qualify.reference.scheduler import Scheduler, current_seat
from pytest_qualify.reference.state import Metrics, ReferenceState
from .in_thread import serving

PROFILE = load_profile("small")


def _hold(scheduler: Scheduler, hold_s: float, log: list, name: str) -> bool:
    with scheduler.seat(SimpleNamespace()) as seat:
        log.append(("in", name, seat.batch))
        shared = current_seat() is seat and seat.shared
        time.sleep(hold_s)
        log.append(("out", name, seat.batch))
    return shared


def test_at_most_max_num_seqs_run_and_the_rest_wait_in_arrival_order():
    metrics = Metrics("m")
    scheduler = Scheduler(2, Faults(), metrics)
    log: list = []
    threads = []
    for n in range(5):
        t = threading.Thread(target=_hold, args=(scheduler, 0.05, log, f"r{n}"))
        t.start()
        threads.append(t)
        time.sleep(0.005)  # arrival order r0, r1, ...
    for t in threads:
        t.join()
    running, most = 0, 0
    for kind, _, _ in log:
        running += 1 if kind == "in" else -1
        most = max(most, running)
    assert most == 2
    assert [name for kind, name, _ in log if kind == "in"] == ["r0", "r1", "r2", "r3", "r4"]
    snap = parse(metrics.text().decode())
    assert snap.get("request_queue_time_seconds_count") == 5
    assert snap.get("request_queue_time_seconds_sum") > 0.05  # r2..r4 each waited about one hold


def test_a_request_alone_is_not_shared_and_one_beside_another_is():
    scheduler = Scheduler(4, Faults())
    assert _hold(scheduler, 0.0, [], "alone") is False
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(_hold, scheduler, 0.1, [], "a")
        time.sleep(0.02)
        second = pool.submit(_hold, scheduler, 0.0, [], "b")
        assert second.result() is True and first.result() is False


def test_a_decode_step_grows_with_the_batch():
    scheduler = Scheduler(8, Faults())
    alone = scheduler.step_s(1000.0)
    scheduler._running.extend([object()] * 4)  # a batch of four
    assert alone == pytest.approx(0.001) and scheduler.step_s(1000.0) > alone


def test_the_5xx_fault_engages_only_at_its_number_in_flight():
    scheduler = Scheduler(1, Faults.parse(["load_500_at=2"]))
    assert _hold(scheduler, 0.0, [], "alone") is False  # one in flight: no fault
    with ThreadPoolExecutor(1) as pool:
        held = pool.submit(_hold, scheduler, 0.1, [], "a")
        time.sleep(0.02)
        with pytest.raises(Rejection) as err:
            with scheduler.seat(SimpleNamespace()):
                pass
        assert err.value.status == 500
        held.result()


@pytest.fixture
def server():
    with serving(ReferenceState(PROFILE, Faults(), None, 0.0, 0.0)) as url:
        yield url


@pytest.mark.parametrize("controls", [{"ignore_eos": True}, {"min_tokens": 24}], ids=["ignore_eos", "min_tokens"])
def test_length_controls_decode_exactly_the_asked_tokens(server, controls):
    body = {"model": PROFILE.deployment.served_name, "max_tokens": 24, "temperature": 0,
            "messages": [{"role": "user", "content": "Count upward from 1."}], **controls}
    reply = httpx.post(f"{server}/v1/chat/completions", json=body, timeout=30).json()
    assert reply["usage"]["completion_tokens"] == 24
    assert reply["choices"][0]["finish_reason"] == "length"
    plain = httpx.post(f"{server}/v1/chat/completions", json={**body, "ignore_eos": False, "min_tokens": 0},
                       timeout=30).json()
    assert plain["usage"]["completion_tokens"] < 24 and plain["choices"][0]["finish_reason"] == "stop"


def test_a_request_given_up_on_leaves_the_batch_for_the_next_in_line():
    # stream_stall: the client abandons a silent stream and vLLM aborts it; the engine serves the next.
    scheduler = Scheduler(1, Faults())
    log: list = []

    def stalled() -> None:
        with scheduler.seat(SimpleNamespace()):
            scheduler.release_current()
            time.sleep(0.3)

    t = threading.Thread(target=stalled)
    t.start()
    time.sleep(0.02)
    t0 = time.perf_counter()
    _hold(scheduler, 0.0, log, "next")
    assert time.perf_counter() - t0 < 0.2  # not behind the stalled one's 0.3 s
    t.join()
