"""File-backed tensors grouped for copying: runs, and batches of small runs.

A *run* is tensors whose bytes follow on both in the source and in the
destination: one copy moves them all. A model already aligned, or re-aligned
densely, is one run per source file.

A *batch* is consecutive small runs of one source that lie within
:data:`BATCH_BYTES` of each other on both sides: their source span is read
once and their destination span written once, from one buffer. Two hundred
thousand tensors of a few bytes, each alone on its 4096-byte page, then take
two hundred system calls instead of four hundred thousand. Runs whose blocks
the filesystem may share (congruent, on XFS or btrfs) are never batched: the
kernel shares them instead of copying.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from .._errors import Lazy, TruncatedFileError, shown
from .._plan.planner import Item
from .._read.sources import SourceFile
from .._system.files import read_upto
from .copy import CopyEngine, pwrite_all
from .fs import CopyPolicy

__all__ = ["BATCH_BYTES", "Run", "Scratch", "copy_batch", "copy_run", "groups", "runs"]


SMALL_RUN = 64 * 1024  # runs shorter than this may be batched
BATCH_BYTES = 4 * 1024 * 1024  # the most a batch reads, and the most it writes


@dataclass(slots=True)
class Run:
    """File-backed tensors whose bytes follow on in the source and in the destination."""

    source: SourceFile
    src: int
    dst: int
    length: int
    items: list[Item]

    @property
    def file(self) -> str:
        return self.source.path


def runs(unique: list[tuple[Item, int]]) -> list[Run]:
    """Group file-backed items into runs copied in one go (fewer, longer system calls).

    Args:
        unique: ``(item, destination offset)`` in the layout's order.

    Returns:
        The runs, in the same order; padding between two tensors starts a new run.
    """
    out: list[Run] = []
    last = None
    for item, offset in unique:
        ref = item.ref
        if ref is None:
            continue
        if (
            last is not None
            and last.source is ref.source
            and last.src + last.length == ref.offset
            and last.dst + last.length == offset
        ):
            last.length += ref.length
            last.items.append(item)
        else:
            last = Run(ref.source, ref.offset, offset, ref.length, [item])
            out.append(last)
    return out


def groups(all_runs: list[Run], policy: CopyPolicy, chunk_size: int) -> Iterator[list[Run]]:
    """Yield the runs one by one, except small ones gathered into batches.

    A batch holds runs of one source whose source bytes lie within
    ``limit`` = min(:data:`BATCH_BYTES`, ``chunk_size``) and whose
    destination bytes too (so progress still moves by at most a chunk).
    """
    limit = min(BATCH_BYTES, chunk_size)
    batch: list[Run] = []
    lo = hi = 0
    for run in all_runs:
        small = run.length < min(SMALL_RUN, limit) and not (
            policy.shares_blocks and policy.congruent(run.src, run.dst)
        )
        if batch and (
            not small
            or run.source is not batch[0].source
            or max(hi, run.src + run.length) - min(lo, run.src) > limit
            or run.dst + run.length - batch[0].dst > limit
        ):
            yield batch
            batch = []
        if not small:
            yield [run]
            continue
        if not batch:
            lo, hi = run.src, run.src + run.length
        lo, hi = min(lo, run.src), max(hi, run.src + run.length)
        batch.append(run)
    if batch:
        yield batch


def _moved(run: Run) -> str:
    """Which tensors a copy moves, for a message."""
    items, file = run.items, run.file
    if len(items) == 1:
        return f"tensor {items[0].site.label} in {shown(file)}"
    return f"tensors {items[0].site.label} to {items[-1].site.label} in {shown(file)}"


def _truncated(run: Run, position: int) -> TruncatedFileError:
    """The error for a source that ended ``position`` bytes into ``run``."""
    for item in run.items:
        if position < item.size:
            break
        position -= item.size
    return TruncatedFileError.ended(f"tensor {item.site.label} in {shown(run.file)}")


def copy_run(engine: CopyEngine, src: int, dst: int, run: Run) -> None:
    """Copy one run; a truncated source names the tensor where the bytes ran out."""
    before = engine.done
    try:
        engine.copy(src, run.src, dst, run.dst, run.length, Lazy(_moved, run))
    except TruncatedFileError:
        if len(run.items) == 1:
            raise
        raise _truncated(run, engine.done - before) from None


class Scratch:
    """The buffers every batch of one write goes through, kept from batch to batch.

    Each grows to the largest batch met so far (a power of two, at most
    ``size``): a fresh buffer per batch would page-fault its megabytes in
    each time, and buffers of ``size`` from the start would fault in 8 MiB
    for a model whose batches hold a few KiB (about 4 ms a call, most of a
    small model's).

    Args:
        size: the most a batch reads or writes (the ``limit`` of :func:`groups`).
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self.read = self.write = self.zeros = memoryview(b"")

    def fit(self, read: int, write: int) -> None:
        """Make ``read`` (the source span) and ``write`` (the destination span) fit."""
        if read > len(self.read):
            self.read = memoryview(bytearray(self._grown(read)))
        if write > len(self.write):
            self.write = memoryview(bytearray(self._grown(write)))
            self.zeros = memoryview(bytes(len(self.write)))

    def _grown(self, n: int) -> int:
        return max(n, min(self.size, 1 << max(16, (n - 1).bit_length())))


def copy_batch(engine: CopyEngine, src: int, dst: int, batch: list[Run], scratch: Scratch) -> None:
    """Copy small runs through one buffer: one read of their source span, one write.

    The gaps of the destination span are written as zeros (the padding).

    Raises:
        TruncatedFileError: the source ended early, naming the first tensor
            whose bytes are missing.
        OSError: disk full, I/O error.
    """
    lo = min(run.src for run in batch)
    hi = max(run.src + run.length for run in batch)
    scratch.fit(hi - lo, max(run.dst + run.length for run in batch) - batch[0].dst)
    got = read_upto(src, scratch.read[: hi - lo], lo)
    data, out, zeros = scratch.read, scratch.write, scratch.zeros
    base = batch[0].dst
    pos = 0
    for run in batch:
        start, at = run.src - lo, run.dst - base
        if start + run.length > got:
            raise _truncated(run, max(0, got - start))
        if at > pos:
            out[pos:at] = zeros[: at - pos]
        out[at : at + run.length] = data[start : start + run.length]
        pos = at + run.length
    pwrite_all(dst, out[:pos], base)
    engine.advance(sum(run.length for run in batch))
