"""``onnx-light verify``: every reference checked, and what each loader will do."""

from __future__ import annotations

import argparse
import json
import os
import sys

from onnx_light.onnx import LoaderVerdict, SharedRange, VerifyResult, verify_models

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
    report = verify_models(args.model)
    if args.json:
        models = [_result_json(result) for result in report.models]
        shared = [_range_json(r) for r in report.shared_ranges]
        print(json.dumps({"models": models, "shared": shared}, indent=2))
        return 0 if report.valid else 1
    for result in report.models:
        for p in result.problems:
            print(printable(p))
        model = printable(result.model)
        count = result.external_tensors
        if result.problems:
            n = len(result.problems)
            print(
                f"{PROG}: error: {n} {plural(n, 'problem')} with external references in {model}",
                file=sys.stderr,
            )
        elif result.loadable:
            print(
                f"OK {model}: {count} external tensors, every reference valid "
                "(onnx, onnxruntime and onnx-ir load it)"
            )
        else:
            print(f"OK {model}: {count} external tensors, every reference valid")
            for line in _loader_lines(result):
                print(printable(line))
    if report.shared_ranges:
        across = " of these models" if len(report.models) > 1 else ""
        print(f"{sharing(report.shared_ranges, across)}: valid, each range is stored once")
    return 0 if report.valid else 1


def _result_json(result: VerifyResult) -> dict:
    """``verify --json``'s entry for one model."""
    return {
        "model": result.model,
        "external_tensors": result.external_tensors,
        "problems": list(result.problems),
        "loaders": [_verdict_json(v) for v in result.loaders],
        "fix": _loaders_fix(result),
    }


def _verdict_json(v: LoaderVerdict) -> dict:
    return {"loader": v.loader, "rule": v.rule, "accepts": v.accepts, "reasons": list(v.reasons)}


def _range_json(r: SharedRange) -> dict:
    tensors = [{"model": m, "name": n} for m, n in r.tensors]
    return {"location": r.location, "offset": r.offset, "length": r.length, "tensors": tensors}


def _loaders_fix(result: VerifyResult) -> str | None:
    """The command that writes a copy every loader accepts, when one refuses."""
    if result.loadable:
        return None
    return f"{PROG} align {result.model} DIR/{os.path.basename(result.model)}"


def _loader_lines(result: VerifyResult) -> list[str]:
    """What each loader will do with a valid model one of them refuses, and the fix."""
    lines = [
        f"  {v.rule}: accepts" if v.accepts else f"  {v.rule}: refuses: {'; '.join(v.reasons)}"
        for v in result.loaders
    ]
    fix = _loaders_fix(result)
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
