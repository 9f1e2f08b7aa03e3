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

A worker ends on the ``None`` that follows the jobs, and puts it back for the
next worker: telling them all is one C call, which an interrupt cannot cut in
two. ``close`` makes that call; a pool dropped before its ``close`` made it
(an interrupt anywhere in the code that closes it) makes it as it is freed,
from a weak reference's callback that is C code only (``functools.partial``
of the queue's ``put``), so no signal handler can run inside it. The workers
wait on the queue without a timeout: CPython 3.10 to 3.12's
``SimpleQueue.get(timeout=...)`` can wait forever once it was handed the
queue's lock before its deadline and got the GIL back only after it, so a
worker that looked for its pool only when such a wait ran out could be left
behind, blocked, after its pool was dropped.
"""

from __future__ import annotations

import _thread
import functools
import queue
import weakref
from collections.abc import Callable
from typing import Any

__all__ = ["Job", "Pool"]


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

    The ``None`` is put back for the next worker. A pool dropped without being
    closed skips the jobs left (``pool`` is dead) and puts the ``None`` as it
    is freed.
    """
    try:
        while True:
            job = jobs.get()  # no timeout: see the module's docstring
            if job is None:
                jobs.put(None)  # for the next worker
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
        self._ended: list = []
        # freed unclosed: the None that ends the workers, put by C code only
        ref = weakref.ref(self, functools.partial(self._jobs.put, None))
        try:
            for _ in range(threads):
                ended = [_thread.allocate_lock(), False]  # released, and set, when it ends
                ended[0].acquire()
                _thread.start_new_thread(_work, (self._jobs, self._cancelled, ended, ref))
                self._ended.append(ended)  # interrupted before: it ends on the None unseen
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
        self._jobs.put(None)  # each worker puts it back as it ends
        while self._ended:
            lock, done = self._ended[-1]
            if not done:
                lock.acquire()  # an interrupt leaves the lock as it was
            self._ended.pop()

    def __enter__(self) -> Pool:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close(cancel=exc_type is not None)
