"""OthersCpu: the CPU share the rest of the machine used, not the measurement's own.

The gallery report and the benchmark suite call a machine quiet from it; the
load average cannot tell, since it counts the measurement itself.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import benchmarks.harness.others as others_module
from benchmarks.harness import OthersCpu

SPIN = "import time\nend = time.process_time() + {s}\nwhile time.process_time() < end: pass\n"


def test_the_measurements_own_cpu_is_not_counted(monkeypatch):
    """Two CPUs, 10 s of wall time: 14 s busy, 8 s of them this process's and its children's."""
    ticks = iter([(0, 0), (1400, 2000)])  # busy, total (100 ticks a second, 2 CPUs)
    own = iter([5.0, 13.0])
    monkeypatch.setattr(others_module, "_cpu_ticks", lambda: next(ticks))
    monkeypatch.setattr(others_module, "_own_cpu", lambda: next(own))
    monkeypatch.setattr(os, "sysconf", lambda name: 100)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    with OthersCpu() as others:
        assert others.share is None
    assert others.share == pytest.approx(0.6)  # (14 - 8) s over 10 s


def test_no_proc_stat_gives_no_share(monkeypatch):
    monkeypatch.setattr(others_module, "_cpu_ticks", lambda: None)
    with OthersCpu() as others:
        pass
    assert others.share is None


@pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="no /proc/stat")
def test_a_process_it_does_not_wait_for_is_counted():
    """A spinner the block does not wait for is the rest of the machine: at least most
    of a CPU for the second it spins (others can only add to it)."""
    spinner = subprocess.Popen([sys.executable, "-c", SPIN.format(s=1.0)])
    try:
        with OthersCpu() as others:
            subprocess.run([sys.executable, "-c", "import time; time.sleep(1.2)"], check=True)
    finally:
        spinner.wait()
    assert others.share is not None and others.share >= 0.5
