"""The page cache: drop a file's pages, so the next read comes from the disk."""

from __future__ import annotations

import os
from collections.abc import Iterable


def evict(paths: Iterable[str]) -> bool:
    """Drop ``paths`` from the page cache: ``fsync``, then ``POSIX_FADV_DONTNEED``.

    No root rights needed, and nothing else on the machine is affected: the
    page cache of every other file stays as it was.

    Args:
        paths: the files.

    Returns:
        False where ``posix_fadvise`` does not exist (nothing was dropped).
    """
    if not hasattr(os, "posix_fadvise"):
        return False
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    return True
