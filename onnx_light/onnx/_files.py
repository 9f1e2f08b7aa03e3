"""Reading and sizing files: exact positional reads, reading references, preallocation."""

from __future__ import annotations

import errno
import os
from concurrent.futures import ThreadPoolExecutor

from ._errors import TruncatedFileError


def pread_exact(fd: int, length: int, offset: int, what: str) -> bytes:
    """Read exactly ``length`` bytes at ``offset``.

    Raises:
        TruncatedFileError: the file is shorter than expected (truncated while
            reading); an OSError and an EOFError.
    """
    data = os.pread(fd, length, offset)
    if len(data) == length:
        return data
    buf = bytearray(data)
    while len(buf) < length:
        more = os.pread(fd, min(length - len(buf), 1 << 30), offset + len(buf))
        if not more:
            raise TruncatedFileError(f"{what}: the file ended early (truncated while reading?)")
        buf += more
    return bytes(buf)


def read_whole(fd: int, size: int, what: str) -> bytearray:
    """Read the first ``size`` bytes of a file into one new buffer (no second copy).

    Raises:
        TruncatedFileError: the file is shorter (truncated while reading).
    """
    buf = bytearray(size)
    view = memoryview(buf)
    done = 0
    while done < size:
        n = os.preadv(fd, [view[done : done + (1 << 30)]], done)
        if n == 0:
            raise TruncatedFileError(f"{what}: the file ended early (truncated while reading?)")
        done += n
    return buf


_NO_FALLOCATE = frozenset({errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS})
_fallocate = None


def preallocate(fd: int, offset: int, length: int) -> None:
    """Reserve ``length`` bytes at ``offset`` of a new file with ``fallocate(2)``.

    The copies that follow then write into reserved blocks (faster on ext4:
    see ``_fs.py``), and a full disk fails before any byte of them is
    copied. Unlike ``os.posix_fallocate``, glibc's ``fallocate`` never
    emulates the call by writing the file: where the filesystem does not
    support it (EOPNOTSUPP, ENOSYS), nothing happens.

    Raises:
        OSError: any failure but "not supported here" (ENOSPC, EFBIG, EIO...).
    """
    global _fallocate
    if _fallocate is None:
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            func = libc.fallocate
            func.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
            func.restype = ctypes.c_int
            _fallocate = func
        except (OSError, AttributeError, ImportError):
            _fallocate = False
    if not _fallocate or length <= 0:
        return
    import ctypes

    if _fallocate(fd, 0, offset, length) != 0:
        err = ctypes.get_errno()
        if err not in _NO_FALLOCATE:
            raise OSError(err, os.strerror(err))


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
                fd, ref.length, ref.offset, f"tensor {ref.site.label} in {ref.file!r}"
            )

    if num_threads == 1:
        for ref in refs:
            yield ref, read(ref)
        return
    with ThreadPoolExecutor(num_threads) as ex:
        window = 2 * num_threads
        futures = []
        for i, ref in enumerate(refs):
            futures.append(ex.submit(read, ref))
            if len(futures) >= window:
                j = i - len(futures) + 1
                yield refs[j], futures.pop(0).result()
        start = len(refs) - len(futures)
        for k, fut in enumerate(futures):
            yield refs[start + k], fut.result()
