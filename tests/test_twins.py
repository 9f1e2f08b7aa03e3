"""transposed_twins: a tied weight stored transposed is found, in flat memory."""

from __future__ import annotations

import os

import numpy as np
import pytest

from benchmarks.harness import PeakMemory
from onnx_light.onnx._content.twins import transposed_twins
from onnx_light.onnx._errors import TruncatedFileError


class Reader:
    """``read(offset, length)`` over bytes, recording the longest read and the count."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.longest = 0
        self.calls = 0

    def __call__(self, offset: int, length: int) -> bytes:
        self.longest = max(self.longest, length)
        self.calls += 1
        return self.data[offset : offset + length]


def _twins(a: np.ndarray, b: np.ndarray, **kw) -> bool:
    rows, cols = a.shape
    return transposed_twins(Reader(a.tobytes()), Reader(b.tobytes()), rows, cols, a.itemsize, **kw)


def _matrix(rng, shape, dtype):
    if np.dtype(dtype).kind == "i":
        return rng.integers(-(2**40), 2**40, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


SHAPES = [((1000, 77), 256), ((5, 3), 256), ((300, 300), 64), ((77, 1000), 64), ((130, 7), 4)]
DTYPES = [np.float32, np.float16, np.int64, np.int8]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("shape", "tile"), SHAPES)
def test_a_transposed_copy_is_a_twin(shape, tile, dtype):
    a = _matrix(np.random.default_rng(0), shape, dtype)
    assert _twins(a, a.T.copy(), tile=tile)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("shape", "tile"), SHAPES)
def test_one_element_changed_anywhere_is_not_a_twin(shape, tile, dtype):
    rng = np.random.default_rng(1)
    a = _matrix(rng, shape, dtype)
    rows, cols = shape
    edge = min(tile, rows - 1), min(tile, cols - 1)  # first row and column of the second tile
    places = [(0, 0), (rows - 1, cols - 1), (rows // 2, cols // 2), edge,
              (edge[0] - 1, edge[1] - 1), (rows - 1, 0), (0, cols - 1)]  # fmt: skip
    for i, j in places:
        b = a.T.copy()
        b.view(f"u{b.itemsize}")[j, i] ^= 1  # one bit of one element
        for sample in (0, 32):  # caught by the full check, not only by the sample
            assert not _twins(a, b, tile=tile, sample=sample), (i, j, sample)


def test_a_symmetric_matrix_is_its_own_twin_and_a_plain_copy_is_not():
    rng = np.random.default_rng(2)
    m = _matrix(rng, (200, 200), np.float32)
    symmetric = m + m.T
    assert _twins(symmetric, symmetric.copy(), tile=64)
    assert not _twins(m, m.copy(), tile=64)


def test_equality_is_bitwise_not_numeric():
    a = np.array([[np.nan, 0.0], [1.0, 2.0]], dtype=np.float32)
    assert _twins(a, a.T.copy())  # NaN == the same NaN
    b = a.T.copy()
    b[1, 0] = -0.0
    assert not _twins(a, b, sample=0)  # -0.0 != 0.0


@pytest.mark.parametrize("shape", [(1, 1000), (1000, 1), (1, 1)])
def test_a_row_or_column_is_compared_as_it_is(shape):
    a = _matrix(np.random.default_rng(3), shape, np.float32)
    b = a.T.copy()
    ra, rb = Reader(a.tobytes()), Reader(b.tobytes())
    assert transposed_twins(ra, rb, *shape, 4, tile=8)
    assert max(ra.longest, rb.longest) <= 8 * 8 * 4
    b.view(np.uint32).flat[-1] ^= 1
    assert not _twins(a, b, tile=8, sample=0)


def test_other_itemsizes_and_empty_tensors():
    rng = np.random.default_rng(4)
    a = rng.integers(0, 256, (37, 23 * 3), dtype=np.uint8)  # 37 x 23 elements of 3 bytes
    b = np.ascontiguousarray(a.reshape(37, 23, 3).transpose(1, 0, 2))
    assert transposed_twins(Reader(a.tobytes()), Reader(b.tobytes()), 37, 23, 3, tile=5)
    b[0, 1, 2] ^= 1
    assert not transposed_twins(Reader(a.tobytes()), Reader(b.tobytes()), 37, 23, 3, tile=5)
    assert transposed_twins(Reader(b""), Reader(b""), 0, 10, 4)


def test_bad_arguments_and_short_reads_raise():
    with pytest.raises(ValueError, match="rows=-1"):
        transposed_twins(Reader(b""), Reader(b""), -1, 2, 4)
    with pytest.raises(ValueError, match="tile=0"):
        transposed_twins(Reader(b""), Reader(b""), 2, 2, 4, tile=0)
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    short = Reader(a.T.copy().tobytes()[:-4])
    with pytest.raises(TruncatedFileError, match="tensor B"):
        transposed_twins(Reader(a.tobytes()), short, 3, 4, 4)


def test_unrelated_tensors_are_told_apart_by_a_few_tiny_reads():
    rng = np.random.default_rng(5)
    a, b = _matrix(rng, (500, 400), np.float32), _matrix(rng, (400, 500), np.float32)
    ra, rb = Reader(a.tobytes()), Reader(b.tobytes())
    assert not transposed_twins(ra, rb, 500, 400, 4)
    assert ra.calls == rb.calls == 1
    assert ra.longest == rb.longest == 4


@pytest.mark.parametrize(("shape", "tile"), [((1000, 77), 256), ((300, 300), 64), ((70, 900), 32)])
def test_reads_are_bounded_by_a_tile(shape, tile):
    a = _matrix(np.random.default_rng(6), shape, np.float32)
    ra, rb = Reader(a.tobytes()), Reader(a.T.copy().tobytes())
    assert transposed_twins(ra, rb, *shape, 4, tile=tile)
    # row segments of a tile, or a tile of whole rows when a row is shorter than a tile
    assert max(ra.longest, rb.longest) <= tile * tile * 4
    if min(shape) > tile:
        assert max(ra.longest, rb.longest) <= tile * 4


def test_a_64_mib_pair_is_checked_in_flat_memory(tmp_path):
    n = 4096
    path = tmp_path / "pair.bin"
    with open(path, "wb") as f:
        a = np.random.default_rng(7).standard_normal((n, n)).astype(np.float32)
        f.write(a.tobytes())
        for r in range(0, n, 512):  # A's transpose, a band of its rows at a time
            f.write(np.ascontiguousarray(a[:, r : r + 512].T).tobytes())
        del a
    size = n * n * 4
    assert path.stat().st_size == 2 * size
    fd = os.open(path, os.O_RDONLY)
    try:

        def read_a(offset, length):
            return os.pread(fd, length, offset)

        def read_b(offset, length):
            return os.pread(fd, length, size + offset)

        with PeakMemory() as m:
            twins = transposed_twins(read_a, read_b, n, n, 4)
    finally:
        os.close(fd)
    assert twins
    assert m.growth < 16 << 20, f"peak grew by {m.growth / 2**20:.1f} MiB"
