"""Every internal link of the built site resolves (``_doc/check_links.py``).

The check of the site itself runs in ``make doc``, right after the build
(``.ci/run`` calls ``make test`` before ``make doc``, so under ``make test`` from
a clean clone there is no site to check and its test here is skipped, saying
so). Here: the checker finds what it must, ``make doc`` does run it, and a site
already built is checked too.
"""

from __future__ import annotations

import importlib.util
import os

import pytest

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
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


def test_make_doc_checks_the_links_of_the_site_it_builds():
    """The site's links are checked where the site is built: ``make doc``."""
    with open(os.path.join(ROOT, "Makefile")) as f:
        text = f.read()
    recipe = text.split("\ndoc:", 1)[1].split("\n\n", 1)[0]
    build = next(line for line in recipe.splitlines() if "sphinx" in line)
    check = next(line for line in recipe.splitlines() if "check_links.py" in line)
    assert "_doc/_build/html" in build and check.split()[-2:] == [
        "_doc/check_links.py",
        "_doc/_build/html",
    ]
    assert recipe.index(build) < recipe.index(check), "checked after the build"


@pytest.mark.skipif(
    not os.path.exists(f"{SITE}/index.html"),
    reason="the site is not built (make test runs before make doc): make doc builds it "
    "and checks its links with _doc/check_links.py",
)
def test_built_site_has_no_dead_internal_link():
    """A site left by an earlier ``make doc``: its links still resolve."""
    assert _checker().dead_links(SITE) == []
