"""The computed conclusions of a built site, and whether two builds agree.

Every ranking the gallery prints comes from
:meth:`onnx_light.bench.Comparison.sentence`, in one of four forms: "A was
faster than B", "A used less than B", "A and B are within this machine's
noise", "A and B were measured in too few rounds to rank them". This script
reads them from the built pages, keeps their verdict (who ranks first, or no
ranking) without the numbers, and compares two builds::

    python _doc/conclusions.py _doc/_build/html                 # list them
    python _doc/conclusions.py first/html _doc/_build/html      # compare two builds

Exit code 1 when a conclusion differs between the two builds (a ranking
reversed, or stated in one build and not in the other).
"""

from __future__ import annotations

import html
import os
import re
import sys

_FASTER = re.compile(r"^(?P<a>.+?) (?P<verb>was faster than|used less than) (?P<b>.+?): ")
_NOISE = re.compile(r"^(?P<a>.+?) \([^()]*\) and (?P<b>.+?) \([^()]*\) are within this machine")
_FEW = re.compile(r"^(?P<a>.+?) \([^()]*\) and (?P<b>.+?) \([^()]*\) were measured in too few")


def verdict(sentence: str) -> tuple[tuple[str, str], str] | None:
    """``((first name, second name) sorted, verdict)`` of one sentence, None if it is none.

    The verdict is ``"NAME first"`` for a ranking, ``"noise"`` or
    ``"too few rounds"`` otherwise.
    """
    sentence = sentence.strip()
    if m := _FASTER.match(sentence):
        return tuple(sorted((m["a"], m["b"]))), f"{m['a']} first"
    if m := _NOISE.match(sentence):
        return tuple(sorted((m["a"], m["b"]))), "noise"
    if m := _FEW.match(sentence):
        return tuple(sorted((m["a"], m["b"]))), "too few rounds"
    return None


def conclusions(site: str) -> dict[tuple[str, tuple[str, str]], str]:
    """``{(page, pair): verdict}`` for every gallery page of a built site."""
    found = {}
    for root, _, files in os.walk(os.path.join(site, "auto_examples")):
        for name in sorted(files):
            if not name.endswith(".html"):
                continue
            page = os.path.relpath(os.path.join(root, name), site)
            with open(os.path.join(root, name), encoding="utf-8") as f:
                text = html.unescape(re.sub(r"<[^>]+>", "", f.read()))
            for line in text.splitlines():
                # a line of an output block may carry a prefix ("load: ...")
                for part in (line, line.split(": ", 1)[-1]):
                    v = verdict(part)
                    if v is not None:
                        found[(page, v[0])] = v[1]
                        break
    return found


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 2):
        print(__doc__)
        return 2
    builds = [conclusions(site) for site in argv]
    keys = sorted(set().union(*builds))
    differ = 0
    for page, pair in keys:
        values = [b.get((page, pair), "(absent)") for b in builds]
        same = len(set(values)) == 1
        differ += not same
        mark = "" if same else "   <-- differs"
        print(f"{page}: {pair[0]} / {pair[1]}: " + " | ".join(values) + mark)
    print(f"{len(keys)} conclusion(s), {differ} differing between the builds")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
