"""Is one 2-D tensor the transpose of another? Decided in flat memory.

Exporters write tied weights as a transposed copy: GPT-2's ``wte`` [V, D]
used again as ``lm_head`` stored [D, V]. Equal bytes do not find them; this
module does, reading both tensors a tile at a time so memory stays
``O(tile**2 * itemsize)`` whatever their size. Elements are compared as
unsigned integers of their width, so equality is bitwise: a NaN equals the
same NaN, ``-0.0`` differs from ``0.0``.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import numpy as np

from .._errors import TruncatedFileError
from .._plan.planner import Item
from .._read.sources import SourceFiles
from .._system.files import pread
from .keys import Blob, blob_of

__all__ = ["find_transposed"]


Read = Callable[[int, int], bytes]

_SEED = 19  # fixed: the same pair of tensors is always sampled at the same places
_UINTS = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def transposed_twins(
    read_a: Read,
    read_b: Read,
    rows: int,
    cols: int,
    itemsize: int,
    *,
    tile: int = 256,
    sample: int = 32,
) -> bool:
    """Whether tensor B (``cols x rows``) is exactly the transpose of tensor A (``rows x cols``).

    Both are row-major (C order). ``sample`` elements picked pseudo-randomly
    (a fixed seed) are compared first with reads of one element each, so two
    unrelated tensors are told apart after a few tiny reads. Then every
    element is compared, ``tile x tile`` elements at a time: each tile reads
    at most ``tile`` row segments of A and ``tile`` of B (one read when the
    rows are whole), so no read is longer than ``tile * tile * itemsize``
    bytes and memory stays ``O(tile**2 * itemsize)``. The answer is False at
    the first difference. When ``rows == 1`` or ``cols == 1`` the transpose
    has the same bytes: they are compared as they are, in chunks of
    ``tile * tile`` elements.

    Args:
        read_a: ``read_a(offset, length)`` returns ``length`` bytes of A
            starting ``offset`` bytes after its first byte (typically wraps
            ``os.pread`` on the source file).
        read_b: the same for B.
        rows: A's number of rows (B's number of columns).
        cols: A's number of columns (B's number of rows).
        itemsize: bytes per element (any width; 1, 2, 4 and 8 are compared
            as unsigned integers of that width).
        tile: elements per side of a tile.
        sample: elements compared before the full check (0 skips it).

    Returns:
        True when ``B[j, i] == A[i, j]`` byte for byte for every element
        (also when they have no element), False otherwise.

    Raises:
        ValueError: a negative dimension, a non-positive ``itemsize`` or
            ``tile``, or a negative ``sample``.
        TruncatedFileError: a reader returned fewer bytes than asked (its
            file ended early). Readers that know the tensor and file names
            should raise their own error first.
    """
    if rows < 0 or cols < 0 or itemsize < 1 or tile < 1 or sample < 0:
        raise ValueError(
            f"transposed_twins: rows={rows}, cols={cols}, itemsize={itemsize}, tile={tile}, "
            f"sample={sample}: dimensions and sample must be >= 0, itemsize and tile >= 1"
        )
    if rows == 0 or cols == 0:
        return True
    read_a, read_b = _exact(read_a, "A"), _exact(read_b, "B")
    if not _sampled_equal(read_a, read_b, rows, cols, itemsize, sample):
        return False
    if rows == 1 or cols == 1:
        return _bytes_equal(read_a, read_b, rows * cols * itemsize, tile * tile * itemsize)
    for i0 in range(0, rows, tile):
        h = min(tile, rows - i0)
        for j0 in range(0, cols, tile):
            w = min(tile, cols - j0)
            a = _block(read_a, i0, h, cols, j0, w, itemsize)  # A[i0:i0+h, j0:j0+w]
            b = _block(read_b, j0, w, rows, i0, h, itemsize)  # B[j0:j0+w, i0:i0+h]
            if not np.array_equal(a, b.swapaxes(0, 1)):
                return False
    return True


def _exact(read: Read, which: str) -> Read:
    """``read`` that raises when it returns fewer bytes than asked."""

    def exact(offset: int, length: int) -> bytes:
        data = read(offset, length)
        if len(data) != length:
            raise TruncatedFileError(
                f"transposed_twins: tensor {which} gave {len(data)} bytes at offset {offset}, "
                f"{length} were asked: its file ended early (truncated while reading?)"
            )
        return data

    return exact


def _sampled_equal(read_a: Read, read_b: Read, rows: int, cols: int, itemsize: int, n: int) -> bool:
    """Whether ``n`` pseudo-random elements (and the last one) match their transposes."""
    if n == 0:
        return True
    rng = random.Random(_SEED)
    places = [(rng.randrange(rows), rng.randrange(cols)) for _ in range(n - 1)]
    places.append((rows - 1, cols - 1))
    for i, j in places:
        a = read_a((i * cols + j) * itemsize, itemsize)
        if a != read_b((j * rows + i) * itemsize, itemsize):
            return False
    return True


def _bytes_equal(read_a: Read, read_b: Read, size: int, chunk: int) -> bool:
    """Whether the first ``size`` bytes of A and B are equal, read ``chunk`` bytes at a time."""
    for offset in range(0, size, chunk):
        length = min(chunk, size - offset)
        if read_a(offset, length) != read_b(offset, length):
            return False
    return True


def _block(
    read: Read, row0: int, nrows: int, row_len: int, col0: int, ncols: int, itemsize: int
) -> np.ndarray:
    """Rows ``row0:row0+nrows``, columns ``col0:col0+ncols`` of a row-major matrix.

    An ``nrows x ncols`` array of unsigned integers of ``itemsize`` bytes
    (``nrows x ncols x itemsize`` bytes for other widths), from one read when
    the rows are whole, else one read per row segment.
    """
    if ncols == row_len:
        data = read(row0 * row_len * itemsize, nrows * ncols * itemsize)
    else:
        seg = ncols * itemsize
        data = b"".join(read(((row0 + r) * row_len + col0) * itemsize, seg) for r in range(nrows))
    uint = _UINTS.get(itemsize)
    if uint is not None:
        return np.frombuffer(data, dtype=uint).reshape(nrows, ncols)
    return np.frombuffer(data, dtype=np.uint8).reshape(nrows, ncols, itemsize)


def find_transposed(
    items: list[Item], classes: list[int], names: list[tuple[str, str]], files: SourceFiles
) -> list[tuple[tuple[str, str], tuple[str, str], int]]:
    """Pairs of 2-D tensors, one the transpose of the other (``[V, D]`` and ``[D, V]``).

    Only non-square matrices of one data type and size are compared, once
    per content class; :func:`~onnx_light.onnx._content.twins.transposed_twins` samples a few
    elements, then compares tile by tile in flat memory.
    """
    groups: dict[tuple, list[int]] = {}
    for i, it in enumerate(items):
        dims = tuple(it.site.tensor.dims)
        if classes[i] != i or len(dims) != 2 or dims[0] == dims[1] or min(dims) < 2:
            continue
        if it.size % (dims[0] * dims[1]):
            continue  # sub-byte elements (int4...): not looked for
        groups.setdefault((it.site.tensor.data_type, it.size, tuple(sorted(dims))), []).append(i)
    blobs = {}
    found = []
    for members in groups.values():
        for x, i in enumerate(members):
            for j in members[x + 1 :]:
                rows, cols = items[i].site.tensor.dims
                if tuple(items[j].site.tensor.dims) != (cols, rows):
                    continue
                a = blobs.setdefault(i, blob_of(items[i]))
                b = blobs.setdefault(j, blob_of(items[j]))
                itemsize = items[i].size // (rows * cols)
                if transposed_twins(_read(a, files), _read(b, files), rows, cols, itemsize):
                    found.append((names[i], names[j], items[i].size))
    return found


def _read(blob: Blob, files: SourceFiles) -> Callable[[int, int], bytes]:
    """``read(offset, length)`` within the blob's bytes."""
    if blob.source is None:
        data = memoryview(blob.data)
        return lambda offset, length: bytes(data[offset : offset + length])

    def read(offset: int, length: int) -> bytes:
        with files.lease(blob.source) as fd:
            return pread(fd, length, blob.offset + offset)

    return read
