"""The published words: the pages' claims and recipes, the site's links, the gallery.

Every test in this folder is marked ``docs``: ``-m "not docs"`` leaves them out;
``pytest tests --ignore=tests/lab`` and ``make test`` run them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    for item in items:
        if HERE in Path(item.path).resolve().parents:
            item.add_marker(pytest.mark.docs)
