"""Every internal link of the built site resolves: the page exists, and so does its anchor.

Run by ``make doc`` after the build (``python _doc/check_links.py _doc/_build/html``)
and by ``tests/docs/test_site_links.py`` on a site already built. External links
(``http``, ``https``, ``mailto``) are not followed: the build is offline.
"""

from __future__ import annotations

import os
import sys
from html.parser import HTMLParser
from urllib.parse import unquote, urldefrag, urlparse


class _Page(HTMLParser):
    """The ids a page defines and the links it holds."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.links: list[str] = []

    def handle_starttag(self, tag, attrs):
        found = dict(attrs)
        for key in ("id", "name"):
            if found.get(key):
                self.ids.add(found[key])
        if tag == "a" and found.get("href"):
            self.links.append(found["href"])


def _parse(path: str) -> _Page:
    page = _Page()
    with open(path, encoding="utf-8", errors="replace") as f:
        page.feed(f.read())
    return page


def dead_links(root: str) -> list[str]:
    """``page: link`` for every internal link of the site under ``root`` that does not resolve."""
    pages: dict[str, _Page] = {}
    for folder, _, names in os.walk(root):
        for name in names:
            if name.endswith(".html"):
                path = os.path.normpath(os.path.join(folder, name))
                pages[path] = _parse(path)
    dead = []
    for path, page in sorted(pages.items()):
        for link in page.links:
            parsed = urlparse(link)
            if parsed.scheme or link.startswith("//"):
                continue  # http, https, mailto: not followed offline
            target, anchor = urldefrag(link)
            target_path = (
                path
                if not target
                else os.path.normpath(os.path.join(os.path.dirname(path), unquote(target)))
            )
            if os.path.isdir(target_path):
                target_path = os.path.join(target_path, "index.html")
            if not os.path.exists(target_path):
                dead.append(f"{os.path.relpath(path, root)}: {link} (no such file)")
            elif anchor and target_path in pages and unquote(anchor) not in pages[target_path].ids:
                dead.append(f"{os.path.relpath(path, root)}: {link} (no such anchor)")
    return dead


def main(argv: list[str]) -> int:
    root = argv[1] if len(argv) > 1 else os.path.join("_doc", "_build", "html")
    dead = dead_links(root)
    for line in dead:
        print(f"dead link: {line}", file=sys.stderr)
    print(f"{len(dead)} dead internal link(s) in {root}")
    return 1 if dead else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
