"""Signals during a write: an interrupt cleans up, and never cuts a commit in half.

While a call has files under temporary names (:func:`guarded`), SIGINT,
SIGTERM and SIGHUP go through one handler:

- outside a critical section, the signal acts at once, as an exception: the
  caller's own handler runs (SIGINT: ``KeyboardInterrupt``), or, for a signal
  whose action is to end the process, :class:`Terminated` is raised so the
  temporary files are removed; the signal is then raised again with its own
  action once they are gone (the process ends as it would have);
- inside one (:func:`critical`: creating a temporary file and recording it,
  the renames of a commit and their bookkeeping, the clean-up), it is held
  and delivered when the section ends.

Python runs signal handlers in the main thread only: elsewhere no signal
interrupts the call's code, and :func:`guarded` changes nothing. A signal
whose handler was not set from Python, or is ignored, is left alone.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)
)


class Terminated(BaseException):
    """A signal that ends the process, raised as an exception so files are cleaned up.

    Attributes:
        signum: the signal.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(f"terminated by signal {signum}")
        self.signum = signum


class _State:
    """What the one handler needs: how deep we are, and what waits."""

    def __init__(self) -> None:
        self.depth = 0  # nested guarded() sections
        self.critical = 0  # nested critical() sections
        self.pending: list[int] = []
        self.originals: dict[int, object] = {}


_state = _State()


def _handler(signum: int, frame) -> None:
    state = _state
    if state.critical:
        state.pending.append(signum)
        return
    state.critical += 1  # the clean-up that follows is not cut short by a second signal
    original = state.originals.get(signum)
    if callable(original):
        original(signum, frame)  # e.g. KeyboardInterrupt
        state.critical -= 1  # the caller's handler returned: carry on
        return
    raise Terminated(signum)


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def guarded() -> Iterator[None]:
    """Route SIGINT, SIGTERM and SIGHUP through the handler while files are pending.

    Raises:
        Terminated: only when a terminating signal's own action did not end
            the process (it is raised again after the clean-up).
    """
    if not _in_main_thread():
        yield
        return
    state = _state
    if state.depth == 0:
        installed = []
        try:
            for signum in _SIGNALS:
                original = signal.getsignal(signum)
                if original in (signal.SIG_IGN, None):
                    continue
                state.originals[signum] = original
                signal.signal(signum, _handler)
                installed.append(signum)
        except BaseException:
            _restore(installed)
            raise
    state.depth += 1
    terminated = None
    try:
        yield
    except Terminated as e:
        terminated = e
        raise
    finally:
        state.depth -= 1
        if state.depth == 0:
            state.critical += 1  # a signal while restoring waits in pending
            _restore(list(state.originals))
            pending, state.pending = state.pending, []
            state.critical = 0
            if terminated is not None:
                pending.insert(0, terminated.signum)
            for signum in dict.fromkeys(pending):
                signal.raise_signal(signum)  # its own action now: end, raise, or ignore


def _restore(signums: list[int]) -> None:
    for signum in signums:
        signal.signal(signum, _state.originals.pop(signum))


@contextlib.contextmanager
def critical() -> Iterator[None]:
    """Hold signals while the block runs; deliver them after it, in order."""
    state = _state
    if not _in_main_thread() or state.depth == 0:
        yield
        return
    state.critical += 1
    try:
        yield
    finally:
        state.critical -= 1
        if state.critical == 0 and state.pending:
            pending, state.pending = state.pending, []
            for signum in dict.fromkeys(pending):
                _handler(signum, None)
