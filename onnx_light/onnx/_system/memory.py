"""What ``drop_behind=None`` drops from the page cache: :func:`drop_by_default`.

Two cases, each measured (the cold rows of :doc:`/benchmarks`, and the proof
of the cold default it links):

- the copy does not fit in the memory this process may still fill (page
  cache included): both files are dropped. It cannot stay cached anyway
  and would only push out what the rest of the machine (or container)
  keeps there (in a cgroup smaller than the model, a re-align that keeps
  its pages evicts a file read just before, all of it);
- its source is not in the page cache (a few ranges probed, :mod:`.cache`):
  the source's pages are dropped behind the copy, the destination's kept.
  Nobody had the source cached, and keeping it fills as much fresh memory
  again; the kernel's copy into those fresh pages is where the default
  copy's extra CPU went. The destination is what the next step reads:
  dropped too, an onnxruntime session made on it right after is slower,
  reading it from the disk.

A warm source (read or written just before) keeps the cache of both: the
copy never waits for the disk.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence

from .cache import resident

__all__ = ["SOURCE", "drop_by_default"]

SOURCE = "source"  # drop_behind's value for "the source's pages only" (the copy engine's)

COLD = 0.5  # a source with less than this share of its probed bytes cached is cold
PROBES = 64  # tensors probed at most, evenly spread over the list
PROBE = 256 << 10  # bytes probed in the middle of each (the whole tensor when smaller)
SMALL = 64 << 20  # a copy smaller than this keeps the cache, cold or not (one drop window)


_NO_LIMIT = 1 << 60  # cgroup v1 writes "no limit" as a huge number


def _meminfo_available() -> int | None:
    with contextlib.suppress(OSError, ValueError), open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return None


def _read_int(path: str) -> int | None:
    with contextlib.suppress(OSError, ValueError):
        with open(path) as f:
            text = f.read().strip()
        return None if text == "max" else int(text)
    return None


def _stat(path: str, key: str) -> int:
    """One counter of a cgroup's ``memory.stat`` (0 when absent)."""
    with contextlib.suppress(OSError, ValueError), open(path) as f:
        for line in f:
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    return 0


def _cgroup_room() -> int | None:
    """The memory cgroup's limit minus what it holds that cannot simply be dropped,
    for v2 then v1; None: no limit. The inactive file cache is room: the kernel
    reclaims it first, and a container's usage sits near its limit once old
    files fill its cache."""
    with contextlib.suppress(OSError):
        with open("/proc/self/cgroup") as f:
            lines = f.read().splitlines()
        for line in lines:
            hid, controllers, path = line.split(":", 2)
            if hid == "0" and controllers == "":  # v2
                base = os.path.join("/sys/fs/cgroup", path.lstrip("/"))
                limit = _read_int(os.path.join(base, "memory.max"))
                usage = _read_int(os.path.join(base, "memory.current"))
                idle = _stat(os.path.join(base, "memory.stat"), "inactive_file")
            elif "memory" in controllers.split(","):  # v1
                base = os.path.join("/sys/fs/cgroup/memory", path.lstrip("/"))
                limit = _read_int(os.path.join(base, "memory.limit_in_bytes"))
                usage = _read_int(os.path.join(base, "memory.usage_in_bytes"))
                idle = _stat(os.path.join(base, "memory.stat"), "total_inactive_file")
            else:
                continue
            if limit is not None and limit < _NO_LIMIT and usage is not None:
                return max(0, limit - max(0, usage - idle))
    return None


def available_memory() -> int | None:
    """Bytes this process may still fill with page cache before something is evicted:
    the smaller of the kernel's ``MemAvailable`` and the room left in its memory
    cgroup. None where neither can be read (not Linux)."""
    known = [v for v in (_meminfo_available(), _cgroup_room()) if v is not None]
    return min(known) if known else None


def cached_share(items: Sequence, files) -> float | None:
    """The share of a copy's source bytes found in the page cache, probed.

    Args:
        items: the planner's items (``size``, and ``ref``: ``source``,
            ``offset``, ``length``; None for bytes already in memory); at most
            :data:`PROBES` of them, evenly spread, are probed.
        files: what leases their descriptors (``files.lease(source)``, as
            :class:`~onnx_light.onnx._read.sources.SourceFiles` does).

    Returns:
        The probed tensors' cached share weighted by their size, or None where
        nothing could be probed (no file, or the system cannot tell).
    """
    step = max(1, -(-len(items) // PROBES))
    seen = cached = 0.0
    for item in items[::step]:
        ref = item.ref
        if ref is None or ref.length <= 0:
            continue
        size = min(ref.length, PROBE)
        with files.lease(ref.source) as fd:
            share = resident(fd, ref.offset + (ref.length - size) // 2, size)
        if share is None:
            return None
        seen += ref.length
        cached += share * ref.length
    return cached / seen if seen else None


def drop_by_default(nbytes: int, items: Sequence = (), files=None) -> bool | str:
    """What ``drop_behind=None`` drops of a copy of ``nbytes`` from the page cache.

    True (both files) when the copy does not fit in the memory available
    (:func:`available_memory`); :data:`SOURCE` (the source's pages only, the
    destination's kept for the next step) when it is at least :data:`SMALL`
    and its source is cold: less than :data:`COLD` of the probed bytes in the
    page cache (:func:`cached_share`); else False. Where the cache cannot be
    probed (no ``cachestat`` nor ``mincore`` that may see it, not Linux),
    only the first rule applies.

    Args:
        nbytes: the bytes the copy writes.
        items: the planner's items it copies (see :func:`cached_share`).
        files: what leases their descriptors.
    """
    room = available_memory()
    if room is not None and nbytes > room:
        return True
    if nbytes < SMALL or files is None or not items:
        return False
    share = cached_share(items, files)
    return SOURCE if share is not None and share < COLD else False
