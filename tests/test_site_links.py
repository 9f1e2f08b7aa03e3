"""Every internal link of the built site resolves (``_doc/check_links.py``, run by ``make doc``)."""

from __future__ import annotations

import importlib.util
import os

import pytest

ROOT = os.path.join(os.path.dirname(__file__), "..")
SITE = os.path.join(ROOT, "_doc", "_build", "html")


def _checker():
    spec = importlib.util.spec_from_file_location("check_links", f"{ROOT}/_doc/check_links.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_checker_finds_missing_pages_and_anchors(tmp_path):
    (tmp_path / "api").mkdir()
    (tmp_path / "api" / "x.html").write_text('<h1 id="here">x</h1>')
    (tmp_path / "index.html").write_text(
        '<a href="api/x.html#here">ok</a> <a href="api/x.html#gone">anchor</a> '
        '<a href="nope.html">page</a> <a href="https://example.org/#x">external</a>'
    )
    dead = _checker().dead_links(str(tmp_path))
    assert dead == [
        "index.html: api/x.html#gone (no such anchor)",
        "index.html: nope.html (no such file)",
    ]


@pytest.mark.skipif(not os.path.exists(f"{SITE}/index.html"), reason="the site is not built")
def test_built_site_has_no_dead_internal_link():
    assert _checker().dead_links(SITE) == []
