"""One measuring method for the gallery and ``make bench``: fresh processes, interleaved rounds.

On a shared machine one run can be 2x off, and a run measured in the process
that ran the previous one inherits its allocator, its caches and its page
faults. So every measurement here is made

- in a **process of its own**: a child forked from the caller, so it starts
  from the caller's state and nothing an earlier run allocated (a save that
  changes its model changes the child's copy only);
- in **interleaved rounds**: every operation once per round, in a new seeded
  order each round (the first in the given order), so a slow minute of the
  machine hits every operation, not one;
- with the **page cache warm** (the given files read just before) unless the
  caller evicts them (only those files: :func:`~benchmarks.harness.evict`), and
  with **earlier writes flushed** (``sync``) so their write-back does not land
  in the next run.

Nothing on the machine is changed to steady it: no kernel setting, no memory
touched beforehand, no cache dropped but the measured files'. What noise is
left shows in the spread over the rounds, which a ranking has to clear.

Each run reports its wall time and its peak RSS growth from the kernel
(:class:`~benchmarks.harness.PeakMemory`); the spread over the rounds is kept,
and :meth:`~benchmarks.harness.Rounds.compare` compares two operations: a page
states the gallery report's verdict (measured once, with more rounds) and
where this measure's rounds fall against it (``benchmarks.harness.compare``).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import statistics
import sys
import traceback
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from .compare import MIN_ROUNDS, Comparison, compare
from .memory import PeakMemory
from .sizes import quick_run
from .timeline import RssTimeline, Sample

MiB = 2**20
ROUNDS_ENV = "ONNX_LIGHT_GALLERY_ROUNDS"  # the gallery report's rounds, while it is measured


def default_rounds() -> int:
    """Rounds per measure: 5, or 1 in a quick run (``UNITTEST_GOING=1``).

    Five rounds give a spread a build's ratio can be checked against the
    gallery report with (a ranking needs at least 3 rounds of each, see
    :func:`~benchmarks.harness.compare`). While the report is measured
    (``ONNX_LIGHT_GALLERY_ROUNDS``, set by ``make gallery-report``), its
    rounds instead.
    """
    if os.environ.get(ROUNDS_ENV):
        return int(os.environ[ROUNDS_ENV])
    return 1 if quick_run() else 5


def warm(paths: Iterable[str], chunk: int = 8 * MiB) -> int:
    """Read every file once so it sits in the page cache; return the bytes read."""
    buf = bytearray(chunk)
    total = 0
    for path in paths:
        with open(path, "rb", buffering=0) as f:
            while n := f.readinto(buf):
                total += n
    return total


@dataclass(frozen=True)
class Run:
    """One measured call.

    Attributes:
        name: the operation.
        round: its round, from 0.
        seconds: wall time.
        peak: peak RSS growth in bytes, from the kernel.
        samples: RSS over time (``timeline=True`` only, else empty).
        value: what the call returned, when JSON can carry it (a dict of
            numbers measured inside the call, for example), else None.
    """

    name: str
    round: int
    seconds: float
    peak: int
    samples: tuple[Sample, ...] = field(default=(), repr=False)
    value: object = field(default=None, repr=False)


@dataclass(frozen=True)
class Rounds:
    """Every run of a measure, and what may be said of them.

    Attributes:
        runs: the runs in the order they were made.
    """

    runs: tuple[Run, ...]

    @property
    def names(self) -> list[str]:
        """The operations, in the order they were given."""
        return list(dict.fromkeys(r.name for r in sorted(self.runs, key=lambda r: r.round)))

    def seconds(self, name: str) -> list[float]:
        """Wall times of ``name``, one per round."""
        return [r.seconds for r in self.runs if r.name == name]

    def peaks(self, name: str, scale: float = MiB) -> list[float]:
        """Peak RSS growths of ``name``, one per round, in units of ``scale`` bytes."""
        return [r.peak / scale for r in self.runs if r.name == name]

    def values(self, name: str) -> list:
        """What the calls of ``name`` returned, one per round (see ``Run.value``)."""
        return [r.value for r in self.runs if r.name == name]

    def samples(self, name: str) -> tuple[Sample, ...]:
        """The RSS timeline of ``name``'s last round (empty without ``timeline=True``)."""
        runs = [r for r in self.runs if r.name == name]
        return runs[-1].samples if runs else ()

    def summary(self) -> list[dict]:
        """One row per operation: rounds, median and min-max of seconds and of peak MiB."""
        rows = []
        for name in self.names:
            secs, peaks = self.seconds(name), self.peaks(name)
            rows.append(
                {
                    "operation": name,
                    "rounds": len(secs),
                    "seconds (median)": statistics.median(secs),
                    "seconds (min-max)": f"{min(secs):.3g}-{max(secs):.3g}",
                    "peak MiB (median)": statistics.median(peaks),
                    "peak MiB (min-max)": f"{min(peaks):.3g}-{max(peaks):.3g}",
                }
            )
        return rows

    def compare(self, a: str, b: str, what: str = "seconds", context: str = "") -> Comparison:
        """``a`` against ``b`` on ``what`` ("seconds" or "peak", in MiB).

        Its :meth:`~benchmarks.harness.Comparison.sentence` states the gallery
        report's verdict and where these rounds fall against it (``context``: see
        :func:`~benchmarks.harness.compare`).
        """
        if what == "seconds":
            return compare(a, self.seconds(a), b, self.seconds(b), "s", context)
        if what == "peak":
            return compare(a, self.peaks(a), b, self.peaks(b), "MiB", context)
        raise ValueError(f"what must be 'seconds' or 'peak', not {what!r}")


