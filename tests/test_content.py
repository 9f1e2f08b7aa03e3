"""Content keys: equal bytes, and only equal bytes, share a class."""

from __future__ import annotations

import os

import numpy as np
import pytest

from onnx_light.onnx._content.keys import CHUNK, SAMPLE, Blob, comparison_bound, content_classes
from onnx_light.onnx._read.sources import SourceFiles


@pytest.mark.parametrize("length", [1, 100, SAMPLE, SAMPLE + 1, 3 * SAMPLE, CHUNK, 2 * CHUNK + 7])
def test_a_difference_anywhere_splits_and_equal_bytes_join(tmp_path, length):
    rng = np.random.default_rng(length)
    base = rng.integers(0, 256, length, dtype="uint8").tobytes()
    changed = {}
    for where in sorted({0, length // 2, length - 1, min(length - 1, SAMPLE + 3)}):
        b = bytearray(base)
        b[where] ^= 0xFF
        changed[where] = bytes(b)
    path = tmp_path / "data"
    pieces = [base, base, *changed.values()]
    with open(path, "wb") as f:
        for p in pieces:
            f.write(p)
    with SourceFiles() as files:
        source = files.data(str(tmp_path), (str(tmp_path.resolve()),), "data", "t")
        blobs = [Blob(length, source, i * length) for i in range(len(pieces))]
        blobs.append(Blob(length, data=base))  # the same bytes in memory
        blobs.append(Blob(length, source, 0))  # the very same range again
        classes = content_classes(blobs, files)
    assert classes[0] == classes[1] == classes[-2] == classes[-1] == 0
    others = classes[2 : 2 + len(changed)]
    assert 0 not in others and len(set(others)) == len(others)
    assert comparison_bound(blobs) >= 0
    assert os.path.getsize(path) == length * len(pieces)


def test_many_look_alikes_cost_a_pass_each_not_a_comparison_per_pair(tmp_path, monkeypatch):
    """200 tensors of one length, equal in the sampled bytes, different elsewhere:
    every one is read a bounded number of times (it used to be compared with every
    earlier one: quadratic)."""
    import onnx_light.onnx._content.keys as content

    n, length = 200, 64 * 1024
    path = tmp_path / "data"
    with open(path, "wb") as f:
        for i in range(n):
            block = bytearray(length)
            block[16384:16388] = i.to_bytes(4, "little")  # outside the three samples
            f.write(block)
    read = [0]
    real = content._Reader.read

    def counting(self, blob, start, size, which=0, twin=False):
        read[0] += size
        return real(self, blob, start, size, which, twin)

    monkeypatch.setattr(content._Reader, "read", counting)
    with SourceFiles() as files:
        source = files.data(str(tmp_path), (str(tmp_path.resolve()),), "data", "t")
        blobs = [Blob(length, source, i * length) for i in range(n)]
        classes = content_classes(blobs, files)
    assert classes == list(range(n))  # all different
    assert read[0] <= 3 * n * length  # linear: samples, then one digest pass each
    assert read[0] <= comparison_bound(blobs) + n * 3 * content.SAMPLE


@pytest.mark.skipif(not hasattr(os, "posix_fadvise"), reason="no posix_fadvise")
@pytest.mark.parametrize("drop", [True, "source"])
def test_a_cold_comparison_keeps_cached_only_what_the_copy_reads_next(tmp_path, monkeypatch, drop):
    """drop_behind=SOURCE (a cold source, a copy that fits in memory): a blob the copy
    reads next (the first of its class, a different one) stays in the page cache (else
    the disk is read twice for it); its equal twin leaves it. True: all leave."""
    from onnx_light.onnx._system.memory import SOURCE

    assert SOURCE == "source"
    length = 2 * CHUNK + 7
    rng = np.random.default_rng(3)
    base = rng.integers(0, 256, length, dtype="uint8").tobytes()
    other = bytearray(base)
    other[CHUNK + 100_000] ^= 1  # in its second chunk, where no sample looks
    path = tmp_path / "data"
    path.write_bytes(base + base + bytes(other))
    dropped = []
    real = os.posix_fadvise

    def advise(fd, offset, size, advice):
        if advice == os.POSIX_FADV_DONTNEED:
            dropped.append((offset, size))
        return real(fd, offset, size, advice)

    monkeypatch.setattr(os, "posix_fadvise", advise)
    with SourceFiles() as files:
        source = files.data(str(tmp_path), (str(tmp_path.resolve()),), "data", "t")
        blobs = [Blob(length, source, i * length) for i in range(3)]
        dropped.clear()
        assert content_classes(blobs, files, drop_behind=drop) == [0, 0, 2]

    def touched(i):
        return sum(size for offset, size in dropped if i * length <= offset < (i + 1) * length)

    assert touched(1) >= length  # the twin: compared whole, then never read again
    if drop == "source":
        assert touched(0) == 0  # the head, and the different one: the copy drops them
        assert touched(2) <= CHUNK + 2 * CHUNK  # at most as far as compared with the head
    else:
        assert touched(0) >= length and touched(2) >= length
