"""A pytest plugin for the suite under a simulated platform (``-p simulated_skips``):
the tests whose subject differs there, skipped with the reason.

Two kinds: what the platform does otherwise, as the platforms page says
(Windows has no folder lock, refuses to replace a file a session holds), and
tests that replace a system call the platform lacks to inject a fault (the
package never calls it there, so nothing is injected).
"""

from __future__ import annotations

import os

import pytest

PLATFORM = os.environ.get("ONNX_LIGHT_SIMULATE", "")
WINDOWS = {
    # Windows's own rules, on the platforms page
    "test_session_opened_before_an_in_place_align_keeps_working": "Windows refuses to replace "
    "a file an onnxruntime session maps: the commit fails, named (tests/platforms checks it)",
    "test_racing_saves_forced_interleaving": "no folder lock on Windows",
    "test_racing_saves_in_processes": "no folder lock on Windows",
    "test_concurrent_in_place_aligns_and_readers": "no folder lock on Windows",
    "test_racing_saves_and_aligns_in_threads": "no folder lock on Windows",
    # faults injected through calls Windows lacks
    "test_disk_full_leaves_nothing": "injects ENOSPC through os.pwrite, which Windows lacks",
    "test_the_header_is_read_in_one_bounded_read_and_the_data_never": "counts os.pread calls",
    "test_more_data_files_than_descriptors": "lowers RLIMIT_NOFILE with resource, which "
    "Windows lacks (its C runtime allows 8,192 descriptors)",
    "test_a_cold_comparison_keeps_cached_only_what_the_copy_reads_next": "posix_fadvise, "
    "which Windows lacks",
}
MACOS = {
    "test_disk_full_leaves_nothing": "injects ENOSPC through copy_file_range and splice, "
    "which macOS lacks",
    "test_a_cold_comparison_keeps_cached_only_what_the_copy_reads_next": "posix_fadvise, "
    "which macOS lacks",
}


def pytest_collection_modifyitems(config, items):
    reasons = {"windows": WINDOWS, "windows-fat": WINDOWS, "macos": MACOS}.get(PLATFORM, {})
    for item in items:
        reason = reasons.get(item.originalname)
        if reason:
            item.add_marker(pytest.mark.skip(reason=f"simulated {PLATFORM}: {reason}"))
