"""Wall time of a call, the best of several runs."""

from __future__ import annotations

import os
import time
from collections.abc import Callable


def default_repeat() -> int:
    """Timed calls per measure: 3, or 1 in a quick run (``UNITTEST_GOING=1``)."""
    return 1 if os.environ.get("UNITTEST_GOING", "0") == "1" else 3


def best_time(
    fn: Callable[[], object], setup: Callable[[], object] | None = None, repeat: int | None = None
) -> float:
    """Best wall time of ``repeat`` calls of ``fn()``, after one warm-up call.

    The best time is the cost of the code; slower runs measure the neighbours
    (other processes, the page cache, the allocator).

    Args:
        fn: the call to time.
        setup: runs before each call, outside the timing (e.g. empty a folder).
        repeat: timed calls (>= 1; None: :func:`~onnx_light.bench.default_repeat`).

    Returns:
        The smallest time in seconds.
    """
    times = []
    for _ in range((repeat or default_repeat()) + 1):
        if setup is not None:
            setup()
        begin = time.perf_counter()
        fn()
        times.append(time.perf_counter() - begin)
    return min(times[1:])
