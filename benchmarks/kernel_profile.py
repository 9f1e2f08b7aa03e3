"""Where the kernel spends a copy: ``perf record`` of one worker, top kernel symbols.

``make bench`` profiles ``shutil.copyfile`` and the re-align on each
filesystem once (not measured: a profiled run is slower), and the report
lists the kernel functions that took most of the kernel's samples. That is
what the benchmarks page uses to say where the time goes: memory copies on
ext4 and XFS, the filesystem's own bookkeeping of buffered writes on btrfs.
Skipped, with the reason, where ``perf`` is missing or not allowed.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = 5
_LINE = re.compile(r"^\s*([\d.]+)%\s+\[k\]\s+(\S+)")


def unavailable() -> str | None:
    """Why perf cannot profile the kernel here, or None."""
    if shutil.which("perf") is None:
        return "perf not found (install linux-perf)"
    try:
        with open("/proc/sys/kernel/perf_event_paranoid") as f:
            paranoid = int(f.read())
    except (OSError, ValueError):
        paranoid = 2
    if paranoid > 1 and os.geteuid() != 0:
        return "kernel profiling not allowed (perf_event_paranoid > 1, not root)"
    return None


def kernel_profile(op: str, workdir: str, size: str) -> list[tuple[str, float]] | str:
    """Run ``op`` once under ``perf record``; return its top kernel symbols.

    Returns:
        ``[(symbol, percent of the kernel's samples)]``, the largest first,
        or a string saying why there is none.
    """
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "perf.data")
        cmd = [sys.executable, os.path.join(HERE, "worker.py"), op, workdir, size]
        env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
        rec = subprocess.run(
            ["perf", "record", "-q", "-o", data, "--", *cmd], capture_output=True, env=env
        )
        if rec.returncode != 0:
            return f"perf record failed ({rec.returncode})"
        rep = subprocess.run(
            ["perf", "report", "-i", data, "--stdio", "--no-children", "--sort", "sym"],
            capture_output=True,
            text=True,
        )
    found = [
        (m.group(2), float(m.group(1))) for m in map(_LINE.match, rep.stdout.splitlines()) if m
    ]
    kernel = sum(p for _, p in found)
    if not kernel:
        return "no kernel samples"
    found.sort(key=lambda sp: -sp[1])
    return [(sym, 100 * p / kernel) for sym, p in found[:TOP]]


def markdown(profiles: dict[str, dict[str, object]], note: str | None) -> str:
    """The report's section: one line per filesystem and operation."""
    lines = ["## Where the kernel spends the copy (perf)", ""]
    if note:
        return "\n".join([*lines, f"Not profiled: {note}.", ""])
    lines += [
        f"One profiled run per operation (`perf record`, not timed); the {TOP} kernel "
        "functions with most samples, as a share of the kernel's samples.",
        "",
        "| filesystem | operation | top kernel functions |",
        "|---|---|---|",
    ]
    for fs, per_op in profiles.items():
        for op, top in per_op.items():
            text = top if isinstance(top, str) else ", ".join(f"`{s}` {p:.0f}%" for s, p in top)
            lines.append(f"| {fs} | {op} | {text} |")
    return "\n".join([*lines, ""])
