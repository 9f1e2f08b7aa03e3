"""The kernel's memory counters of this process (``/proc/self/status``)."""

from __future__ import annotations

_FIELDS = ("VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem")


def read_status() -> dict[str, int]:
    """Memory counters of this process from ``/proc/self/status``, in bytes.

    Returns:
        ``VmRSS``, ``VmHWM``, ``RssAnon``, ``RssFile``, ``RssShmem`` (those the
        kernel reports); an empty dict where ``/proc`` is missing.
    """
    out: dict[str, int] = {}
    try:
        with open("/proc/self/status") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in _FIELDS:
                    out[key] = int(rest.split()[0]) * 1024
    except OSError:
        pass
    return out
