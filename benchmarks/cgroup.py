"""Cold runs: the measured files out of the page cache, a command in a fresh memory cgroup.

- :func:`unavailable`: why cold runs cannot be made here. A cold run evicts
  only the files it measures (``benchmarks.harness.evict``: written back, then
  ``posix_fadvise(POSIX_FADV_DONTNEED)``, no root needed); the page cache of
  the rest of the machine is left alone.
- :class:`MemoryCgroup`: a new memory cgroup with a limit that counts the
  page cache, as the memory of a smaller machine would (root only). It is
  made for the run and removed after, and limits only the processes put in
  it; no setting of the machine's cgroups is changed (where the memory
  controller is not enabled for new cgroups, it is not enabled: the cgroup
  rows are skipped with the reason). On cgroup v2 it is
  made under the root (``memory.max``); on v1 (``memory.limit_in_bytes``),
  under the memory cgroup this process is in, so whatever accounts for this
  process still sees the child. A child process joins it before it execs
  (``preexec_fn=cgroup.enter``). After the run: :meth:`~MemoryCgroup.oom_kills`
  (the kernel's count of OOM kills in it) and :meth:`~MemoryCgroup.peak`
  (its highest usage, page cache included).
- :func:`resident`: bytes of a file in the page cache (``fincore``).

Usage, as root::

    with MemoryCgroup(2 * 1024**3) as cg:
        subprocess.run(cmd, preexec_fn=cg.enter)
        killed = cg.oom_kills()
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import time

FS = "/sys/fs/cgroup"
V1_MEMORY = os.path.join(FS, "memory")
_counter = itertools.count()


def version() -> int | None:
    """2 (unified hierarchy), 1 (a v1 memory controller) or None (no memory cgroup)."""
    if os.path.exists(os.path.join(FS, "cgroup.controllers")):
        return 2
    if os.path.exists(os.path.join(V1_MEMORY, "memory.limit_in_bytes")):
        return 1
    return None


def unavailable() -> str | None:
    """Why cold runs cannot be made here, or None."""
    if not hasattr(os, "posix_fadvise"):
        return "no posix_fadvise (files cannot be evicted from the page cache)"
    return None


def cgroup_unavailable() -> str | None:
    """Why a memory cgroup cannot be made here, or None."""
    reason = unavailable()
    if reason:
        return reason
    if os.geteuid() != 0:
        return "not root (making a memory cgroup needs root)"
    v = version()
    if v is None:
        return "no memory cgroup controller mounted under /sys/fs/cgroup"
    if v == 2:
        for name in ("cgroup.controllers", "cgroup.subtree_control"):
            with open(os.path.join(FS, name)) as f:
                if "memory" not in f.read().split():
                    return f"cgroup v2 without the memory controller in the root's {name}"
    return None


def resident(path: str) -> int | None:
    """Bytes of ``path`` in the page cache (``fincore``), or None without it."""
    if shutil.which("fincore") is None:
        return None
    out = subprocess.run(
        ["fincore", "--bytes", "--noheadings", "--output", "RES", path],
        capture_output=True,
        text=True,
    )
    try:
        return int(out.stdout.split()[0])
    except (IndexError, ValueError):
        return None


def _own_v1_path() -> str:
    """This process's memory cgroup on v1 (``/`` when at the root)."""
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            if "memory" in controllers.split(","):
                return path
    return "/"


class MemoryCgroup:
    """A fresh memory cgroup limited to ``limit`` bytes (page cache included).

    Args:
        limit: the limit in bytes.
        name: a prefix for its folder's name (a counter and the pid are added).
    """

    def __init__(self, limit: int, name: str = "onnx-light-bench") -> None:
        self.limit = limit
        self.version = version()
        if self.version is None:
            raise RuntimeError("no memory cgroup controller")
        leaf = f"{name}-{os.getpid()}-{next(_counter)}"
        if self.version == 2:
            self.path = os.path.join(FS, leaf)
        else:
            self.path = os.path.join(V1_MEMORY, _own_v1_path().lstrip("/"), leaf)

    def _write(self, name: str, value: str) -> None:
        with open(os.path.join(self.path, name), "w") as f:
            f.write(value)

    def _read(self, name: str) -> str | None:
        try:
            with open(os.path.join(self.path, name)) as f:
                return f.read()
        except OSError:
            return None

    def __enter__(self) -> MemoryCgroup:
        os.mkdir(self.path)
        try:
            if self.version == 2:
                self._write("memory.max", str(self.limit))
                self._write("memory.swap.max", "0")
            else:
                self._write("memory.limit_in_bytes", str(self.limit))
        except OSError:
            os.rmdir(self.path)
            raise
        return self

    def enter(self) -> None:
        """Move the calling process into the cgroup (a ``preexec_fn``: the child, before exec)."""
        self._write("cgroup.procs", str(os.getpid()))

    def oom_kills(self) -> int:
        """Processes the kernel OOM-killed in this cgroup so far."""
        text = self._read("memory.events" if self.version == 2 else "memory.oom_control") or ""
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return 0

    def peak(self) -> int | None:
        """Its highest memory usage, page cache included (None where the kernel keeps none)."""
        text = self._read("memory.peak" if self.version == 2 else "memory.max_usage_in_bytes")
        return int(text) if text and text.strip().isdigit() else None

    def __exit__(self, *exc) -> None:
        # the processes have exited; the kernel may take a moment to let the folder go
        for _ in range(50):
            try:
                os.rmdir(self.path)
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.1)
