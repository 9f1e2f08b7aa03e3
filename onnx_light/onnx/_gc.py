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
from collections.abc import Iterator


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """Disable the cyclic garbage collector inside the block, if it was enabled."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
