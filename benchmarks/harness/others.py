"""How busy the other processes of the machine kept its CPUs while something ran."""

from __future__ import annotations

import os


def _cpu_ticks() -> tuple[int, int] | None:
    """(busy, total) clock ticks of all CPUs since boot, from ``/proc/stat`` (None
    where there is none)."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields) - idle, sum(fields)


def _own_cpu() -> float:
    """CPU seconds of this process and of the children it waited for."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


class OthersCpu:
    """The CPU share the rest of the machine used during a ``with`` block.

    The busy time of every CPU (``/proc/stat``) minus this process's own and
    its waited-for children's, over the block's time: 0 on a quiet machine, 1
    when another process kept one whole CPU busy. The load average cannot
    tell this: it counts the measurement itself.

    Attributes:
        share: the CPUs' worth the others used (None before the block ends, or
            where ``/proc/stat`` does not exist).

    Examples:
        ::

            with OthersCpu() as others:
                subprocess.run([sys.executable, "measure.py"])
            print(f"others used {others.share:.2f} CPU")
    """

    def __init__(self) -> None:
        self.share: float | None = None

    def __enter__(self) -> OthersCpu:
        self._ticks, self._mine = _cpu_ticks(), _own_cpu()
        return self

    def __exit__(self, *exc) -> None:
        ticks, mine = _cpu_ticks(), _own_cpu()
        if ticks is None or self._ticks is None or ticks[1] <= self._ticks[1]:
            return
        tick = os.sysconf("SC_CLK_TCK")
        wall = (ticks[1] - self._ticks[1]) / tick / (os.cpu_count() or 1)
        busy = (ticks[0] - self._ticks[0]) / tick
        self.share = max(0.0, (busy - (mine - self._mine)) / wall)
