"""Write planned tensors into one weights file.

Bytes already in files (external tensors, spans of an ``.onnx``) are moved by
the copy engine, in the kernel; bytes held in memory (``raw_data``) are written
by ``num_threads`` writers at their planned offsets. At most
:data:`IN_FLIGHT_BYTES` of raw data are copied out of the model at once (or a
single tensor, when it is larger), so memory grows by at most the largest
tensor + 64 MiB. Bytes that change dtype on the way are read, converted and
written in chunks (``_write/convert.py``); weights quantized on the way are
read in slabs and their parts written (``_write/quantize.py``).
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable

from .._errors import shown
from .._plan.layout import Layout
from .._plan.planner import Item
from .._read.sources import SourceFiles
from .._system.files import preallocate
from .._system.pool import Pool
from .convert import write_casts
from .copy import CopyEngine, pwrite_all
from .fs import CopyPolicy, copy_policy
from .quantize import QuantPart, write_quantized
from .runs import BATCH_BYTES, Run, Scratch, copy_batch, copy_run, groups, runs

__all__ = ["write_pieces", "write_weights"]


IN_FLIGHT_BYTES = 64 * 1024 * 1024
PREALLOCATE_BYTES = 1024 * 1024
# Above this, no preallocation: on ext4 a 1 GiB re-align is faster preallocated,
# a 4 GiB one runs either faster or 3x slower (make bench, the align4 rows), and
# 1.1x steadily without it.
PREALLOCATE_MAX = 2 * 1024**3
CAST_THREADS = min(4, os.cpu_count() or 1)  # the cast is CPU-bound: one per core, up to 4


def _write_raw(fd: int, item: Item, offset: int) -> int:
    data = item.data if item.data is not None else item.site.tensor.raw_data
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
    with Pool(threads) as pool:
        pending: deque = deque()  # (job, its bytes), oldest first
        inflight = 0
        for item, offset in jobs:
            while pending and inflight + item.size > IN_FLIGHT_BYTES:
                job, size = pending.popleft()
                done(job.result())
                inflight -= size
            pending.append((pool.submit(_write_raw, fd, item, offset), item.size))
            inflight += item.size
        for job, _ in pending:
            done(job.result())


def _preallocate(fd: int, total: int, all_runs: list[Run], memory, policy: CopyPolicy) -> None:
    """Reserve the ranges that will be written for real (see :mod:`_write.fs`).

    Where blocks can be shared, the ranges of congruent runs are left out:
    the copy shares their blocks instead of filling reserved ones.
    """
    if not PREALLOCATE_BYTES <= total <= PREALLOCATE_MAX or not policy.preallocate:
        return
    if not policy.shares_blocks:
        preallocate(fd, 0, total)
        return
    ranges = [(r.dst, r.length) for r in all_runs if not policy.congruent(r.src, r.dst)]
    ranges += [(offset, item.size) for item, offset in memory]
    ranges.sort()
    merged: list[list[int]] = []
    for start, length in ranges:
        if merged and start - (merged[-1][0] + merged[-1][1]) < PREALLOCATE_BYTES:
            merged[-1][1] = max(merged[-1][1], start + length - merged[-1][0])
        else:
            merged.append([start, length])
    for start, length in merged:
        preallocate(fd, start, length)


def write_weights(
    fd: int,
    items: list[Item],
    layout: Layout,
    files: SourceFiles,
    threads: int,
    chunk_size: int = 4 * 1024 * 1024,
    progress: Callable[[int, int], None] | None = None,
    drop_behind: bool = False,
) -> int:
    """Write every item at its planned offset into the open file ``fd``.

    Items sharing an offset are written once; the gaps stay zero; the file is
    sized to ``layout.total``.

    Args:
        fd: the destination, open for writing.
        items: the tensors, in the order given to the planner.
        layout: the planner's answer for these items.
        files: the call's source files, read through their open descriptors.
        threads: writers for in-memory tensors.
        chunk_size: bytes per copy system call.
        progress: optional ``progress(done_bytes, total_bytes)``.
        drop_behind: drop the copied ranges from the page cache as they are
            copied (see :class:`~onnx_light.onnx._write.copy.CopyEngine`).

    Returns:
        The size of the file.

    Raises:
        TruncatedFileError: a source file is shorter than planned (an OSError).
        OSError: disk full, I/O error.
    """
    unique = [(items[i], layout.offsets[i]) for i in layout.unique]
    total = sum(item.size for item, _ in unique)
    casts = [(i, item, offset) for i, (item, offset) in enumerate(unique) if item.cast is not None]
    if casts:
        unique = [(item, offset) for item, offset in unique if item.cast is None]
    file_runs = runs(unique)
    memory = [(item, offset) for item, offset in unique if item.ref is None]
    policy = copy_policy(fd)
    _preallocate(fd, layout.total, file_runs, memory + [c[1:] for c in casts], policy)
    scratch = None
    with CopyEngine(chunk_size, progress, total, policy, drop_behind) as engine:
        for group in groups(file_runs, policy, chunk_size):
            with files.lease(group[0].source) as src:
                if len(group) == 1:
                    copy_run(engine, src, fd, group[0])
                    continue
                if scratch is None:
                    scratch = Scratch(min(BATCH_BYTES, chunk_size))
                copy_batch(engine, src, fd, group, scratch)
        _write_memory(fd, memory, threads, engine.advance)
        quantized = [job for job in casts if isinstance(job[1].cast.conversion, QuantPart)]
        if quantized:  # read once per weight, whatever its parts (_write/quantize.py)
            casts = [job for job in casts if not isinstance(job[1].cast.conversion, QuantPart)]
            write_quantized(fd, quantized, files, engine.advance)
        write_casts(fd, casts, files, engine.advance, CAST_THREADS)
    _set_size(fd, layout.total)
    if progress is not None and total == 0:
        progress(0, 0)
    return layout.total


def write_pieces(
    fd: int, pieces: list, files: SourceFiles, chunk_size: int = 4 * 1024 * 1024
) -> int:
    """Write serialized pieces (bytes, and spans of source files) one after the other.

    Spans are copied file to file by the copy engine, so a model whose inline
    weights stay inline is written without reading them into memory.

    Args:
        fd: the destination, open for writing.
        pieces: from :func:`~onnx_light.onnx._plan.serialize.serialize_pieces`.
        files: the call's source files.
        chunk_size: bytes per copy system call.

    Returns:
        The number of bytes written.

    Raises:
        TruncatedFileError: a source ended early (an OSError).
        OSError: disk full, I/O error.
    """
    position = 0
    with CopyEngine(chunk_size, policy=copy_policy(fd)) as engine:
        for piece in pieces:
            if isinstance(piece, bytes):
                pwrite_all(fd, piece, position)
                position += len(piece)
                continue
            ref = piece.ref
            with files.lease(ref.source) as src:
                what = f"tensor {ref.site.label} in {shown(ref.file)}"
                engine.copy(src, ref.offset, fd, position, ref.length, what)
            position += ref.length
    _set_size(fd, position)
    return position


def _set_size(fd: int, size: int) -> None:
    """Give the file its final size, only when it does not have it yet: XFS flushes
    a truncated file when it is closed, so even a truncate to the same size would
    make the close wait for the writeback of everything just copied."""
    current = os.fstat(fd).st_size
    if current == size:
        return
    try:
        os.ftruncate(fd, size)
    except PermissionError:  # fusefat cannot grow a file this way: write its last byte
        if size < current:
            raise
        pwrite_all(fd, b"\0", size - 1)
