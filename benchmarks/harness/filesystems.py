"""Scratch filesystems of another kind, loop-mounted from an image file.

The benchmarks and tests run the same operations on ext4, XFS and btrfs:
:func:`loop_mount` creates a sparse image, formats it and mounts it (root and
the system's ``mkfs.xfs`` / ``mkfs.btrfs`` needed); :func:`unavailable` says
why it cannot, so callers skip with a clear note instead of failing.

Only what it makes is touched: a sparse image file in a folder of its own,
attached to a free loop device, mounted on a folder of its own, and all three
undone on exit. The kernel's filesystem module, where it was not loaded, is
loaded (``modprobe``, as ``mount`` would) and left loaded.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator

MKFS = {"xfs": ["mkfs.xfs", "-q", "-f"], "btrfs": ["mkfs.btrfs", "-q", "-f"]}
PACKAGES = {"xfs": "xfsprogs", "btrfs": "btrfs-progs"}
MIN_SIZE = 320 * 1024 * 1024  # mkfs.xfs refuses smaller images


def unavailable(kind: str) -> str | None:
    """Why a ``kind`` filesystem cannot be loop-mounted here, or None when it can.

    Args:
        kind: ``"xfs"`` or ``"btrfs"``.
    """
    if kind not in MKFS:
        return f"unknown filesystem {kind!r} (known: {', '.join(MKFS)})"
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return f"loop-mounting {kind} needs root"
    if shutil.which(MKFS[kind][0]) is None:
        return f"{MKFS[kind][0]} not found (install {PACKAGES[kind]})"
    if shutil.which("mount") is None or shutil.which("losetup") is None:
        return "mount / losetup not found (install util-linux)"
    try:
        with open("/proc/filesystems") as f:
            known = f.read().split()
    except OSError:
        known = []
    if kind not in known:
        # not loaded yet: mount loads the module when it can
        if shutil.which("modprobe") is None:
            return f"the kernel has no {kind} support"
        done = subprocess.run(["modprobe", kind], capture_output=True, text=True)
        if done.returncode != 0:
            why = done.stderr.strip() or f"exit status {done.returncode}"
            return f"the kernel has no {kind} support (modprobe {kind}: {why})"
    return None


@contextlib.contextmanager
def loop_mount(kind: str, size: int, where: str | os.PathLike | None = None) -> Iterator[str]:
    """Create, format and mount a ``kind`` image of ``size`` bytes; yield the mount point.

    The image is a sparse file in ``where`` (default: the system's temp dir),
    attached with direct I/O (``losetup --direct-io=on``) so its blocks are
    not cached twice, once for the filesystem and once for the image file:
    timings then vary like a disk's, not with the host's page cache. It is
    unmounted, detached and deleted on exit.

    Args:
        kind: ``"xfs"`` or ``"btrfs"``.
        size: bytes of the image (at least ``MIN_SIZE``, 320 MiB).
        where: the folder that holds the image and the mount point.

    Raises:
        RuntimeError: :func:`unavailable` gave a reason, or a command failed
            (its output is in the message).
    """
    reason = unavailable(kind)
    if reason is not None:
        raise RuntimeError(reason)
    root = tempfile.mkdtemp(prefix=f"onnx-light-{kind}-", dir=where)
    image, mnt = os.path.join(root, "image"), os.path.join(root, "mnt")
    os.mkdir(mnt)
    device = None
    mounted = False
    try:
        with open(image, "wb") as f:
            f.truncate(max(size, MIN_SIZE))
        _run([*MKFS[kind], image])
        device = _run(["losetup", "--direct-io=on", "--find", "--show", image])
        _run(["mount", device, mnt])
        mounted = True
        yield mnt
    finally:
        if mounted:
            _run(["umount", mnt])
        if device:
            _run(["losetup", "--detach", device])
        shutil.rmtree(root, ignore_errors=True)


def _run(cmd: list[str]) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout.strip()
