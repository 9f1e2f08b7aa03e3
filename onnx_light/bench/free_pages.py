"""Freed memory kept in the guest while measuring, on a VM that reports it to its host.

Some virtual machines hand freed blocks back to their host at once (Linux's
free-page reporting: ``min_free_ms=0``, blocks from 128 KiB up with
``page_reporting_order=5``); the next process touching such memory faults at
the host's level, and a copy into the page cache then runs 2 to 20 times
slower, at random (measured here: a first touch of 3 GiB took 22 s, the next
2.5 s). :func:`hold_free_pages` stops that reporting for a measure, as root,
and puts it back after; :func:`prime` touches fresh memory so the next
process gets backed pages.
"""

from __future__ import annotations

import contextlib
import json
import mmap
import os
import sys
from collections.abc import Iterator

__all__ = ["hold_free_pages", "hold_order", "prime"]

PAGE_REPORTING = "/sys/module/page_reporting/parameters/min_free_ms"
PAGE_REPORTING_ORDER = "/sys/module/page_reporting/parameters/page_reporting_order"
BUDDYINFO = "/proc/buddyinfo"
HOLD_FREE_MS = (300_000, 120_000)  # the delays tried, longest first (600 s is refused here)
STATE = "/run/onnx_light_page_reporting.json"  # the settings to put back, and who holds them


def _free() -> int:
    """Memory nobody uses, not even the page cache (``MemFree``), in bytes."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemFree:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def prime(nbytes: int) -> None:
    """Touch ``nbytes`` of fresh memory, then free it.

    A VM that reports free memory to its host keeps the reported pages at the
    end of the free lists: memory freed just now is what the next process
    gets, and it is backed, where memory free for long may not be. Only free
    memory is touched (1 GiB is left): evicting warm sources from the page
    cache would make the next operation read them from disk.
    """
    nbytes = min(nbytes, max(0, _free() - 1024**3))
    if nbytes <= 0:
        return
    m = mmap.mmap(-1, nbytes)
    try:
        for off in range(0, nbytes, mmap.PAGESIZE):
            m[off] = 1
    finally:
        m.close()


def hold_order() -> int:
    """One above the buddy allocator's largest block order (11 with 4 KiB pages).

    No free block is that large, so none is reported: holding the order at the
    largest block (10) still let every block free for longer than the delay
    be reported (measured here: over 20 GiB during a 12-minute run). The orders are
    the columns of ``/proc/buddyinfo``; 11 when it cannot be read.
    """
    try:
        with open(BUDDYINFO) as f:
            fields = f.readline().split()
    except OSError:
        fields = []
    orders = len(fields) - 4  # "Node 0, zone DMA" then one count per order
    return orders if orders > 0 else 11


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def _write(path: str, value: str) -> bool:
    try:
        with open(path, "w") as f:
            f.write(value)
    except OSError:
        return False
    return True


def _first_taken(path: str, values) -> str | None:
    """Write the first of ``values`` the kernel takes; that value, or None."""
    for value in values:
        if _write(path, str(value)):
            return str(value)
    return None


def _holder() -> dict | None:
    """The state a hold recorded (its pid and the settings to put back), or None."""
    try:
        with open(STATE) as f:
            state = json.load(f)
        return {k: state[k] for k in ("pid", "delay", "order")}
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, TypeError):
        return True
    return True


def _looks_held(delay: str, order: str | None) -> bool:
    """The settings are those a hold writes: a recorded holder whose pid is alive but
    whose settings are gone is stale (its pid reused by another process)."""
    held = {str(ms) for ms in HOLD_FREE_MS}
    return delay in held or (order or "").isdigit() and int(order) >= hold_order() - 1


def _restore(delay: str, order: str | None) -> None:
    """Put both settings back; say so on stderr where the kernel refuses one."""
    for path, value in ((PAGE_REPORTING, delay), (PAGE_REPORTING_ORDER, order)):
        if value is not None and _read(path) != value and not _write(path, value):
            print(f"free-page reporting: could not put {path} back to {value}", file=sys.stderr)
    with contextlib.suppress(OSError):
        os.remove(STATE)


@contextlib.contextmanager
def hold_free_pages(back: bool = False) -> Iterator[str | None]:
    """Keep freed memory in the guest while measuring, where a VM reports it to its host.

    As root, for the measure, the smallest reported block is raised above
    the largest the allocator makes (``onnx_light.bench.free_pages.hold_order``),
    so no block is reported at all, and the delay before a free block is
    reported is raised to 300 s (600 s is refused here): holding only the
    delay, or the order at the largest block (4 MiB), still let every block
    free for longer than the delay be reported. Where the kernel refuses the order, the largest block
    is held instead, and the sentence says so. Both are put back after.

    The settings to put back are recorded first in ``/run`` with this
    process's pid: a hold inside a live hold (another measurement, or a
    nested call) leaves the settings alone, and a hold after a killed one
    puts back the settings the killed one found.

    Args:
        back: also touch all free memory once (1 GiB left), so no operation
            of the measure is the first to fault a page in from the host.
            It takes 1 to 7 s per GiB; a long suite (``make bench``) asks for
            it, a short A/B does not.

    Yields:
        A sentence saying what was changed, or None when nothing could be
        (not root, or no free-page reporting on this machine).
    """
    delay, order = _read(PAGE_REPORTING), _read(PAGE_REPORTING_ORDER)
    if delay is None:
        yield None
        return
    holder = _holder()
    if holder is not None and _alive(holder["pid"]) and _looks_held(delay, order):
        yield (
            f"Free-page reporting to the host already held by process {holder['pid']} "
            f"(delay {delay} ms, order {order}) during the run."
        )
        return
    if holder is not None:  # a killed hold: what it found is what goes back
        delay, order = holder["delay"], holder["order"]
    state = {"pid": os.getpid(), "delay": delay, "order": order}
    if not _write(STATE, json.dumps(state)):
        yield None  # not root: the settings cannot be written either
        return
    try:
        raised = hold_order()
        held_order = None
        if order is not None:
            held_order = _first_taken(PAGE_REPORTING_ORDER, (raised, raised - 1))
        held_delay = _first_taken(PAGE_REPORTING, HOLD_FREE_MS)
        if held_delay is None and held_order is None:
            yield None
            return
        said = []
        if held_delay is not None:
            said.append(f"delayed from {delay} ms to {held_delay} ms")
        if held_order == str(raised):
            said.append(
                f"its smallest reported block raised from order {order} to {raised}, "
                "above the largest the allocator makes (no block is reported)"
            )
        elif held_order is not None:
            said.append(
                f"its smallest reported block raised from order {order} to {held_order}, "
                f"the largest block (order {raised} was refused: blocks free for longer "
                "than the delay are still reported)"
            )
        text = "Free-page reporting to the host, during the run (restored after): "
        text += f"{', and '.join(said)}; so freed memory stays backed."
        if back:
            free = _free()
            prime(free)
            text += (
                f" All free memory ({free / 1024**3:.1f} GiB less 1 GiB) was touched once first, "
                "so no measured operation is the first to fault it in from the host."
            )
        yield text
    finally:
        _restore(delay, order)
