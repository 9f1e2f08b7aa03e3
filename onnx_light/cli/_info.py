"""``onnx-light info``: every tensor, where its bytes live and how they are aligned."""

from __future__ import annotations

import argparse
import json
import os

from onnx_light._inspect import listed, model_info, shared_across, transposed_pairs
from onnx_light._progress import human

from ._args import size_arg
from ._text import plural, printable, sharing, table

__all__ = ["add_parser", "cmd_info"]


def cmd_info(args: argparse.Namespace) -> int:
    """Run ``onnx-light info``: print the tensor table, or JSON with ``--json``.

    With several models, each model's report in turn, then the ranges
    tensors of several models read (JSON: ``{"models": [...],
    "shared_ranges": [...], "transposed": ...}``).

    Args:
        args: the parsed arguments (model: a list, json, twins).

    Returns:
        The exit code, 0.
    """
    infos = [model_info(path) for path in args.model]
    several = len(infos) > 1
    shared = shared_across(infos) if several else infos[0]["shared_ranges"]
    infos = [listed(info, args.external, args.min_size) for info in infos]
    # None: not looked for (it reads the weights); []: looked for, none found
    transposed = transposed_pairs(args.model) if args.twins else None
    if not several and transposed is not None:
        transposed = [{**p, "tensors": [t["name"] for t in p["tensors"]]} for p in transposed]
    if args.json:
        if several:
            doc = {"models": infos, "shared_ranges": shared, "transposed": transposed}
        else:
            doc = {**infos[0], "transposed": transposed}
        print(json.dumps(doc, indent=2))
        return 0
    for k, info in enumerate(infos):
        if k:
            print()
        _print_info(info)
    name = _tensor_namer(args.model)
    if shared:
        print()
        across = " of these models" if several else ""
        print(sharing(shared, across))
        ranges = [["location", "offset", "length", "read by"]]
        for r in shared:
            names = ", ".join(name(t) for t in r["tensors"])
            ranges.append([printable(r["location"]), str(r["offset"]), str(r["length"]), names])
        print(table(ranges, {1, 2}))
    if transposed is not None:
        print()
        found = len(transposed) or "none"
        print(f"transposed twins (2-D tensors stored as the transpose of another): {found}")
        for p in transposed:
            a, b = (name(t) for t in p["tensors"])
            print(f"  {a} / {b}: {p['length']} bytes each ({human(p['length'])})")
    return 0


def _tensor_namer(models: list[str]):
    """How tensors are shown: their name, prefixed by their model's file name
    (or path, when two models share a file name) when there are several models."""
    basenames = [os.path.basename(m) for m in models]
    unique = len(set(basenames)) == len(basenames)

    def name(t: str | dict) -> str:
        if isinstance(t, str):
            return printable(t)
        model = os.path.basename(t["model"]) if unique else t["model"]
        return printable(f"{model}:{t['name']}")

    return name


def _print_info(info: dict) -> None:
    """One model: a summary (tensors by place, bytes per file, alignment, shared ranges),
    the files, then the tensor table (as filtered)."""

    def cell(v: object, none: str = "-") -> str:
        return none if v is None else printable(str(v))

    for line in _info_summary(info):
        print(line)
    print()
    files = [["file", "tensors", "bytes", "file size"]]
    for f in info["files"]:
        size = f["file_size"]
        shown_size = "-" if size is None else f"{size} ({human(size)})"
        files.append(
            [
                cell(f["location"], "inline"),
                str(f["tensors"]),
                f"{f['bytes']} ({human(f['bytes'])})",
                "missing" if f.get("missing") else shown_size,
            ]
        )
    print(table(files, {1, 2, 3}))
    print()
    rows = [["name", "dtype", "shape", "location", "offset", "length", "offset 2^k"]]
    for t in info["tensors"]:
        inline = t["location"] is None
        pow2 = "-" if inline or not isinstance(t["offset"], int) else cell(t["offset_pow2"], "any")
        rows.append(
            [
                printable(t["name"]),
                t["dtype"],
                str(t["shape"]),
                cell(t["location"], "inline"),
                cell(t["offset"]),
                cell(t["length"]),
                pow2,
            ]
        )
    shown = info.get("listed", {})
    if shown.get("external_only") or shown.get("min_size"):
        what = " external" if shown.get("external_only") else ""
        size = f" of at least {shown['min_size']} bytes" if shown.get("min_size") else ""
        print(
            f"{len(info['tensors'])} of {info['tensor_count']} tensors listed:{what} tensors{size}"
        )
    print(table(rows, {4, 5, 6}))


def _info_summary(info: dict) -> list[str]:
    """The lines that lead ``info``: what a reader looks for first."""
    external_files = [f for f in info["files"] if f["location"] is not None]
    external_bytes = sum(f["bytes"] for f in external_files)
    count = len(external_files)
    lines = [
        f"{printable(info['model'])}: {info['tensor_count']} "
        f"{plural(info['tensor_count'], 'tensor')}, "
        f"{info['external_tensors']} external ({human(external_bytes)} in {count} "
        f"{plural(count, 'file')}), {info['inline_tensors']} inline "
        f"({human(info['inline_bytes'])})"
    ]
    if info["external_tensors"]:
        common = "any" if info["alignment"] is None else str(info["alignment"])
        lines.append(f"common alignment of external offsets: {common}")
    note = " (no external tensors)" if not info["external_tensors"] else ""
    for a, ok in info["aligned"].items():
        lines.append(f"aligned to {a}: {'yes' if ok else 'no'}{note}")
    shared = info["shared_ranges"]
    if shared:
        lines.append(f"{len(shared)} {plural(len(shared), 'range')} read by several tensors")
    for location in info["missing_files"]:
        lines.append(
            f"missing: {printable(location)} does not exist (onnx-light verify checks every "
            "reference)"
        )
    return lines


def add_parser(sub) -> None:
    """Declare ``onnx-light info`` on the subcommands ``sub``."""
    p = sub.add_parser(
        "info",
        help="list every tensor, where its bytes live and how they are aligned",
        description="A table of every tensor (name, dtype, shape, location, offset, length, "
        "the largest power of two dividing the offset), totals per file, whether "
        "the model is aligned to 4096 / 65536, and the ranges several tensors read "
        "(a deduplicated model). Weights are not read (but with --twins).",
    )
    p.add_argument(
        "model",
        nargs="+",
        metavar="MODEL.onnx",
        help="one model, or several: then the ranges their tensors share are listed too",
    )
    p.add_argument("--json", action="store_true", help="print a JSON document instead")
    p.add_argument(
        "--external",
        action="store_true",
        help="list only the external tensors (the summary and files still count every one)",
    )
    p.add_argument(
        "--min-size",
        type=size_arg,
        default=0,
        metavar="BYTES",
        help="list only the tensors of at least BYTES, e.g. 1K",
    )
    p.add_argument(
        "--twins",
        action="store_true",
        help="also look for 2-D tensors stored as the transpose of another (as dedup does): "
        "this reads their bytes, a few samples first, then tile by tile",
    )
    p.set_defaults(func=cmd_info)
