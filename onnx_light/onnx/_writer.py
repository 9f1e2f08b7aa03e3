"""Write planned tensors into one weights file.

Bytes already in files (external tensors, spans of an ``.onnx``) are moved by
the copy engine, in the kernel; bytes held in memory (``raw_data``) are written
by ``num_threads`` writers at their planned offsets. At most
:data:`IN_FLIGHT_BYTES` of raw data are copied out of the model at once (or a
single tensor, when it is larger), so memory grows by at most the largest
tensor + 64 MiB.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from ._copy import CopyEngine, pwrite_all
from ._external import TensorRef
from ._files import FilePool
from ._layout import Layout
from ._tensors import TensorSite

IN_FLIGHT_BYTES = 64 * 1024 * 1024


@dataclass
class Item:
    """A tensor to place in the weights file.

    Attributes:
        site: the tensor and its path.
        size: its byte size.
        ref: where its bytes are when they are in a file; None when they are
            the tensor's ``raw_data``.
        entries: its former ``external_data`` (extra keys are carried over).
    """

    site: TensorSite
    size: int
    ref: TensorRef | None = None
    entries: dict[str, str] = field(default_factory=dict)

    @property
    def key(self):
        """The sharing key of the layout planner: the source span, if any."""
        return self.ref.span if self.ref is not None else None


def _write_raw(fd: int, item: Item, offset: int) -> int:
    data = item.site.tensor.raw_data
    if len(data) != item.size:
        raise ValueError(
            f"tensor {item.site.label}: raw_data holds {len(data)} bytes but "
            f"its dtype and dims need {item.size}"
        )
    pwrite_all(fd, data, offset)
    return len(data)


def _write_memory(fd: int, jobs: list[tuple[Item, int]], threads: int, done) -> None:
    if threads == 1 or len(jobs) < 2:
        for item, offset in jobs:
            done(_write_raw(fd, item, offset))
        return
    cond = threading.Condition()
    state = {"inflight": 0}

    def job(item: Item, offset: int) -> int:
        try:
            return _write_raw(fd, item, offset)
        finally:
            with cond:
                state["inflight"] -= item.size
                cond.notify_all()

    with ThreadPoolExecutor(threads) as ex:
        futures = []
        for item, offset in jobs:
            with cond:
                cond.wait_for(
                    lambda s=item.size: (
                        state["inflight"] == 0 or state["inflight"] + s <= IN_FLIGHT_BYTES
                    )
                )
                state["inflight"] += item.size
            futures.append(ex.submit(job, item, offset))
            while futures and futures[0].done():
                done(futures.pop(0).result())
        for fut in futures:
            done(fut.result())


def write_weights(
    fd: int,
    items: list[Item],
    layout: Layout,
    threads: int,
    chunk_size: int = 4 * 1024 * 1024,
    progress: Callable[[int, int], None] | None = None,
) -> int:
    """Write every item at its planned offset into the open file ``fd``.

    Items sharing an offset are written once; the gaps stay zero; the file is
    sized to ``layout.total``.

    Args:
        fd: the destination, open for writing.
        items: the tensors, in the order given to the planner.
        layout: the planner's answer for these items.
        threads: writers for in-memory tensors.
        chunk_size: bytes per copy system call.
        progress: optional ``progress(done_bytes, total_bytes)``.

    Returns:
        The size of the file.

    Raises:
        TruncatedFileError: a source file is shorter than planned (an OSError).
        OSError: disk full, I/O error.
    """
    unique = [(items[i], layout.offsets[i]) for i in layout.unique]
    total = sum(item.size for item, _ in unique)
    with CopyEngine(chunk_size, progress, total) as engine, FilePool() as pool:
        for item, offset in unique:
            ref = item.ref
            if ref is not None:
                what = f"tensor {item.site.label} in {ref.file!r}"
                engine.copy(pool.fd(ref.file), ref.offset, fd, offset, ref.length, what)
        memory = [(item, offset) for item, offset in unique if item.ref is None]
        _write_memory(fd, memory, threads, engine.advance)
    os.ftruncate(fd, layout.total)
    if progress is not None and total == 0:
        progress(0, 0)
    return layout.total
