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

__all__ = ["critical", "guarded"]


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
        self.terminated: int | None = None  # a terminating signal already acted on
        self.originals: dict[int, object] = {}


_state = _State()


def _handler(signum: int, frame) -> None:
    state = _state
    if state.critical:
        state.pending.append(signum)
        return
    original = state.originals.get(signum)
    if callable(original):
        original(signum, frame)  # e.g. KeyboardInterrupt
        return
    state.terminated = signum  # raised again once the files are cleaned up
    raise Terminated(signum)


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _ordered(pending: list[int]) -> list[int]:
    """Each signal once, those that end the process first: a Ctrl-C never hides a SIGTERM."""
    return sorted(dict.fromkeys(pending), key=lambda signum: signum == signal.SIGINT)


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
        try:
            for signum in _SIGNALS:
                original = signal.getsignal(signum)
                if original in (signal.SIG_IGN, None):
                    continue
                state.originals[signum] = original
                signal.signal(signum, _handler)
        except BaseException:
            _restore()
            raise
    state.depth += 1
    try:
        yield
    finally:
        state.depth -= 1
        if state.depth == 0:
            _leave()


def _leave() -> None:
    """Put the callers' handlers back, then let the signals that waited act."""
    state = _state
    state.critical += 1  # a signal while restoring waits in pending
    interrupted = _restore()
    pending, state.pending = state.pending, []
    terminated, state.terminated = state.terminated, None
    state.critical = 0
    if terminated is not None:
        pending.insert(0, terminated)
    for signum in _ordered(pending):
        signal.raise_signal(signum)  # its own action now: end, raise, or ignore
    if terminated is not None:  # its action did not end the process
        raise Terminated(terminated)
    if interrupted is not None:
        raise interrupted


def _restore() -> BaseException | None:
    """Give every signal its caller's handler back, whatever arrives meanwhile.

    A signal whose own handler is back already may raise inside a later
    ``signal.signal`` call: a handler not yet back is set again, and the
    first such exception is returned, to be raised after.
    """
    state = _state
    interrupted = None
    for signum, original in list(state.originals.items()):
        while signal.getsignal(signum) is not original:
            try:
                signal.signal(signum, original)
            except BaseException as e:  # raised again by the caller
                interrupted = interrupted or e
        del state.originals[signum]
    return interrupted


class critical:  # noqa: N801 (named as the function it stands for)
    """Hold signals while the block runs; deliver them after it.

    When the block ends with an exception, they wait for the end of
    :func:`guarded` (the clean-up under way is not cut short).
    """

    def __enter__(self) -> None:
        self.active = _in_main_thread() and _state.depth > 0
        if self.active:
            _state.critical += 1

    def __exit__(self, exc_type, exc, tb) -> None:
        if not self.active:
            return
        state = _state
        state.critical -= 1
        if state.critical or exc_type is not None:
            return
        while state.pending:  # one at a time: the others wait if it raises
            first, *rest = _ordered(state.pending)
            state.pending = rest
            _handler(first, None)
