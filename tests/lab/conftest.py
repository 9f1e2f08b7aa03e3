"""The lab: the benchmarks' harness, the reports and figures it makes, and the rule
that a measurement never changes the machine.

Every test in this folder is marked ``lab``: ``pytest tests --ignore=tests/lab`` (or
``-m "not lab"``) runs the library's tests without it; ``make test`` runs it too.
"""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    for item in items:
        if HERE in Path(item.path).resolve().parents:
            item.add_marker(pytest.mark.lab)
