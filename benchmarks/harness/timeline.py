"""RSS over time, sampled on a background thread."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from .status import read_status


@dataclass(frozen=True)
class Sample:
    """One reading: seconds since the start, and memory in bytes."""

    t: float
    rss: int
    anon: int
    file: int


class RssTimeline:
    """Sample ``VmRSS``, ``RssAnon`` and ``RssFile`` every ``interval`` seconds.

    Use as a context manager; the samples are in its ``samples`` list::

        with RssTimeline(interval=0.005) as tl:
            work()
        peak = tl.peak()

    Args:
        interval: seconds between two samples.
    """

    def __init__(self, interval: float = 0.005) -> None:
        self.interval = interval
        self.samples: list[Sample] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _sample(self) -> None:
        s = read_status()
        self.samples.append(
            Sample(
                time.perf_counter() - self._t0,
                s.get("VmRSS", 0),
                s.get("RssAnon", 0),
                s.get("RssFile", 0),
            )
        )

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def __enter__(self) -> RssTimeline:
        self._t0 = time.perf_counter()
        self._sample()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._sample()

    def peak(self, field: str = "rss") -> int:
        """The largest sampled value of ``rss``, ``anon`` or ``file``."""
        return max((getattr(s, field) for s in self.samples), default=0)

    @property
    def growth(self) -> int:
        """Peak RSS minus the first sample, in bytes, as ``PeakMemory.growth``."""
        return self.growth_of("rss")

    def growth_of(self, field: str) -> int:
        """Peak minus the first sample of ``rss``, ``anon`` or ``file``."""
        if not self.samples:
            return 0
        return max(0, self.peak(field) - getattr(self.samples[0], field))
