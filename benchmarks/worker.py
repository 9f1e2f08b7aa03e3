"""Measure ONE operation in this fresh process and print one JSON line.

Usage: ``python benchmarks/worker.py OP WORKDIR SIZE [--timeline] [--flush] [--canary PATH]``

Everything is imported first (onnx, onnx-light, onnx-ir, onnxruntime), then
the operation runs once on the ``tiny`` model (lazy imports, first-call
set-up), then its unmeasured set-up runs, then the operation itself, inside
:class:`~benchmarks.harness.PeakMemory` (the kernel's ``VmHWM``, reset through
``/proc/self/clear_refs``) and, with ``--timeline``, an
:class:`~benchmarks.harness.RssTimeline` sampling ``RssAnon`` and ``RssFile``
every millisecond (for memory-mapped files, whose pages are file-backed).

Printed fields: ``seconds`` (wall), ``cpu`` (user + system seconds of the
process, every thread), ``user`` (its user seconds), ``peak`` (peak RSS growth,
bytes), ``exact`` (whether ``peak`` is the kernel's), ``anon`` / ``file``
(sampled peak growth of RssAnon / RssFile, bytes; null without
``--timeline``), ``samples``, ``bytes`` (sizes of the files written, or what
the operation says it handled: ``Case.nbytes``),
``tensors`` and ``onnx_bytes`` (how many tensors the operation handles and the
size of the ``.onnx`` files it reads: null but on the many-tensor sources).
With ``--flush``, the outputs are then written to the disk
(``fsync`` each): ``to_disk`` is ``seconds`` plus that time. With ``--canary
PATH``, ``canary`` is how many bytes of ``PATH`` left the page cache during
the operation (``fincore`` before and after), ``canary_left`` what stayed.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import resource
import shutil
import sys
import tempfile
import time

from cgroup import resident
from ops import OPS
from sources import Paths

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the checkout

from benchmarks.harness import PeakMemory, RssTimeline  # noqa: E402


def _flush(paths: list[str]) -> float:
    """``fsync`` each existing file; the seconds it took."""
    t0 = time.perf_counter()
    for path in paths:
        if os.path.exists(path):
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    return time.perf_counter() - t0


def _run_once(
    op: str, paths: Paths, timeline: bool, flush: bool = False, canary: str | None = None
) -> dict:
    out = tempfile.mkdtemp(prefix=f"{op}-", dir=paths.out)
    case = OPS[op](paths, out)
    try:
        gc.collect()
        before = resident(canary) if canary else None
        tl_ctx = RssTimeline(interval=0.001) if timeline else contextlib.nullcontext()
        with PeakMemory() as pm, tl_ctx as tl:
            cpu0 = resource.getrusage(resource.RUSAGE_SELF)  # every thread, to the microsecond
            result = case.run()
            cpu1 = resource.getrusage(resource.RUSAGE_SELF)
        after = resident(canary) if canary else None
        flushed = _flush(case.outputs) if flush else None
        written = sum(os.path.getsize(f) for f in case.outputs if os.path.exists(f))
        if case.nbytes is not None:
            written = case.nbytes
        del result
        return {
            "seconds": pm.seconds,
            "cpu": (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime),
            "user": cpu1.ru_utime - cpu0.ru_utime,
            "peak": pm.growth,
            "exact": pm.exact,
            "anon": tl.growth_of("anon") if timeline else None,
            "file": tl.growth_of("file") if timeline else None,
            "samples": len(tl.samples) if timeline else 0,
            "bytes": written,
            "to_disk": pm.seconds + flushed if flushed is not None else None,
            "canary": before - after if before is not None and after is not None else None,
            "canary_left": after,
            "tensors": case.tensors,
            "onnx_bytes": case.onnx_bytes,
        }
    finally:
        if case.cleanup is not None:
            case.cleanup()
        shutil.rmtree(out, ignore_errors=True)


def main(argv: list[str]) -> int:
    op, workdir, size = argv[:3]
    timeline = "--timeline" in argv[3:]
    flush = "--flush" in argv[3:]
    canary = argv[argv.index("--canary") + 1] if "--canary" in argv[3:] else None
    if op not in OPS:
        print(f"unknown operation {op!r}; known: {', '.join(OPS)}", file=sys.stderr)
        return 2
    _run_once(op, Paths(workdir, "tiny"), timeline)  # warm-up, not reported
    record = {"op": op, "size": size, "pid": os.getpid(), "time": time.time()}
    record.update(_run_once(op, Paths(workdir, size), timeline, flush, canary))
    print(json.dumps(record), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
