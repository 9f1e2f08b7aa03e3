"""Print the mutation score of ``make mutate`` and fail below the target.

The score is killed / (total - equivalent), per module and in all, read from
the results mutmut leaves in ``mutants/`` and from the committed list of
equivalent mutants (``lint/equivalent_mutants.toml``). Each entry of that list
names a mutant and records its change (the lines it alters, as this script
prints them); an entry whose mutant no longer makes that change (the code
moved, mutmut renumbered) is reported as stale and not counted as equivalent,
so the list cannot silently excuse a new mutant.

Usage: ``python lint/mutation_score.py [--min 95] [--show]``, run from the
project folder after ``mutmut run``; ``--show`` prints the change of each
mutant that survived and is not listed (what to kill, or to list with a reason).
"""

from __future__ import annotations

import argparse
import ast
import difflib
import json
import sys
from collections import Counter
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python 3.10: the mutate extra installs tomli
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
MUTANTS = ROOT / "mutants"
EQUIVALENT = ROOT / "lint" / "equivalent_mutants.toml"

KILLED = {1, 3}  # pytest failed (3: an internal error, counted as a kill by mutmut)
SURVIVED = {0}
TIMEOUT = {36, 24, -24, 152, 255}  # mutmut's timeout codes (SIGXCPU)
NO_TESTS = {5, 33}


def status(code: int | None) -> str:
    if code is None:
        return "not checked"
    if code in KILLED:
        return "killed"
    if code in SURVIVED:
        return "survived"
    if code in TIMEOUT:
        return "timeout"
    if code in NO_TESTS:
        return "no tests"
    return "suspicious"


def results() -> dict[str, dict[str, int | None]]:
    """{module: {mutant: exit code}} from mutmut's ``.meta`` files."""
    out = {}
    for meta in sorted(MUTANTS.rglob("*.py.meta")):
        module = meta.relative_to(MUTANTS).as_posix()[: -len(".meta")]
        out[module] = json.loads(meta.read_text())["exit_code_by_key"]
    return out


def _functions(path: Path) -> dict[str, list[str]]:
    """{function name: its source lines, stripped, its own name left out} of a mutated file."""
    text = path.read_text()
    lines = text.splitlines()
    out = {}
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and "__mutmut_" in node.name:
            body = [line.strip() for line in lines[node.lineno - 1 : node.end_lineno]]
            body[0] = body[0].replace(node.name, "", 1)  # the def line: mutants differ in name
            out[node.name] = body
    return out


def change(mutant: str, functions: dict[str, list[str]]) -> str:
    """The lines ``mutant`` alters, ``-`` old and ``+`` new, stripped (its stable description)."""
    name = mutant.rsplit(".", 1)[1]
    orig = functions.get(name.rsplit("__mutmut_", 1)[0] + "__mutmut_orig")
    new = functions.get(name)
    if orig is None or new is None:
        return "?"
    diff = difflib.unified_diff(orig, new, lineterm="", n=0)
    return "\n".join(
        line for line in diff if line[:1] in "+-" and not line.startswith(("+++", "---"))
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--min", type=float, default=95.0, help="the target score, in percent")
    parser.add_argument("--show", action="store_true", help="print each unlisted survivor")
    args = parser.parse_args(argv)
    found = results()
    if not found:
        print("no mutmut results in mutants/: run `make mutate` (or `mutmut run`) first")
        return 2
    listed = {e["mutant"]: e for e in tomllib.loads(EQUIVALENT.read_text())["equivalent"]}
    missing_reason = [m for m, e in listed.items() if not e.get("reason", "").strip()]
    if missing_reason:
        print(f"equivalent mutants without a reason: {missing_reason}")
        return 2
    rows, stale, unlisted = [], [], []
    total = Counter()
    for module, codes in found.items():
        functions = _functions(MUTANTS / module)
        count = Counter()
        for mutant, code in codes.items():
            state = status(code)
            entry = listed.get(mutant)
            if entry is not None:
                if change(mutant, functions) != entry["change"].strip():
                    stale.append(mutant)
                elif state != "killed":
                    state = "equivalent"
            count[state] += 1
            if state in ("survived", "timeout", "suspicious", "no tests", "not checked"):
                unlisted.append((mutant, state, change(mutant, functions)))
        count["total"] = len(codes)
        rows.append((module, count))
        total.update(count)
    rows.append(("all", total))
    print(
        f"{'module':34} {'total':>6} {'killed':>7} {'survived':>9} {'equiv.':>7} "
        f"{'timeout':>8} {'other':>6} {'score':>7}"
    )
    for module, c in rows:
        other = c["total"] - c["killed"] - c["survived"] - c["equivalent"] - c["timeout"]
        counted = c["total"] - c["equivalent"]
        score = 100.0 * c["killed"] / counted if counted else 100.0
        print(
            f"{module:34} {c['total']:6} {c['killed']:7} {c['survived']:9} "
            f"{c['equivalent']:7} {c['timeout']:8} {other:6} {score:6.1f}%"
        )
    for mutant in stale:
        print(f"stale entry (its mutant makes another change now): {mutant}")
    unused = [m for m in listed if not any(m in codes for codes in found.values())]
    for mutant in unused:
        print(f"listed but not generated: {mutant}")
    if args.show:
        for mutant, state, diff in unlisted:
            print(f"\n{state}: {mutant}\n{diff}")
    counted = total["total"] - total["equivalent"]
    score = 100.0 * total["killed"] / counted if counted else 100.0
    if score < args.min:
        print(f"mutation score {score:.1f}% is below {args.min:g}%")
        return 1
    print(f"mutation score {score:.1f}% (target {args.min:g}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
