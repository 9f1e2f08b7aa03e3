"""Peak memory from the kernel, not from tracemalloc.

tracemalloc only sees allocations made through Python's allocator; protobuf,
numpy and onnxruntime allocate in C and memory-mapped files never go through
it. The kernel's own counters see everything: ``VmHWM`` (peak resident set
size) can be reset to the current RSS by writing ``5`` to
``/proc/self/clear_refs``, so the peak of one operation is exact.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from dataclasses import dataclass

from .status import read_status
from .timeline import RssTimeline


def release_free_memory() -> None:
    """Collect garbage and hand freed heap memory back to the kernel (glibc ``malloc_trim``).

    Without it, memory freed by a previous run stays in the process and the
    next run reuses it: its peak growth then reads near zero. Best effort:
    does nothing where glibc is not the C library.
    """
    gc.collect()
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def reset_peak() -> bool:
    """Reset ``VmHWM`` to the current RSS; False when the kernel does not allow it."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


@dataclass
class PeakMemory:
    """Peak RSS growth of the code run inside ``with PeakMemory() as m:``.

    Freed memory is handed back to the kernel first
    (:func:`~benchmarks.harness.release_free_memory`), so successive measurements in one process
    do not hide behind memory a previous run left behind.

    Attributes:
        start: RSS before, in bytes.
        peak: the peak RSS during the block (the kernel's exact ``VmHWM`` when it
            can be reset, else the RSS sampled every millisecond on a thread).
        growth: ``peak - start``.
        exact: whether ``peak`` is the kernel's own.
        seconds: wall time of the block.
    """

    start: int = 0
    peak: int = 0
    exact: bool = False
    seconds: float = 0.0

    @property
    def growth(self) -> int:
        return max(0, self.peak - self.start)

    def __enter__(self) -> PeakMemory:
        release_free_memory()
        self.exact = reset_peak()
        self._timeline = None
        if not self.exact:
            self._timeline = RssTimeline(interval=0.001).__enter__()
        self.start = read_status().get("VmRSS", 0)
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        self.seconds = time.perf_counter() - self._t0
        if self.exact:
            self.peak = read_status().get("VmHWM", 0)
        else:
            self._timeline.__exit__(*exc)
            self.peak = max([self.start] + [s.rss for s in self._timeline.samples])


def measure_peak(fn: Callable[[], object]) -> tuple[object, PeakMemory]:
    """Run ``fn()`` and return ``(its result, PeakMemory)``."""
    with PeakMemory() as m:
        result = fn()
    return result, m
