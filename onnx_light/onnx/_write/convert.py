"""Bytes converted to another dtype while they stream into a weights file.

Each tensor whose bytes change dtype (a ``Cast``, found by ``_plan/cast.py``)
is read in chunks of whole values, converted with numpy and written at its
planned offset: memory holds a few chunks, whatever the model's size. Chunks are
converted on a small pool of threads (numpy's casts and comparisons release the
GIL), each thread reading, converting and writing its own chunk with positional
I/O, so the cores share the cast, which is the bottleneck.

The conversions are numpy's casts: round to nearest even, NaN stays NaN (its
sign kept), infinities stay infinite. float32 -> bfloat16 is done on the bits
(numpy has no bfloat16), the same rounding; float16 and bfloat16 go through
float32, which holds either exactly. A conversion that clips first
(onnxruntime's float16 converter's rule) counts the values it changed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np

from .._dtypes import BFLOAT16, DOUBLE, FLOAT, FLOAT16, ITEMSIZE, Conversion
from .._errors import TruncatedFileError, shown
from .._plan.planner import Item
from .._read.external import TensorRef
from .._read.sources import SourceFiles
from .._system.files import read_upto, read_whole
from .._system.pool import Pool
from .clip import clip_to_float16
from .copy import pwrite_all

__all__ = ["CAST_CHUNK", "convert", "converted_bytes", "write_casts"]

CAST_CHUNK = 8 * 1024 * 1024  # source bytes per chunk (a multiple of every value size)
SMALL = 64 * 1024  # tensors of at most this many bytes may be batched
BATCH = 4 * 1024 * 1024  # the most a batch reads, and the most it writes
_NUMPY = {FLOAT: np.float32, FLOAT16: np.float16, DOUBLE: np.float64}


def _to_bfloat16(values: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits (uint16): round to nearest even, NaN kept quiet."""
    bits = values.view(np.uint32)
    rounded = ((bits + (((bits >> 16) & 1) + np.uint32(0x7FFF))) >> 16).astype(np.uint16)
    nan = np.isnan(values)
    if nan.any():
        rounded[nan] = ((bits[nan] >> 16) | 0x40).astype(np.uint16)
    return rounded


def convert(
    data: memoryview | bytes, conversion: Conversion, out: np.ndarray | None = None
) -> tuple[np.ndarray, int]:
    """Convert little-endian values of ``conversion.src`` to ``conversion.dst``.

    bfloat16 is widened to float32 (exact) and float16 -> bfloat16 goes
    through float32 (exact), so each conversion rounds once.

    Args:
        data: whole values (a multiple of the source value size); not modified.
        conversion: the source and target dtypes, and the clipping.
        out: for a clipping conversion, a float16 array of at least as many
            values to write into (a writer's buffer, reused chunk after chunk);
            ignored by the others.

    Returns:
        ``(the converted values, the number of values clipped)``: with ``out``,
        a view of its first values.
    """
    src, dst = conversion.src, conversion.dst
    if src == BFLOAT16:  # bfloat16 -> float32: the bits, shifted (exact)
        bits = np.frombuffer(data, dtype="<u2").astype(np.uint32) << 16
        values = bits.view(np.float32)
    else:
        values = np.frombuffer(data, dtype=np.dtype(_NUMPY[src]).newbyteorder("<"))
    if conversion.clips:  # float32 -> float16, as onnxruntime's converter
        if out is not None:
            out = out[: values.size]
        return clip_to_float16(values, conversion.min_positive, conversion.max_finite, out=out)
    if dst == BFLOAT16:
        return _to_bfloat16(values.astype(np.float32, copy=False)), 0
    if values.dtype == _NUMPY[dst]:
        return values, 0  # bfloat16 -> float32
    with np.errstate(over="ignore"):  # beyond the target's range: infinite, as cast
        return values.astype(_NUMPY[dst]), 0


def converted_bytes(ref: TensorRef, files: SourceFiles) -> bytes:
    """The bytes of ``ref`` converted by its cast, read whole into memory: a tensor
    that stays inline in the ``.onnx`` (a sparse tensor's values), which protobuf's
    2 GiB limit keeps small. The values the clipping changed are counted.

    Raises:
        TruncatedFileError: its file ended before its last byte.
    """
    what = f"tensor {ref.site.label} in {shown(ref.file)}"
    with files.lease(ref.source) as src:
        data = read_whole(src, ref.length, what, ref.offset)
    out, clipped = convert(data, ref.cast.conversion)
    ref.cast.clipped += clipped
    return memoryview(out).cast("B").tobytes()


