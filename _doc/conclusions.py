"""The conclusions a built site states, and whether two builds state the same ones.

Every ranking the gallery prints comes from
:meth:`benchmarks.harness.Comparison.sentence`: the words of the gallery
report (``benchmarks/results/gallery.json``, measured once by ``make
gallery-report``), "A was faster than B: ..." or "A and B are within this
machine's noise (gallery report: ...)", followed by where the build's own
ratio fell ("This build: 0.74x, inside the report's range 0.70x-0.81x", or
outside it, flagged), wrapped over lines indented by two spaces. A comparison the report lacks says so and gives the
build's own measurement, marked as such. This script reads them from the
built pages and compares two builds::

    python _doc/conclusions.py _doc/_build/html                 # list them
    python _doc/conclusions.py first/html _doc/_build/html      # compare two builds

Two builds agree on a conclusion when they state the same words (the report's
words, numbers included); for a comparison the report lacks, when the build's
own verdict (who ranks first, or no ranking) is the same. What each build
measured itself (its ratio, inside or outside the report's range) is listed,
not compared. Exit code 1 when a conclusion differs between the two builds
(other words, a ranking reversed, or stated in one build and not in the
other), or when a site states none.
"""

from __future__ import annotations

import html
import os
import re
import sys
from typing import NamedTuple

_CTX = r"^(?:(?P<ctx>.+?): )?"
_REPORT = {
    "ranked": re.compile(
        _CTX + r"(?P<a>.+?) (?:was faster than|used less than) (?P<b>.+?): (?P=b) "
        r"(?:took|used) .*\(gallery report: the median of \d+ per-round ratios"
    ),
    "noise": re.compile(
        _CTX + r"(?P<a>.+?) and (?P<b>.+?) are within this machine's noise \(gallery report: "
    ),
}
_UNREPORTED = re.compile(
    _CTX + r"(?P<a>.+?) / (?P<b>.+?): no entry in the gallery report .*?"
    r"This build's own measurement, not the report's: (?P<own>.*)$"
)
_OWN = {
    "ranked": re.compile(r"^(?P<a>.+?) (?:was faster than|used less than) (?P<b>.+?): (?P=b) "),
    "noise": re.compile(r"^(?P<a>.+?) \([^()]*\) and (?P<b>.+?) \([^()]*\) are within this "),
    "too few rounds": re.compile(
        r"^(?P<a>.+?) \([^()]*\) and (?P<b>.+?) \([^()]*\) were measured in too few"
    ),
}
_BUILD = " This build"


class Conclusion(NamedTuple):
    """One conclusion a page states.

    Attributes:
        context: what the pair is compared in ("load"), or "".
        pair: the two names, sorted.
        verdict: ``"NAME first"``, ``"noise"`` or ``"too few rounds"``.
        words: what two builds must share: the report's words, or, for a
            comparison the report lacks, the build's own verdict.
        source: ``"report"``, or ``"this build"`` when the report lacks it.
        build: what the build measured itself (its ratio, inside or outside the
            report's range), or ``""``.
    """

    context: str
    pair: tuple[str, str]
    verdict: str
    words: str
    source: str
    build: str


def read(line: str) -> Conclusion | None:
    """The conclusion one line of output states, None if it states none."""
    line = line.strip()
    stated, _, build = line.partition(_BUILD)
    for kind, pattern in _REPORT.items():
        if build and (m := pattern.match(stated)):
            verdict = f"{m['a']} first" if kind == "ranked" else "noise"
            pair = tuple(sorted((m["a"], m["b"])))
            return Conclusion(m["ctx"] or "", pair, verdict, stated, "report", "This build" + build)
    if m := _UNREPORTED.match(line):
        for kind, pattern in _OWN.items():
            if own := pattern.match(m["own"]):
                verdict = f"{own['a']} first" if kind == "ranked" else kind
                pair = tuple(sorted((m["a"], m["b"])))
                return Conclusion(m["ctx"] or "", pair, verdict, verdict, "this build", m["own"])
    return None


def logical_lines(text: str) -> list[str]:
    """The lines of an output, a sentence wrapped over several lines joined back into one
    (:meth:`~benchmarks.harness.Comparison.sentence` indents its next lines by two spaces)."""
    lines: list[str] = []
    for line in text.splitlines():
        if lines and line.startswith("  ") and line.strip():
            lines[-1] += " " + line.strip()
        else:
            lines.append(line)
    return lines


def verdict(sentence: str) -> tuple[tuple[str, str], str] | None:
    """``((first name, second name) sorted, verdict)`` of one sentence, None if it is none."""
    c = read(sentence)
    return None if c is None else (c.pair, c.verdict)


def conclusions(site: str) -> dict[tuple[str, str, tuple[str, str]], Conclusion]:
    """``{(page, context, pair): conclusion}`` for every gallery page of a built site."""
    found = {}
    for root, _, files in os.walk(os.path.join(site, "auto_examples")):
        for name in sorted(files):
            if not name.endswith(".html"):
                continue
            page = os.path.relpath(os.path.join(root, name), site)
            with open(os.path.join(root, name), encoding="utf-8") as f:
                text = html.unescape(re.sub(r"<[^>]+>", "", f.read()))
            for line in logical_lines(text):
                if (c := read(line)) is not None:
                    found[(page, c.context, c.pair)] = c
    return found


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 2):
        print(__doc__)
        return 2
    builds = [conclusions(site) for site in argv]
    for site, found in zip(argv, builds, strict=True):
        if not found:
            print(f"{site}: no gallery conclusion found (is it a built site?)")
            return 1
    keys = sorted(set().union(*builds))
    differ = 0
    for page, context, pair in keys:
        got = [b.get((page, context, pair)) for b in builds]
        same = None not in got and len({c.words for c in got}) == 1
        differ += not same
        shown = [
            "(absent)"
            if c is None
            else c.verdict
            + (" (this build only: not in the report)" if c.source != "report" else "")
            for c in got
        ]
        mark = "" if same else "   <-- differs"
        if not same and None not in got and len(set(shown)) == 1:
            mark += " (same verdict, other words)"
        lead = f"{context}: " if context else ""
        print(f"{page}: {lead}{pair[0]} / {pair[1]}: " + " | ".join(shown) + mark)
    for site, found in zip(argv, builds, strict=True):
        outside = sum("outside the report's range" in c.build for c in found.values())
        own = sum(c.source != "report" for c in found.values())
        print(
            f"{site}: {len(found)} conclusion(s), {own} not in the report, {outside} "
            "measured outside the report's range (flagged on the page)"
        )
    print(f"{len(keys)} conclusion(s), {differ} differing between the builds")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
