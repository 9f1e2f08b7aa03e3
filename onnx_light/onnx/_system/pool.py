"""Threads that run a call's jobs, which a Ctrl-C at any instant leaves cleanly.

``concurrent.futures.ThreadPoolExecutor`` takes Python-level locks in the
calling thread: a ``Condition`` per future (``add_done_callback``,
``result``), a ``Semaphore`` per ``submit``, an ``Event`` per thread started.
A signal handler runs between two bytecodes of that code, so its exception can
land after such a lock was acquired and before the ``with`` that releases it
took over: the lock stays held, a worker then waits for it forever, and the
interrupted call hangs in the pool's shutdown (or the process at its exit), or
ends in ``RuntimeError: release unlocked lock`` instead of the
``KeyboardInterrupt``. The interrupt tests met both.

Here the calling thread only puts jobs on a :class:`queue.SimpleQueue` and
waits on plain locks: C calls, which a signal's exception leaves as they were
(a lock's ``acquire`` is either done or not). The threads are started with
:func:`_thread.start_new_thread` (nothing to wait for) and each releases a
plain lock when it ends. Jobs are run in the order they were submitted.

A worker never depends on the calling thread to end: an interrupt can land
anywhere in the code that tells it to (``close``, or a clean-up when the pool
is dropped unclosed), so each worker also ends by itself once its pool is gone
(it holds only a weak reference to it, and looks when the queue has been
empty for a moment).
"""

from __future__ import annotations

import _thread
import queue
import weakref
from collections.abc import Callable
from typing import Any

__all__ = ["Job", "Pool"]

IDLE = 0.05  # seconds a worker waits on an empty queue before it looks for its pool


class Job:
    """One call submitted to a :class:`Pool`; :meth:`result` waits for it."""

    __slots__ = ("_args", "_done", "_error", "_fn", "_ran", "_value")

    def __init__(self, fn: Callable[..., Any], args: tuple) -> None:
        self._fn, self._args = fn, args
        self._value: Any = None
        self._error: BaseException | None = None
        self._ran = False
        self._done = _thread.allocate_lock()
        self._done.acquire()

    def run(self, cancelled: bool) -> None:
        """Call the function in a worker (skipped when the pool was cancelled)."""
        try:
            if not cancelled:
                self._value = self._fn(*self._args)
        except BaseException as e:  # given to the waiting thread by result()
            self._error = e
        finally:
            self._fn = self._args = None
            self._ran = True
            self._done.release()

    def result(self) -> Any:
        """The function's value, once it has run.

        Raises:
            BaseException: what the function raised, or a signal's exception
                raised while waiting (the job goes on; wait again or close
                the pool).
        """
        if not self._ran:
            self._done.acquire()  # an interrupt leaves the lock as it was
        if self._error is not None:
            raise self._error
        return self._value


def _work(jobs: queue.SimpleQueue, cancelled: list[bool], ended: list, pool: weakref.ref) -> None:
    """A worker: run jobs until the ``None`` that ends it, then say so in ``ended``.

    A pool dropped without being closed (an interrupt in the code that closes
    it) cancels the jobs left and ends its workers, with nothing to run in the
    calling thread.
    """
    try:
        while True:
            try:
                job = jobs.get(timeout=IDLE)
            except queue.Empty:
                if pool() is None:
                    return  # dropped unclosed: nothing can queue a job any more
                continue
            if job is None:
                return
            job.run(cancelled[0] or pool() is None)  # dropped unclosed: skip the rest
    finally:
        ended[1] = True
        ended[0].release()


class Pool:
    """``threads`` workers; ``with Pool(n) as pool:`` waits for them on the way out.

    Leaving the block with an exception cancels the jobs not started yet; the
    ones under way finish first (they may hold descriptors the caller's
    clean-up closes).
    """

    def __init__(self, threads: int) -> None:
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._cancelled = [False]  # read by the workers before each job
        self._threads = threads
        self._ended: list = []
        try:
            for _ in range(threads):
                ended = [_thread.allocate_lock(), False]  # released, and set, when it ends
                ended[0].acquire()
                _thread.start_new_thread(
                    _work, (self._jobs, self._cancelled, ended, weakref.ref(self))
                )
                self._ended.append(ended)  # interrupted before: it ends on its None unseen
        except BaseException:
            self.close(cancel=True)
            raise

    def submit(self, fn: Callable[..., Any], *args: Any) -> Job:
        """Queue ``fn(*args)``; returns its :class:`Job`."""
        job = Job(fn, args)
        self._jobs.put(job)
        return job

    def close(self, cancel: bool = False) -> None:
        """End the workers once the queued jobs ran (``cancel``: skip those not started).

        Raises:
            BaseException: a signal's exception while waiting; the workers
                still end on their own.
        """
        if cancel:
            self._cancelled[0] = True
        for _ in range(self._threads):
            self._jobs.put(None)
        self._threads = 0
        while self._ended:
            lock, done = self._ended[-1]
            if not done:
                lock.acquire()  # an interrupt leaves the lock as it was
            self._ended.pop()

    def __enter__(self) -> Pool:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close(cancel=exc_type is not None)
