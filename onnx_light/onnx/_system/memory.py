"""How much memory this process may still fill: the page cache included.

A copy larger than that cannot stay in the page cache anyway: it only pushes
out what the rest of the machine (or the rest of the container) keeps there.
``drop_behind=None`` turns dropping on for such copies (measured in
``make bench``'s cold rows: in a 2 GiB cgroup, an 8 GiB re-align otherwise
evicts a 1 GiB file read just before, all of it).
"""

from __future__ import annotations

import contextlib
import os

__all__ = ["drop_by_default"]


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


def drop_by_default(nbytes: int) -> bool:
    """Whether ``drop_behind=None`` drops a copy of ``nbytes``: when it does not fit
    in the memory available (:func:`available_memory`)."""
    room = available_memory()
    return room is not None and nbytes > room
