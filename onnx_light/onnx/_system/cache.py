"""How much of a file range is in the page cache: ``cachestat(2)``, else ``mincore(2)``.

``drop_behind=None`` asks it whether a copy's source is cold (see
:mod:`.memory`): a few ranges are probed, not the whole file. Linux 6.5 and
later answer with ``cachestat`` on the descriptor (no mapping; ``EPERM``
where the caller may not see the file's cache, as for ``mincore``). Older
kernels answer through ``mincore`` on a read-only mapping of the range,
asked only for files the caller owns (or as root): for any other file the
kernel reports only the pages this process has mapped, so an empty answer
would not mean cold. Where neither answers, :func:`resident` says None.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os

from .libc import libc_function

__all__ = ["resident"]


PAGE = mmap.PAGESIZE
_CACHESTAT = 451  # the same number on every architecture (added in Linux 6.5)
_state = {"cachestat": True}  # False once the kernel said it has none (ENOSYS)


class _Range(ctypes.Structure):
    _fields_ = [("off", ctypes.c_uint64), ("len", ctypes.c_uint64)]


class _Stat(ctypes.Structure):
    _fields_ = [
        ("nr_cache", ctypes.c_uint64),
        ("nr_dirty", ctypes.c_uint64),
        ("nr_writeback", ctypes.c_uint64),
        ("nr_evicted", ctypes.c_uint64),
        ("nr_recently_evicted", ctypes.c_uint64),
    ]


def _span(offset: int, length: int) -> tuple[int, int]:
    """The range widened to whole pages: (first byte, bytes)."""
    start = offset - offset % PAGE
    return start, -(-(offset + length - start) // PAGE) * PAGE


def _cachestat(fd: int, start: int, size: int) -> int | None:
    """Pages of the range in the page cache, or None (no cachestat here, or not allowed)."""
    if not _state["cachestat"]:
        return None
    call = libc_function(
        "syscall",
        [ctypes.c_long, ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint],
        ctypes.c_long,
    )
    if call is None or not hasattr(os, "uname") or os.uname().sysname != "Linux":
        _state["cachestat"] = False
        return None
    rng, out = _Range(start, size), _Stat()
    if call(_CACHESTAT, fd, ctypes.byref(rng), ctypes.byref(out), 0) == 0:
        return out.nr_cache
    if ctypes.get_errno() == errno.ENOSYS:
        _state["cachestat"] = False
    return None


def _mincore(fd: int, start: int, size: int) -> int | None:
    """Pages of the range in the page cache, through a mapping; None where it cannot tell."""
    geteuid = getattr(os, "geteuid", None)  # POSIX only
    if geteuid is None or geteuid() not in (0, os.fstat(fd).st_uid):  # ours only otherwise
        return None
    mmap_ = libc_function(
        "mmap",
        [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long],
        ctypes.c_void_p,
    )
    munmap = libc_function("munmap", [ctypes.c_void_p, ctypes.c_size_t])
    mincore = libc_function("mincore", [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p])
    if mmap_ is None or munmap is None or mincore is None:
        return None
    addr = mmap_(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, start)
    if addr in (None, ctypes.c_void_p(-1).value):
        return None
    try:
        vec = ctypes.create_string_buffer(size // PAGE)
        if mincore(addr, size, vec) != 0:
            return None
        return sum(b & 1 for b in vec.raw)
    finally:
        munmap(addr, size)


def resident(fd: int, offset: int, length: int) -> float | None:
    """The share (0 to 1) of ``length`` bytes at ``offset`` of ``fd`` in the page cache.

    Args:
        fd: a descriptor of a regular file.
        offset: first byte of the range.
        length: bytes (> 0); the range is widened to whole pages.

    Returns:
        The share of its pages in the page cache, or None where the system
        cannot tell (neither ``cachestat`` nor a ``mincore`` that may see the
        file's cache; not Linux).
    """
    start, size = _span(offset, length)
    try:
        end = -(-os.fstat(fd).st_size // PAGE) * PAGE  # no page past the end of the file
        size = min(size, end - start)
        if size <= 0:
            return None
        pages = _cachestat(fd, start, size)
        if pages is None:
            pages = _mincore(fd, start, size)
    except OSError:
        return None
    return None if pages is None else min(1.0, pages * PAGE / size)
