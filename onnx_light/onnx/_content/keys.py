"""Which tensors hold the same bytes: content keys decided by comparing bytes.

Identical tensors are found without loading a model: candidates are grouped
by length, then by a digest of three small samples (the first, middle and
last 4 KiB); groups of more than two are split by a digest of all their
bytes (one pass each, so many look-alikes cost linear time, not a
comparison per pair); the survivors are compared byte for byte, chunk by
chunk, from the descriptors the sources were opened with. Memory holds two
chunks, whatever the sizes of the models. Sharing is decided by the
comparison alone, never by a digest.

A blob is anything whose bytes can be read: a range of an opened source
file, or bytes in memory (a tensor's ``raw_data``, a typed field converted).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

from .._plan.planner import Item
from .._read.sources import SourceFile, SourceFiles
from .._system.files import pread_into
from .._system.memory import SOURCE

__all__ = ["Blob", "blob_of", "comparison_bound", "comparison_estimate", "content_classes"]


SAMPLE = 4096
CHUNK = 1 << 20


@dataclass(frozen=True)
class Blob:
    """The bytes of one candidate.

    Attributes:
        length: its size in bytes.
        source: the opened file holding them (None: they are ``data``).
        offset: their first byte in ``source``.
        data: the bytes themselves when they are in memory.
        span: a key equal for two blobs reading the very same range (they are
            identical without reading anything); None for bytes in memory.
    """

    length: int
    source: SourceFile | None = None
    offset: int = 0
    data: bytes | memoryview | None = None

    @property
    def span(self) -> Hashable | None:
        if self.source is None:
            return None
        return (self.source.identity, self.offset, self.length)


class _Reader:
    """Reads blobs into reusable buffers (two chunks of memory in all).

    With ``drop``, what is read leaves the page cache again. With ``drop`` =
    :data:`~onnx_light.onnx._system.memory.SOURCE` (a cold source, a copy that
    fits in memory), only the second blob of a comparison does (a twin, not
    read again when it is equal): the rest is what the copy reads next, and
    drops behind it; dropped here, it would be read from the disk twice.
    """

    def __init__(
        self, files: SourceFiles, progress: Callable[[int], None] | None, drop: bool | str = False
    ) -> None:
        self.files = files
        self.buffers = [bytearray(CHUNK), bytearray(CHUNK)]
        self.progress = progress
        self.compared = 0
        self.drop = bool(drop) and hasattr(os, "posix_fadvise")
        self.twins_only = drop == SOURCE

    def read(
        self, blob: Blob, start: int, size: int, which: int = 0, twin: bool = False
    ) -> memoryview:
        """``size`` bytes of ``blob`` from ``start`` (within it); ``twin``: the second
        blob of a comparison."""
        if blob.source is None:
            return memoryview(blob.data)[start : start + size]
        buf = memoryview(self.buffers[which])[:size]
        done = 0
        with self.files.lease(blob.source) as fd:
            while done < size:
                n = pread_into(fd, buf[done:], blob.offset + start + done)
                if n == 0:
                    raise OSError(
                        f"{blob.source.path}: ended at byte {blob.offset + start + done} "
                        "while comparing tensors (the file shrank?)"
                    )
                done += n
            if self.drop and (twin or not self.twins_only):  # out of the page cache again
                with contextlib.suppress(OSError):
                    os.posix_fadvise(fd, blob.offset + start, size, os.POSIX_FADV_DONTNEED)
        return buf

    def sample(self, blob: Blob) -> bytes:
        """A digest of the first, middle and last :data:`SAMPLE` bytes: picks candidates.

        A blob of :data:`SAMPLE` bytes or fewer gives its bytes themselves:
        equal keys then mean equal bytes, and no comparison is needed.
        """
        n = blob.length
        if n <= SAMPLE:
            return bytes(self.read(blob, 0, n))
        h = hashlib.blake2b(digest_size=16)
        for start in sorted({0, max(0, n // 2 - SAMPLE // 2), max(0, n - SAMPLE)}):
            h.update(self.read(blob, start, min(SAMPLE, n - start)))
        return h.digest()

    def equal(self, a: Blob, b: Blob) -> bool:
        """True when the two blobs (of one length) hold the same bytes (``a``: the first
        of its class, copied next; ``b``: a twin when they are)."""
        for start in range(0, a.length, CHUNK):
            size = min(CHUNK, a.length - start)
            same = _same(self.read(a, start, size, 0), self.read(b, start, size, 1, twin=True))
            self._count(2 * size)
            if not same:
                return False
        return True

    def digest(self, blob: Blob) -> bytes:
        """A BLAKE2b digest of all the bytes: splits a large group in one pass."""
        h = hashlib.blake2b(digest_size=32)
        for start in range(0, blob.length, CHUNK):
            size = min(CHUNK, blob.length - start)
            h.update(self.read(blob, start, size))
            self._count(size)
        return h.digest()

    def _count(self, n: int) -> None:
        self.compared += n
        if self.progress is not None:
            self.progress(self.compared)


def _same(x: memoryview, y: memoryview) -> bool:
    """``x == y`` at the speed of ``memcmp``: two memoryviews compare element by
    element in Python, two bytearrays (or bytes) in one call."""
    whole = len(x) == len(y) and len(x.obj) == len(x) and len(y.obj) == len(y)
    if whole and isinstance(x.obj, bytearray) and isinstance(y.obj, bytearray):
        return x.obj == y.obj  # views of whole buffers (the reader's)
    return x.tobytes() == y.tobytes()


def _look_alikes(blobs: Sequence[Blob]) -> dict[int, int]:
    """How many blobs have each length (a range several blobs read counted once)."""
    by_length: dict[int, int] = {}
    spans = set()
    for blob in blobs:
        if blob.span is not None:
            if blob.span in spans:
                continue
            spans.add(blob.span)
        by_length[blob.length] = by_length.get(blob.length, 0) + 1
    return by_length


def comparison_estimate(blobs: Sequence[Blob]) -> int:
    """How many bytes :func:`content_classes` reads when the look-alikes differ, the
    common case: each blob that has others of its length read once (a progress bar's
    first total; more is read only for blobs that turn out equal or alike).

    In a language model every per-layer weight has the length of the others:
    the bound (:func:`comparison_bound`) counts each three times, this once.
    """
    return sum(length * k for length, k in _look_alikes(blobs).items() if k > 1)


def comparison_bound(blobs: Sequence[Blob]) -> int:
    """At most how many bytes :func:`content_classes` reads to compare (nothing read here).

    Each blob that has others of its length may be read once, and its
    class's first blob with it.
    """
    # a pair compares its two blobs; a larger group digests each, then compares each
    return sum(
        (2 * length if k == 2 else 3 * length * k)
        for length, k in _look_alikes(blobs).items()
        if k > 1
    )


def content_classes(
    blobs: Sequence[Blob],
    files: SourceFiles,
    progress: Callable[[int], None] | None = None,
    drop_behind: bool | str = False,
) -> list[int]:
    """A class per blob: two blobs get the same class when their bytes are equal.

    Args:
        blobs: the candidates.
        files: the call's opened source files.
        progress: called with the number of bytes compared so far (at most
            :func:`comparison_bound`), after each chunk.
        drop_behind: drop what was read from the page cache as it is read
            (:data:`~onnx_light.onnx._system.memory.SOURCE`: only the blobs
            found equal to an earlier one; the copy reads the others next).

    Returns:
        One class number per blob, the number of the first blob of its class.

    Raises:
        ExternalDataError: a source file changed since it was checked.
        OSError: a source file cannot be read.
    """
    classes = list(range(len(blobs)))
    by_span: dict[Hashable, int] = {}
    by_length: dict[int, list[int]] = {}
    for i, blob in enumerate(blobs):
        span = blob.span
        if span is not None:
            if span in by_span:  # the very same range: identical, nothing to read
                classes[i] = by_span[span]
                continue
            by_span[span] = i
        by_length.setdefault(blob.length, []).append(i)
    reader = _Reader(files, progress, drop_behind)
    for length, members in by_length.items():
        if len(members) < 2 or length == 0:
            if length == 0:  # every empty tensor is every other
                for i in members:
                    classes[i] = members[0]
            continue
        by_sample: dict[bytes, list[int]] = {}
        for i in members:
            by_sample.setdefault(reader.sample(blobs[i]), []).append(i)
        if length <= SAMPLE:  # the key was the bytes: each group is one class
            for group in by_sample.values():
                for i in group:
                    classes[i] = group[0]
            continue
        groups = list(by_sample.values())
        if any(len(g) > 2 for g in groups):  # many candidates: one pass each, not one per pair
            split = []
            for group in groups:
                if len(group) <= 2:
                    split.append(group)
                    continue
                by_digest: dict[bytes, list[int]] = {}
                for i in group:
                    by_digest.setdefault(reader.digest(blobs[i]), []).append(i)
                split.extend(by_digest.values())
            groups = split
        for group in groups:
            heads: list[int] = []  # the first blob of each class met so far
            for i in group:
                for head in heads:
                    if reader.equal(blobs[head], blobs[i]):
                        classes[i] = head
                        break
                else:
                    heads.append(i)
    # blobs that shared a span with a later-classified one follow it
    return [classes[c] for c in classes]


def blob_of(item: Item) -> Blob:
    """The bytes of a planned tensor: a range of its source file, or in memory."""
    if item.ref is not None:
        return Blob(item.size, item.ref.source, item.ref.offset)
    data = item.data if item.data is not None else item.site.tensor.raw_data
    return Blob(item.size, data=data)
