"""The worker pool of the cast, the in-memory writes and the parallel reads.

What a user notices: a Ctrl-C while a call waits for its workers is a
``KeyboardInterrupt``, at any instant, and the call then returns (no hang in the
pool's shutdown, no thread left waiting, no ``RuntimeError: release unlocked
lock``: what ``concurrent.futures``' pool gave, once in a few hundred interrupts).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time

import pytest

from onnx_light.onnx._system.pool import Pool


def test_results_and_exceptions_come_back_in_order():
    with Pool(3) as pool:
        jobs = [pool.submit(lambda i: i * i, i) for i in range(100)]
        assert [job.result() for job in jobs] == [i * i for i in range(100)]
        with pytest.raises(ZeroDivisionError):
            pool.submit(lambda: 1 / 0).result()


def test_a_failure_cancels_the_jobs_not_started():
    """The caller fails while jobs wait in the queue: the one under way ends, the
    others are skipped, and every job is done."""
    ran = []
    started, gate = threading.Event(), threading.Event()

    def under_way() -> bool:
        started.set()
        return gate.wait()

    with pytest.raises(ZeroDivisionError), Pool(1) as pool:
        first = pool.submit(under_way)
        jobs = [pool.submit(ran.append, i) for i in range(50)]
        started.wait()
        threading.Timer(0.3, gate.set).start()  # it ends after the failure
        raise ZeroDivisionError
    assert first.result() is True and gate.is_set()
    assert ran == []
    assert all(job.result() is None for job in jobs)


def test_a_ctrl_c_while_waiting_for_a_worker_is_a_keyboard_interrupt():
    """The main thread waiting for a job gets the KeyboardInterrupt itself; the job
    goes on, can be waited for again, and the pool still closes."""

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        for delay in (0.001, 0.005, 0.02, 0.05):
            with Pool(1) as pool:
                job = pool.submit(time.sleep, 0.2)
                signal.setitimer(signal.ITIMER_REAL, delay)
                with pytest.raises(KeyboardInterrupt):
                    job.result()
                    time.sleep(1)  # the signal always lands before this ends
                assert job.result() is None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


HAMMER = """
import os, random, signal, sys, time
from onnx_light.onnx._system.pool import Pool

armed = [False]
def handler(signum, frame):
    if armed[0]:  # one interrupt per call, as a user's Ctrl-C
        armed[0] = False
        raise KeyboardInterrupt
signal.signal(signal.SIGALRM, handler)

def work(x):
    return sum(range(200)) + x

def call():
    with Pool(2) as pool:
        for job in [pool.submit(work, i) for i in range(100)]:
            job.result()

tasks = len(os.listdir("/proc/self/task"))
start = time.perf_counter()
for _ in range(100):
    call()
duration = (time.perf_counter() - start) / 100
rng = random.Random(0)
interrupted = 0
for _ in range(3000):
    armed[0] = True
    try:
        signal.setitimer(signal.ITIMER_REAL, rng.uniform(1e-6, 1.2 * duration))
        call()
    except KeyboardInterrupt:
        interrupted += 1
    armed[0] = False
    signal.setitimer(signal.ITIMER_REAL, 0)
print(interrupted, len(os.listdir("/proc/self/task")) - tasks)
"""


@pytest.mark.skipif(sys.platform != "linux", reason="counts threads in /proc/self/task")
def test_interrupts_at_any_instant_never_hang_nor_leave_a_thread():
    """3,000 calls, each with a Ctrl-C at a random instant (submitting, waiting,
    starting or ending the threads): each ends with the KeyboardInterrupt or its
    results, none hangs, every thread ends."""
    out = subprocess.run(
        [sys.executable, "-c", HAMMER], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-3000:]
    interrupted, threads_left = map(int, out.stdout.split())
    assert interrupted > 1500, "the interrupts must land inside the calls"
    assert threads_left == 0