def write_casts(
    fd: int,
    jobs: list[tuple[int, Item, int]],
    files: SourceFiles,
    advance: Callable[[int], None],
    threads: int = 2,
) -> None:
    """Read, convert and write every cast tensor of ``jobs`` at its offset in ``fd``.

    A large tensor is cut into chunks of :data:`CAST_CHUNK` source bytes; small
    tensors that follow on in the source and sit next to each other in the
    layout are batched (one read, one conversion, one write of their span, as
    the copy engine batches small runs), so 200,000 tiny tensors cost a few
    hundred system calls. Chunks and batches are converted ``threads`` at once.

    Args:
        fd: the destination weights file, open for writing.
        jobs: ``(position in the layout, item, destination offset)`` of the
            tensors whose ``cast`` is set, in the layout's order (a batch never
            spans a position that is not a cast: its padding is written too).
        files: the call's source files (each read through its open descriptor).
        advance: called with the bytes written after each chunk (progress).
        threads: chunks converted at once.

    Raises:
        TruncatedFileError: a source ended before a tensor's last byte.
        OSError: disk full, I/O error.
    """
    pieces = list(_pieces(jobs))
    if not pieces:
        return
    local = threading.local()
    lock = threading.Lock()

    def run(piece: list[tuple[Item, int, int, int]]) -> None:
        first, last = piece[0], piece[-1]
        item, start = first[0], first[1]
        length = last[1] + last[2] - start
        buf = getattr(local, "buf", None)
        if buf is None or len(buf) < length:
            buf = local.buf = bytearray(max(length, CAST_CHUNK))
            local.out = np.empty(len(buf) // ITEMSIZE[FLOAT], np.float16)  # clipping casts
        view = memoryview(buf)[:length]
        with files.lease(item.ref.source) as src:
            if read_upto(src, view, start) != length:
                raise TruncatedFileError(
                    f"tensor {last[0].site.label} in {shown(item.ref.file)}: the file ends "
                    f"before byte {start + length} (truncated while reading?)"
                )
        conversion = item.cast.conversion
        out, clipped = convert(view, conversion, local.out)
        data = memoryview(out).cast("B")
        if len(piece) > 1:  # a batch: its span written once, padding included
            span = bytearray(last[3] + conversion.length(last[2]) - first[3])
            for part in piece:
                at = conversion.length(part[1] - start)
                size = conversion.length(part[2])
                span[part[3] - first[3] : part[3] - first[3] + size] = data[at : at + size]
            data = span
        pwrite_all(fd, data, first[3])
        counts = [(item.cast, clipped)]
        if clipped and len(piece) > 1:  # rare: which tensors of the batch were clipped
            counts = [
                (
                    part[0].cast,
                    convert(view[part[1] - start : part[1] - start + part[2]], conversion)[1],
                )
                for part in piece
            ]
        with lock:  # progress is told from one thread at a time
            for cast, count in counts:
                cast.clipped += count
            advance(sum(conversion.length(part[2]) for part in piece))

    if threads <= 1 or len(pieces) == 1:
        for piece in pieces:
            run(piece)
        return
    with Pool(threads) as pool:  # after a failure, the chunks not started are skipped
        for job in [pool.submit(run, piece) for piece in pieces]:
            job.result()


def _pieces(jobs: list[tuple[int, Item, int]]):
    """Lists of ``(item, source offset, source length, destination offset)``: a chunk
    of a large tensor alone, or a batch of small neighbours (same source and
    conversion, following on in the source, next to each other in the layout)."""
    batch: list = []
    last_position = None
    for position, item, offset in jobs:
        ref, conversion = item.ref, item.cast.conversion
        if ref.length > SMALL:
            step = CAST_CHUNK - CAST_CHUNK % ITEMSIZE[conversion.src]
            for begin in range(0, ref.length, step):
                length = min(step, ref.length - begin)
                yield [(item, ref.offset + begin, length, offset + conversion.length(begin))]
            continue
        if batch:
            head, tail = batch[0], batch[-1]
            if (
                position != last_position + 1
                or ref.source is not head[0].ref.source
                or (
                    conversion is not head[0].cast.conversion
                    and conversion != head[0].cast.conversion
                )
                or ref.offset != tail[1] + tail[2]
                or ref.offset + ref.length - head[1] > BATCH
                or offset + conversion.length(ref.length) - head[3] > BATCH
            ):
                yield batch
                batch = []
        batch.append((item, ref.offset, ref.length, offset))
        last_position = position
    if batch:
        yield batch
