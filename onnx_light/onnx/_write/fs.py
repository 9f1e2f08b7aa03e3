"""What the destination's filesystem does best, measured per filesystem.

The copy engine asks :func:`copy_policy` once per weights file. The choices
follow ``make bench`` on ext4, XFS, btrfs and tmpfs (the benchmarks page
shows the numbers):

- **Copies that cannot share blocks** (source and destination offsets not
  congruent modulo the block size, or a filesystem that never shares, like
  ext4 and tmpfs): ``splice`` through a 1 MiB pipe first.
  ``copy_file_range`` falls back in the kernel to a splice through a 64 KiB
  internal pipe, 16 times as many round trips: slower on ext4, XFS and
  btrfs, a tie on tmpfs. Elsewhere (NFS, SMB, FUSE, overlayfs...)
  ``copy_file_range`` stays first: a server may copy without the bytes
  crossing the network.
- **Copies that can share blocks** on XFS and btrfs start with
  ``copy_file_range``: the kernel shares the blocks (a reflink).
- **Preallocation** (``fallocate`` before copying) speeds ext4 copies up and
  is neutral on XFS, but slows btrfs and tmpfs down a little (writes into
  preallocated extents take btrfs's slower path; tmpfs allocates memory
  twice over), so those two are not preallocated. A range about to be
  shared would be allocated only to be freed (on XFS it costs as much as
  the reflink itself): on filesystems that share blocks, the ranges of
  congruent copies are never preallocated.
"""

from __future__ import annotations

import ctypes
import platform
import struct
import sys
from dataclasses import dataclass

from .._system.libc import libc_function

__all__ = ["CopyPolicy", "UNKNOWN", "copy_policy"]


# f_type of statfs(2) -> (name, splice shifted copies, may share blocks, preallocate)
_KNOWN = {
    0xEF53: ("ext4", True, False, True),  # ext2/3/4 share the magic number
    0x58465342: ("xfs", True, True, True),
    0x9123683E: ("btrfs", True, True, False),
    0x01021994: ("tmpfs", True, False, False),
}
# struct statfs is Linux's layout only: f_type and f_bsize first, 120 bytes on
# 64-bit ABIs, 64 or 84 on 32-bit ones. Other systems lay it out otherwise
# (macOS's is 2,168 bytes, f_type far from the start), and this module asks only
# Linux.
_STATFS_SIZE = 256  # larger than struct statfs on every Linux ABI
_LINUX = sys.platform.startswith("linux")


@dataclass(frozen=True)
class CopyPolicy:
    """How to copy into one destination file.

    Attributes:
        filesystem: its name, or ``"unknown"``.
        splice: copies that cannot share blocks go through ``splice`` first.
        shares_blocks: ``copy_file_range`` may share congruent blocks (do not
            preallocate them).
        preallocate: reserve the blocks of a new weights file before writing.
        block: the filesystem's block size (the unit of sharing).
    """

    filesystem: str = "unknown"
    splice: bool = False
    shares_blocks: bool = False
    preallocate: bool = True
    block: int = 4096

    def congruent(self, src_off: int, dst_off: int) -> bool:
        """Whether the offsets of a copy line up on blocks (so blocks could be shared)."""
        return (src_off - dst_off) % self.block == 0

    def may_share(self, src_off: int, dst_off: int) -> bool:
        """Whether ``copy_file_range`` should go first: the filesystem may share the
        blocks of this copy, or nothing was measured faster here."""
        if not self.splice:
            return True
        return self.shares_blocks and self.congruent(src_off, dst_off)


UNKNOWN = CopyPolicy()


def _fstatfs(fd: int) -> tuple[int, int] | None:
    """``(f_type, f_bsize)`` of the filesystem holding ``fd``, or None (off Linux,
    or when the C library has no ``fstatfs``)."""
    if not _LINUX:
        return None  # the struct's layout and size are known for Linux alone
    statfs = libc_function("fstatfs", [ctypes.c_int, ctypes.c_char_p])
    if statfs is None:
        return None
    buf = ctypes.create_string_buffer(_STATFS_SIZE)
    if statfs(fd, buf) != 0:
        return None
    # f_type and f_bsize are the first two fields, each a C long (__fsword_t),
    # except on s390x where both are unsigned ints
    size = ctypes.sizeof(ctypes.c_long)
    fmt = "II" if platform.machine() == "s390x" else ("ll" if size == 8 else "ii")
    f_type, f_bsize = struct.unpack_from(fmt, buf.raw)
    return f_type & 0xFFFFFFFF, f_bsize


def copy_policy(fd: int) -> CopyPolicy:
    """The copy policy for the destination open as ``fd``.

    Filesystems that were not measured get :data:`UNKNOWN`: the kernel's
    ``copy_file_range`` first, whole-file preallocation.
    """
    info = _fstatfs(fd)
    if info is None or info[0] not in _KNOWN:
        return UNKNOWN
    name, splice, shares, prealloc = _KNOWN[info[0]]
    block = info[1] if info[1] > 0 and info[1] & (info[1] - 1) == 0 else 4096
    return CopyPolicy(name, splice, shares, prealloc, block)
