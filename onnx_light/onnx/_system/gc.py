"""The cyclic garbage collector, paused while a call builds objects per tensor.

A model of 200,000 tensors makes about a million small objects (sites,
references, entries, runs). Each allocation burst triggers a collection
that walks every live object: a quarter of a re-align's time went there.
The objects of a call hold no reference cycles that need collecting before
it returns, so the collector is paused for the call and put back as it was.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

__all__ = ["paused_gc"]


_lock = threading.Lock()
_state = {"depth": 0, "was_enabled": False}


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """Disable the cyclic garbage collector inside the block.

    Calls may overlap (threads): the first to enter remembers whether the
    collector was on and turns it off, the last to leave puts it back.
    """
    with _lock:
        if _state["depth"] == 0:
            _state["was_enabled"] = gc.isenabled()
            gc.disable()
        _state["depth"] += 1
    try:
        yield
    finally:
        with _lock:
            _state["depth"] -= 1
            if _state["depth"] == 0 and _state["was_enabled"]:
                gc.enable()
