"""Bytes converted to another dtype while they stream into a weights file.

Each tensor whose bytes change dtype (:class:`~onnx_light.onnx._plan.cast.Cast`)
is read in chunks of whole values, converted with numpy and written at its
planned offset: memory holds a few chunks, whatever the model's size. Chunks are
converted on a small pool of threads (numpy's casts and comparisons release the
GIL), each thread reading, converting and writing its own chunk with positional
I/O, so the cores share the cast, which is the bottleneck.

The conversions are numpy's casts: round to nearest even, NaN stays NaN (its
sign kept), infinities stay infinite. float32 -> bfloat16 is done on the bits
(numpy has no bfloat16), the same rounding. A conversion that clips first
(onnxruntime's float16 converter's rule) counts the values it changed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .._errors import TruncatedFileError, shown
from .._plan.cast import BFLOAT16, DOUBLE, FLOAT, FLOAT16, ITEMSIZE, Conversion
from .._plan.planner import Item
from .._read.sources import SourceFiles
from .._system.files import read_upto
from .clip import clip_to_float16
from .copy import pwrite_all

__all__ = ["CAST_CHUNK", "convert", "write_casts"]

CAST_CHUNK = 8 * 1024 * 1024  # source bytes per chunk (a multiple of every value size)
_NUMPY = {FLOAT: np.float32, FLOAT16: np.float16, DOUBLE: np.float64}


def _to_bfloat16(values: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits (uint16): round to nearest even, NaN kept quiet."""
    bits = values.view(np.uint32)
    rounded = ((bits + (((bits >> 16) & 1) + np.uint32(0x7FFF))) >> 16).astype(np.uint16)
    nan = np.isnan(values)
    if nan.any():
        rounded[nan] = ((bits[nan] >> 16) | 0x40).astype(np.uint16)
    return rounded


def convert(data: memoryview | bytes, conversion: Conversion) -> tuple[np.ndarray, int]:
    """Convert little-endian values of ``conversion.src`` to ``conversion.dst``.

    Args:
        data: whole values (a multiple of the source value size); not modified.
        conversion: the source and target dtypes, and the clipping.

    Returns:
        ``(the converted values, the number of values clipped)``.
    """
    src, dst = conversion.src, conversion.dst
    if src == BFLOAT16:  # bfloat16 -> float32: the bits, shifted (exact)
        bits = np.frombuffer(data, dtype="<u2").astype(np.uint32) << 16
        return bits.view(np.float32), 0
    values = np.frombuffer(data, dtype=np.dtype(_NUMPY[src]).newbyteorder("<"))
    if conversion.clips:  # float32 -> float16, as onnxruntime's converter
        return clip_to_float16(values, conversion.min_positive, conversion.max_finite)
    if dst == BFLOAT16:
        return _to_bfloat16(values), 0
    with np.errstate(over="ignore"):  # beyond the target's range: infinite, as cast
        return values.astype(_NUMPY[dst]), 0


def write_casts(
    fd: int,
    jobs: list[tuple[Item, int]],
    files: SourceFiles,
    advance: Callable[[int], None],
    threads: int = 2,
) -> None:
    """Read, convert and write every cast tensor of ``jobs`` at its offset in ``fd``.

    Args:
        fd: the destination weights file, open for writing.
        jobs: ``(item, destination offset)`` of the tensors whose ``cast`` is set.
        files: the call's source files (each read through its open descriptor).
        advance: called with the bytes written after each chunk (progress).
        threads: chunks converted at once.

    Raises:
        TruncatedFileError: a source ended before a tensor's last byte.
        OSError: disk full, I/O error.
    """
    chunks = [c for item, offset in jobs for c in _chunks(item, offset)]
    if not chunks:
        return
    local = threading.local()
    lock = threading.Lock()

    def run(chunk) -> None:
        item, src_off, length, dst_off = chunk
        ref, cast = item.ref, item.cast
        buf = getattr(local, "buf", None)
        if buf is None or len(buf) < length:
            buf = local.buf = bytearray(max(length, CAST_CHUNK))
        view = memoryview(buf)[:length]
        with files.lease(ref.source) as src:
            if read_upto(src, view, src_off) != length:
                raise TruncatedFileError(
                    f"tensor {item.site.label} in {shown(ref.file)}: the file ends before "
                    f"byte {src_off + length} (truncated while reading?)"
                )
        out, clipped = convert(view, cast.conversion)
        pwrite_all(fd, memoryview(out).cast("B"), dst_off)
        with lock:  # progress is told from one thread at a time
            cast.clipped += clipped
            advance(out.nbytes)

    if threads <= 1 or len(chunks) == 1:
        for chunk in chunks:
            run(chunk)
        return
    pool = ThreadPoolExecutor(threads)
    try:
        for future in [pool.submit(run, c) for c in chunks]:
            future.result()
    finally:
        pool.shutdown(cancel_futures=True)  # after a failure, the chunks not started


def _chunks(item: Item, offset: int):
    """``(item, source offset, source length, destination offset)`` per chunk."""
    ref, conversion = item.ref, item.cast.conversion
    step = CAST_CHUNK - CAST_CHUNK % ITEMSIZE[conversion.src]
    for start in range(0, ref.length, step):
        length = min(step, ref.length - start)
        yield item, ref.offset + start, length, offset + conversion.length(start)
