"""The copy engine: move byte ranges file to file, in the kernel when it can.

Three ways, tried in order, as CPython's ``shutil`` does for ``sendfile``:

1. ``os.copy_file_range``: in-kernel, zero copy (reflinks on some filesystems);
2. ``os.splice`` through a pipe: in-kernel too;
3. a positioned read / write loop over one reusable ``chunk_size`` buffer
   (:func:`~onnx_light.onnx._system.files.pread_into`: ``preadv`` where the system has it).

A copy that cannot share blocks (its offsets are shifted, or the filesystem
never shares) starts with ``splice`` where the destination's
:class:`~onnx_light.onnx._write.fs.CopyPolicy` says it is faster; one that can, on a filesystem
that shares blocks, starts with ``copy_file_range``, its head up to a block
boundary copied first so the rest can be shared.
With ``drop_behind``, the ranges already copied leave the page cache as the
copy goes (every :data:`DROP_WINDOW` bytes): the destination's are written
to the disk first (``fdatasync``), then both are dropped
(``posix_fadvise(POSIX_FADV_DONTNEED)``), so copying a model larger than the
memory does not push out what the rest of the machine keeps cached. With
``drop_behind=SOURCE`` only the source's ranges are dropped (no
``fdatasync``): the copy of a cold source stays cached for the next step.

An engine falls back only when the kernel says a way is not supported here
(ENOSYS, EXDEV, EINVAL, EOPNOTSUPP, ...) and then remembers it for the rest of
its copies. A full disk or an I/O error propagates as OSError. The ``os``
functions are looked up at call time, so tests can replace them.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Callable

from .._errors import TruncatedFileError
from .._system.files import pread_into, pwrite
from .._system.memory import SOURCE
from .fs import UNKNOWN, CopyPolicy

__all__ = ["CopyEngine", "pwrite_all"]


UNSUPPORTED = frozenset(
    {errno.ENOSYS, errno.EXDEV, errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOTTY}
)
PIPE_SIZE = 1 << 20  # the default /proc/sys/fs/pipe-max-size: what any user may ask
SHARE_CHUNK = 1 << 30  # bytes per call where blocks may be shared and nobody watches progress
DROP_WINDOW = 64 << 20  # bytes copied between two drops from the page cache (drop_behind)


class _Unsupported(Exception):
    """Internal: this way of copying is not supported here, after ``copied`` bytes."""

    def __init__(self, copied: int = 0) -> None:
        super().__init__(copied)
        self.copied = copied


class CopyEngine:
    """Copies byte ranges between file descriptors and reports progress.

    Args:
        chunk_size: bytes per system call (and size of the fallback buffer).
        progress: optional ``progress(done_bytes, total_bytes)``, called after
            every chunk.
        total: the total announced to ``progress``.
        policy: the destination filesystem's :class:`~onnx_light.onnx._write.fs.CopyPolicy`
            (default: the kernel's ``copy_file_range`` first for every copy).
        drop_behind: drop the copied ranges of both files from the page
            cache as the copy goes (the destination's written to disk first);
            :data:`~onnx_light.onnx._system.memory.SOURCE`: the source's only, the destination's kept cached
            (and written back by the kernel, as without drop_behind).

    Use it as a context manager: it owns a pipe once it uses splice.

    Attributes:
        method: the way the last bytes were copied (None before any copy).
        unsupported: the ways the kernel refused here, never tried again.
    """

    def __init__(
        self,
        chunk_size: int = 4 * 1024 * 1024,
        progress: Callable[[int, int], None] | None = None,
        total: int = 0,
        policy: CopyPolicy = UNKNOWN,
        drop_behind: bool | str = False,
    ) -> None:
        if chunk_size <= 0:
            raise ValueError(f"chunk_size must be > 0, got {chunk_size}")
        self.chunk_size = chunk_size
        self.progress = progress
        self.total = total
        self.done = 0
        self.policy = policy
        self._share = False
        self.method: str | None = None
        self.unsupported: set[str] = set()
        self._pipe: tuple[int, int] | None = None
        self._buffer: memoryview | None = None
        self.drop_behind = bool(drop_behind) and hasattr(os, "posix_fadvise")
        self._keep_written = drop_behind == SOURCE
        self._behind: dict[int, list[int]] = {}  # fd -> [lowest, highest] offset not dropped
        self._dirty: set[int] = set()  # destinations written since the last drop
        self._since = 0
        # the ways, in the order tried: kernel copy first, or splice first for
        # copies that cannot share blocks where the policy says it is faster
        self._methods = (self._copy_file_range, self._splice, self._pread)
        self._shifted = (self._splice, self._copy_file_range, self._pread)

    def __enter__(self) -> CopyEngine:
        return self

    def __exit__(self, exc_type, *exc) -> None:
        try:
            if exc_type is None and self._behind:
                self.drop()  # the last window (an error ends the copy: nothing to keep clean)
        finally:
            self._behind.clear()
            self.close()

    def close(self) -> None:
        """Release the pipe, if any."""
        if self._pipe is not None:
            for fd in self._pipe:
                os.close(fd)
            self._pipe = None

    def advance(self, n: int) -> None:
        """Count ``n`` more bytes as done and tell ``progress``."""
        self.done += n
        if self.progress is not None:
            self.progress(self.done, self.total)

    def copy(
        self, src: int, src_off: int, dst: int, dst_off: int, length: int, what: object
    ) -> None:
        """Copy ``length`` bytes from ``src`` at ``src_off`` to ``dst`` at ``dst_off``.

        Args:
            src: source file descriptor.
            src_off: offset in the source.
            dst: destination file descriptor.
            dst_off: offset in the destination.
            length: number of bytes.
            what: names the tensor and file, for error messages (a string, or
                a :class:`~._errors.Lazy` label formatted only when needed).

        Raises:
            TruncatedFileError: the source ended before ``length`` bytes (an
                OSError and an EOFError).
            OSError: disk full, I/O error, or another failure of the system.
        """
        policy = self.policy
        if policy.may_share(src_off, dst_off):
            head = -src_off % policy.block if policy.shares_blocks else 0
            if 0 < head < length:  # up to a block boundary, then shareable blocks
                self._copy(self._methods, src, src_off, dst, dst_off, head, what)
                src_off, dst_off, length = src_off + head, dst_off + head, length - head
            order = self._methods
            # a reflink of a gigabyte is one metadata operation: without a
            # progress callback to feed, whole ranges go in one call
            self._share = policy.shares_blocks and self.progress is None
        else:
            order = self._shifted if policy.splice else self._methods
        try:
            self._copy(order, src, src_off, dst, dst_off, length, what)
        finally:
            self._share = False

    def _copy(self, order, src: int, src_off: int, dst: int, dst_off: int, length: int, what):
        done = 0
        while done < length:
            step = next(m for m in order if m.__name__[1:] not in self.unsupported)
            self.method = step.__name__[1:]
            # with drop_behind, at most a window per call, so ranges leave the cache as we go
            size = min(length - done, DROP_WINDOW) if self.drop_behind else length - done
            try:
                n = step(src, src_off + done, dst, dst_off + done, size, what)
            except _Unsupported as e:
                n = e.copied
                self.unsupported.add(self.method)
            if self.drop_behind and n:
                self._behind_of(src, src_off + done, n)
                if not self._keep_written:
                    self._behind_of(dst, dst_off + done, n)
                    self._dirty.add(dst)
                self._since += n
                if self._since >= DROP_WINDOW:
                    self.drop()
            done += n

    def _behind_of(self, fd: int, offset: int, n: int) -> None:
        span = self._behind.setdefault(fd, [offset, offset + n])
        span[0], span[1] = min(span[0], offset), max(span[1], offset + n)

    def drop(self) -> None:
        """Drop the copied ranges from the page cache, the destinations' written first.

        Raises:
            OSError: writing a destination to the disk failed (an I/O error).
        """
        sync = getattr(os, "fdatasync", os.fsync)  # fsync where the system has no fdatasync
        for fd in self._dirty:
            try:
                sync(fd)  # dirty pages cannot be dropped: write them first
            except OSError as e:
                if e.errno not in UNSUPPORTED:
                    raise
        # from the first byte copied, not the last window's: a large folio of the page
        # cache that straddles two windows is dropped once both are done
        for fd, (low, high) in self._behind.items():
            with contextlib.suppress(OSError):  # advice: a filesystem may ignore it
                os.posix_fadvise(fd, low, high - low, os.POSIX_FADV_DONTNEED)
        self._dirty.clear()
        self._since = 0

    def _check_eof(self, n: int, what: object) -> None:
        if n == 0:
            raise TruncatedFileError.ended(what)

    def _copy_file_range(self, src, src_off, dst, dst_off, remaining, what) -> int:
        copied = 0
        while copied < remaining:
            chunk = max(self.chunk_size, SHARE_CHUNK) if self._share else self.chunk_size
            count = min(chunk, remaining - copied)
            try:
                n = os.copy_file_range(src, dst, count, src_off + copied, dst_off + copied)
            except AttributeError:
                raise _Unsupported(copied) from None
            except OSError as e:
                if e.errno in UNSUPPORTED:
                    raise _Unsupported(copied) from None
                raise
            if n == 0 and copied == 0:
                # 0 at the start of a range: "not done here" on some filesystems
                # (shutil falls back too); the next way tells whether the file ended
                raise _Unsupported(0)
            self._check_eof(n, what)
            copied += n
            self.advance(n)
        return copied

    def _open_pipe(self) -> tuple[int, int]:
        if self._pipe is None:
            self._pipe = os.pipe()
            try:
                import fcntl

                fcntl.fcntl(self._pipe[1], fcntl.F_SETPIPE_SZ, min(self.chunk_size, PIPE_SIZE))
            except (OSError, AttributeError, ImportError):
                pass
        return self._pipe

    def _splice(self, src, src_off, dst, dst_off, remaining, what) -> int:
        if not hasattr(os, "splice"):
            raise _Unsupported(0)
        try:
            r, w = self._open_pipe()
        except OSError:  # no descriptor left for a pipe (EMFILE, ENFILE): another way
            raise _Unsupported(0) from None
        copied = 0
        while copied < remaining:
            count = min(self.chunk_size, remaining - copied)
            try:
                n = os.splice(src, w, count, offset_src=src_off + copied)
            except OSError as e:
                if e.errno in UNSUPPORTED:
                    raise _Unsupported(copied) from None
                raise
            self._check_eof(n, what)
            pending = n
            while pending:
                try:
                    m = os.splice(r, dst, pending, offset_dst=dst_off + copied)
                except OSError as e:
                    if e.errno not in UNSUPPORTED:
                        raise
                    # Empty the pipe by hand, then give up on splice.
                    m = _drain(r, dst, dst_off + copied, pending)
                    self.advance(m)
                    raise _Unsupported(copied + m) from None
                pending -= m
                copied += m
                self.advance(m)
        return copied

    def _pread(self, src, src_off, dst, dst_off, remaining, what) -> int:
        if self._buffer is None:
            self._buffer = memoryview(bytearray(self.chunk_size))
        buf = self._buffer
        copied = 0
        while copied < remaining:
            count = min(self.chunk_size, remaining - copied)
            n = pread_into(src, buf[:count], src_off + copied)
            self._check_eof(n, what)
            pwrite_all(dst, buf[:n], dst_off + copied)
            copied += n
            self.advance(n)
        return copied


def _drain(r: int, dst: int, dst_off: int, pending: int) -> int:
    done = 0
    while done < pending:
        data = os.read(r, pending - done)
        pwrite_all(dst, data, dst_off + done)
        done += len(data)
    return done


def pwrite_all(fd: int, data, offset: int) -> None:
    """``pwrite`` all of ``data`` at ``offset``, looping on short writes."""
    view = memoryview(data)
    while view:
        n = pwrite(fd, view, offset)
        if n == 0:
            raise OSError(errno.EIO, "pwrite wrote nothing")
        view = view[n:]
        offset += n
