"""Wall time of a call, the best of several runs."""

from __future__ import annotations

import time
from collections.abc import Callable


def best_time(
    fn: Callable[[], object], setup: Callable[[], object] | None = None, repeat: int = 3
) -> float:
    """Best wall time of ``repeat`` calls of ``fn()``, after one warm-up call.

    The best time is the cost of the code; slower runs measure the neighbours
    (other processes, the page cache, the allocator).

    Args:
        fn: the call to time.
        setup: runs before each call, outside the timing (e.g. empty a folder).
        repeat: timed calls (>= 1).

    Returns:
        The smallest time in seconds.
    """
    times = []
    for _ in range(repeat + 1):
        if setup is not None:
            setup()
        begin = time.perf_counter()
        fn()
        times.append(time.perf_counter() - begin)
    return min(times[1:])
