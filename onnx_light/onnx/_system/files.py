"""Reading and sizing files: positioned reads and writes, reading references, preallocation.

Positioned I/O (:func:`pread`, :func:`pread_into`, :func:`pwrite`) is
``os.preadv`` / ``os.pread`` / ``os.pwrite`` where the system has them (Linux,
macOS). Windows has none of them: there a read or a write seeks, then reads
or writes, holding a lock per descriptor, so threads that share a descriptor
never move each other's position in between. The ``os`` functions are looked
up at each call (an attribute lookup), so tests can replace them.
"""

from __future__ import annotations

import ctypes
import errno
import io
import os
import threading
from collections import deque

from .._errors import TruncatedFileError, shown
from .libc import last_error, libc_function
from .pool import Pool

__all__ = [
    "O_BINARY",
    "O_CLOEXEC",
    "only_zeros_between",
    "pread",
    "pread_exact",
    "pread_into",
    "pwrite",
    "preallocate",
    "read_refs",
    "read_upto",
    "read_whole",
]


# Windows opens in text mode without O_BINARY (newlines translated): every open
# of the package adds it. O_CLOEXEC is POSIX's; elsewhere os.open's descriptors
# are not inherited anyway (PEP 446).
O_BINARY = getattr(os, "O_BINARY", 0)
O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)

_seek_locks: dict[int, threading.Lock] = {}  # Windows: one per descriptor


def _seek_lock(fd: int) -> threading.Lock:
    lock = _seek_locks.get(fd)
    if lock is None:
        lock = _seek_locks.setdefault(fd, threading.Lock())
    return lock


def pread_into(fd: int, buf: memoryview, offset: int) -> int:
    """Read into ``buf`` from ``offset`` of ``fd`` (one call: maybe fewer bytes).

    Returns:
        The number of bytes read (0 at the end of the file).
    """
    preadv = getattr(os, "preadv", None)  # Linux, macOS 11 and later
    if preadv is not None:
        return preadv(fd, [buf], offset)
    pread_ = getattr(os, "pread", None)
    if pread_ is not None:
        data = pread_(fd, len(buf), offset)
        buf[: len(data)] = data
        return len(data)
    with _seek_lock(fd):
        os.lseek(fd, offset, os.SEEK_SET)
        with io.FileIO(fd, "rb", closefd=False) as f:
            return f.readinto(buf) or 0


def pread(fd: int, length: int, offset: int) -> bytes:
    """Up to ``length`` bytes at ``offset`` of ``fd`` (fewer at the end of the file)."""
    pread_ = getattr(os, "pread", None)
    if pread_ is not None:
        return pread_(fd, length, offset)
    buf = bytearray(length)
    n = pread_into(fd, memoryview(buf), offset)
    del buf[n:]
    return bytes(buf)


def pwrite(fd: int, data, offset: int) -> int:
    """Write ``data`` at ``offset`` of ``fd`` (one call: maybe fewer bytes).

    Returns:
        The number of bytes written.
    """
    pwrite_ = getattr(os, "pwrite", None)
    if pwrite_ is not None:
        return pwrite_(fd, data, offset)
    with _seek_lock(fd):
        os.lseek(fd, offset, os.SEEK_SET)
        return os.write(fd, data)


def read_upto(fd: int, buf: memoryview, offset: int) -> int:
    """Fill ``buf`` from ``offset``; fewer bytes only when the file ends first.

    Returns:
        The number of bytes read.
    """
    done = 0
    while done < len(buf):
        n = pread_into(fd, buf[done : done + (1 << 30)], offset + done)
        if not n:
            break
        done += n
    return done


def pread_exact(fd: int, length: int, offset: int, what: str) -> bytes:
    """Read exactly ``length`` bytes at ``offset``.

    Raises:
        TruncatedFileError: the file is shorter than expected (truncated while
            reading); an OSError and an EOFError.
    """
    data = pread(fd, length, offset)
    if len(data) == length:
        return data
    return bytes(read_whole(fd, length, what, offset))


def read_whole(fd: int, size: int, what: str, offset: int = 0) -> bytearray:
    """Read ``size`` bytes from ``offset`` into one new buffer (no second copy).

    Raises:
        TruncatedFileError: the file is shorter (truncated while reading).
    """
    buf = bytearray(size)
    if read_upto(fd, memoryview(buf), offset) < size:
        raise TruncatedFileError.ended(what, "reading")
    return buf


_NO_FALLOCATE = frozenset({errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS})


def preallocate(fd: int, offset: int, length: int) -> None:
    """Reserve ``length`` bytes at ``offset`` of a new file with ``fallocate(2)``.

    The copies that follow then write into reserved blocks (faster on ext4:
    see ``_write/fs.py``), and a full disk fails before any byte of them is
    copied. Unlike ``os.posix_fallocate``, glibc's ``fallocate`` never
    emulates the call by writing the file: where the filesystem does not
    support it (EOPNOTSUPP, ENOSYS), nothing happens.

    Raises:
        OSError: any failure but "not supported here" (ENOSPC, EFBIG, EIO...).
    """
    fallocate = libc_function(
        "fallocate", [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    )
    if fallocate is None or length <= 0:
        return
    if fallocate(fd, 0, offset, length) != 0:
        error = last_error()
        if error.errno not in _NO_FALLOCATE:
            raise error


def read_refs(refs: list, files, num_threads: int = 1):
    """Yield ``(ref, bytes)`` for each :class:`TensorRef`, in order, read in parallel.

    Each read goes through the descriptor ``files`` (the call's
    :class:`SourceFiles`) opened when the reference was checked. At most
    ``2 * num_threads`` reads are in flight, so memory stays bounded.

    Raises:
        TruncatedFileError: a file is shorter than a reference says.
        ExternalDataError: a file closed to respect the descriptor budget
            changed before it was reopened.
    """

    def read(ref) -> bytes:
        with files.lease(ref.source) as fd:
            return pread_exact(
                fd, ref.length, ref.offset, f"tensor {ref.site.label} in {shown(ref.file)}"
            )

    if num_threads == 1:
        for ref in refs:
            yield ref, read(ref)
        return
    with Pool(num_threads) as pool:
        pending: deque = deque()  # (ref, job), oldest first
        for ref in refs:
            pending.append((ref, pool.submit(read, ref)))
            if len(pending) >= 2 * num_threads:
                first, job = pending.popleft()
                yield first, job.result()
        for ref, job in pending:
            yield ref, job.result()


def only_zeros_between(
    fd: int, size: int, ranges: list[tuple[int, int]], chunk: int = 1 << 20
) -> bool:
    """True when every byte of a file outside ``ranges`` is zero: padding, nothing else.

    Reads only the gaps (the padding of an aligned file is small), chunk by chunk.

    Args:
        fd: the file, open for reading.
        size: its size.
        ranges: ``(offset, length)`` of the bytes that belong to tensors.
        chunk: bytes read at a time.
    """
    position = 0
    for offset, length in sorted((*ranges, (size, 0))):
        while position < offset:
            n = min(chunk, offset - position)
            data = pread(fd, n, position)
            if len(data) < n or data.count(0) != n:
                return False
            position += n
        position = max(position, offset + length)
    return True
