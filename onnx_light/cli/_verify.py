"""``onnx-light verify``: every reference checked, and what each loader will do."""

from __future__ import annotations

import argparse
import json
import os
import sys

from onnx_light._inspect import verify_models
from onnx_light._loaders import loader_verdicts

from ._text import PROG, plural, printable, sharing

__all__ = ["add_parser", "cmd_verify"]


def cmd_verify(args: argparse.Namespace) -> int:
    """Run ``onnx-light verify``: one line per problem on stdout.

    With several models, each is checked; the ranges their tensors share
    (within and across them) are counted on the last line.

    Args:
        args: the parsed arguments (model: a list).

    Returns:
        0 when every reference is valid, else 1.
    """
    results, shared, found = verify_models(args.model)  # one pass: the loaders judge its pairs
    verdicts = [loader_verdicts(path, pairs) for path, pairs in zip(args.model, found, strict=True)]
    failed = sum(1 for _, problems in results if problems)
    if args.json:
        models = [
            {
                "model": path,
                "external_tensors": count,
                "problems": problems,
                "loaders": [v.as_dict() for v in found],
                "fix": _loaders_fix(path, found),
            }
            for path, (count, problems), found in zip(args.model, results, verdicts, strict=True)
        ]
        print(json.dumps({"models": models, "shared": shared}, indent=2))
        return 1 if failed else 0
    for path, (count, problems), found in zip(args.model, results, verdicts, strict=True):
        for p in problems:
            print(printable(p))
        model = printable(path)
        if problems:
            print(
                f"{PROG}: error: {len(problems)} {plural(len(problems), 'problem')} with "
                f"external references in {model}",
                file=sys.stderr,
            )
        elif all(v.accepts for v in found):
            print(
                f"OK {model}: {count} external tensors, every reference valid "
                "(onnx, onnxruntime and onnx-ir load it)"
            )
        else:
            print(f"OK {model}: {count} external tensors, every reference valid")
            for line in _loader_lines(path, found):
                print(printable(line))
    if shared:
        across = " of these models" if len(args.model) > 1 else ""
        print(f"{sharing(shared, across)}: valid, each range is stored once")
    return 1 if failed else 0


def _loaders_fix(path: str, verdicts: list) -> str | None:
    """The command that writes a copy every loader accepts, when one refuses."""
    if all(v.accepts for v in verdicts):
        return None
    return f"{PROG} align {path} DIR/{os.path.basename(path)}"


def _loader_lines(path: str, verdicts: list) -> list[str]:
    """What each loader will do with a valid model one of them refuses, and the fix."""
    lines = [
        f"  {v.rule}: accepts" if v.accepts else f"  {v.rule}: refuses: {'; '.join(v.reasons)}"
        for v in verdicts
    ]
    fix = _loaders_fix(path, verdicts)
    return [*lines, f"  {fix} writes a copy every loader accepts (plain files, one link each)"]


def add_parser(sub) -> None:
    """Declare ``onnx-light verify`` on the subcommands ``sub``."""
    p = sub.add_parser(
        "verify",
        help="check that every external reference is valid",
        description="Check every external reference: the file exists and stays inside the "
        "model's folder, the range fits in it and matches dtype x dims. Exit 0 when all "
        "are valid, else 1 with one line per problem. Ranges read by several tensors are "
        "counted, not refused: sharing is valid. Says whether onnx, onnxruntime and onnx-ir "
        "will load each model (their rules for symbolic and hard links differ), and how to "
        "write a copy they all accept.",
    )
    p.add_argument(
        "model",
        nargs="+",
        metavar="MODEL.onnx",
        help="one model, or several (exit 1 when any has a problem)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print a JSON document instead: per model its problems, each loader's verdict "
        "and the fix",
    )
    p.set_defaults(func=cmd_verify)