def _child(fn: Callable[[], object], timeline: bool, out: int) -> None:
    """In the forked child: measure ``fn()``, write one JSON line to ``out``, exit."""
    code = 0
    try:
        tl = RssTimeline(interval=0.002) if timeline else contextlib.nullcontext()
        with PeakMemory() as pm, tl as samples:
            value = fn()
        record = {"seconds": pm.seconds, "peak": pm.growth}
        if timeline:
            record["samples"] = [[s.t, s.rss, s.anon, s.file] for s in samples.samples]
        try:
            json.dumps(value)
            record["value"] = value
        except (TypeError, ValueError):  # not for JSON (a model, a session...): not kept
            pass
    except BaseException:  # noqa: BLE001 - reported to the parent, whatever it was
        record, code = {"error": traceback.format_exc()}, 1
    try:
        data = json.dumps(record).encode()
        while data:
            data = data[os.write(out, data) :]
    finally:
        os._exit(code)


def _fork_run(name: str, fn: Callable[[], object], timeline: bool) -> dict:
    sys.stdout.flush()
    sys.stderr.flush()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child never returns
        os.close(read_end)
        _child(fn, timeline, write_end)
    os.close(write_end)
    chunks = []
    with os.fdopen(read_end, "rb") as f:
        while chunk := f.read(1 << 16):
            chunks.append(chunk)
    _, status = os.waitpid(pid, 0)
    try:
        record = json.loads(b"".join(chunks) or b"{}")
    except ValueError:
        record = {}
    if os.waitstatus_to_exitcode(status) != 0 or "seconds" not in record:
        detail = record.get("error") or f"exit status {os.waitstatus_to_exitcode(status)}"
        raise RuntimeError(f"measuring {name!r} failed in its process:\n{detail}")
    return record


def measure_rounds(
    cases: Mapping[str, Callable[[], object]],
    *,
    rounds: int | None = None,
    warm_files: Iterable[str] = (),
    before: Callable[[str], object] | None = None,
    timeline: bool = False,
    seed: int = 0,
) -> Rounds:
    """Measure every case in a process of its own, in interleaved rounds.

    Before each run, in this process and not measured: ``warm_files`` are read
    (the page cache warm), ``before(name)`` runs (e.g. empty the case's
    destination, or evict files for a cold read) and ``sync`` flushes earlier
    writes.

    Args:
        cases: name -> a call without arguments; it runs in a forked child,
            and what it returns is kept when JSON can carry it.
        rounds: rounds (None: :func:`default_rounds`). While the gallery report
            is measured (``ONNX_LIGHT_GALLERY_ROUNDS``), a measure of at least
            3 rounds, one a page compares, is measured in the report's rounds;
            fewer (a timeline, a profile) stay as asked.
        warm_files: files to have in the page cache before each run.
        before: called with the case's name before each of its runs.
        timeline: also sample RSS every 2 ms (:meth:`Rounds.samples`).
        seed: the seed of the rounds' orders.

    Returns:
        A :class:`Rounds`.

    Raises:
        RuntimeError: a case raised in its process (its traceback in the message).
        ValueError: no case, or ``rounds`` < 1.
    """
    if not cases:
        raise ValueError("measure_rounds needs at least one case")
    if rounds is None or (os.environ.get(ROUNDS_ENV) and rounds >= MIN_ROUNDS):
        rounds = default_rounds()
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, not {rounds}")
    warm_files = list(warm_files)
    runs = []
    for r in range(rounds):
        order = list(cases)
        if r:
            random.Random(seed * 1000 + r).shuffle(order)
        for name in order:
            warm(warm_files)
            if before is not None:
                before(name)
            os.sync()
            rec = _fork_run(name, cases[name], timeline)
            samples = tuple(Sample(*s) for s in rec.get("samples", ()))
            runs.append(Run(name, r, rec["seconds"], rec["peak"], samples, rec.get("value")))
    return Rounds(tuple(runs))
