"""``onnx-light info``: where a model's bytes live and how they are aligned; its tensors,
largest first, on request."""

from __future__ import annotations

import argparse
import json
import os

from onnx_light._progress import human
from onnx_light.onnx import FileInfo, ModelInfo, SharedRange, TensorInfo, inspect_models

from ._args import size_arg
from ._text import plural, printable, sharing, table

__all__ = ["add_parser", "cmd_info"]

ALIGNMENTS = (4096, 65536)  # the alignments info says a model has or not
HINT_SIZE = 1024  # the --min-size the line under the files suggests


def cmd_info(args: argparse.Namespace) -> int:
    """Run ``onnx-light info``: print the summary and the files, the tensor table with
    ``--tensors`` (or a filter: ``--external``, ``--min-size``), or JSON with ``--json``
    (every tensor, or those the filters keep).

    With several models, each model's report in turn, then the ranges
    tensors of several models read (JSON: ``{"models": [...],
    "shared_ranges": [...], "transposed": ...}``).

    Args:
        args: the parsed arguments (model: a list, json, tensors, external,
            min_size, twins).

    Returns:
        The exit code, 0.
    """
    report = inspect_models(args.model, transposed=args.twins)
    several = len(report.models) > 1
    # one model: its own ranges (by location); several: by file, across them
    shared = report.shared_ranges if several else report.models[0].shared_ranges

    def listed(t: TensorInfo) -> bool:  # --external, --min-size: the table only
        return (t.location is not None or not args.external) and (
            not args.min_size or isinstance(t.length, int) and t.length >= args.min_size
        )

    if args.json:
        infos = [_model_json(info, listed, args.external, args.min_size) for info in report.models]
        # None: not looked for (it reads the weights); []: looked for, none found
        transposed = None
        if report.transposed is not None:
            transposed = [_pair_json(pair, several) for pair in report.transposed]
        if several:
            shared_json = [_range_json(r, several) for r in shared]
            doc = {"models": infos, "shared_ranges": shared_json, "transposed": transposed}
        else:
            doc = {**infos[0], "transposed": transposed}
        print(json.dumps(doc, indent=2))
        return 0
    table_asked = args.tensors or args.external or bool(args.min_size)
    for k, info in enumerate(report.models):
        if k:
            print()
        tensors = [t for t in info.tensors if listed(t)] if table_asked else None
        _print_info(info, tensors, args.external, args.min_size)
    name = _tensor_namer(args.model, several)
    if shared:
        print()
        across = " of these models" if several else ""
        print(sharing(shared, across))
        ranges = [["location", "offset", "length", "read by"]]
        for r in shared:
            names = ", ".join(name(t) for t in r.tensors)
            ranges.append([printable(r.location), str(r.offset), str(r.length), names])
        print(table(ranges, {1, 2}))
    if report.transposed is not None:
        print()
        found = len(report.transposed) or "none"
        print(f"transposed twins (2-D tensors stored as the transpose of another): {found}")
        for first, second, length in report.transposed:
            print(f"  {name(first)} / {name(second)}: {length} bytes each ({human(length)})")
    return 0


def _model_json(info: ModelInfo, listed, external_only: bool, min_size: int) -> dict:
    """``info --json``'s document for one model (its tensors as ``listed``)."""
    return {
        "model": info.model,
        "tensors": [_tensor_json(t) for t in info.tensors if listed(t)],
        "files": [_file_json(f) for f in info.files],
        "missing_files": list(info.missing_files),
        "tensor_count": len(info.tensors),
        "external_tensors": info.external_tensors,
        "inline_tensors": info.inline_tensors,
        "inline_bytes": info.inline_bytes,
        "alignment": info.alignment,
        "aligned": {str(a): info.aligned_to(a) for a in ALIGNMENTS},
        "shared_ranges": [_range_json(r, False) for r in info.shared_ranges],
        "listed": {"external_only": external_only, "min_size": min_size},
    }


def _tensor_json(t: TensorInfo) -> dict:
    return {
        "name": t.name,
        "path": t.path,
        "dtype": t.dtype,
        "shape": list(t.shape),
        "location": t.location,
        "offset": t.offset,
        "length": t.length,
        "offset_pow2": t.offset_pow2,
    }


def _file_json(f: FileInfo) -> dict:
    doc = {
        "location": f.location,
        "tensors": f.tensor_count,
        "bytes": f.tensor_bytes,
        "file_size": f.file_size,
    }
    if f.location is not None:
        doc["missing"] = f.missing
    return doc


def _range_json(r: SharedRange, several: bool) -> dict:
    """A shared range; its tensors by name for one model, by model and name for several."""
    tensors = [{"model": m, "name": n} if several else n for m, n in r.tensors]
    return {"location": r.location, "offset": r.offset, "length": r.length, "tensors": tensors}


def _pair_json(pair: tuple, several: bool) -> dict:
    first, second, length = pair
    tensors = [{"model": m, "name": n} if several else n for m, n in (first, second)]
    return {"tensors": tensors, "length": length}


def _tensor_namer(models: list[str], several: bool):
    """How tensors, ``(model, name)``, are shown: their name, prefixed by their model's
    file name (or path, when two models share a file name) when there are several."""
    basenames = [os.path.basename(m) for m in models]
    unique = len(set(basenames)) == len(basenames)

    def name(tensor: tuple[str, str]) -> str:
        model, shown = tensor
        if not several:
            return printable(shown)
        model = os.path.basename(model) if unique else model
        return printable(f"{model}:{shown}")

    return name


def _print_info(
    info: ModelInfo, tensors: list[TensorInfo] | None, external_only: bool, min_size: int
) -> None:
    """One model: a summary (tensors by place, bytes per file, alignment, shared ranges),
    the files, then the table of ``tensors`` (those listed), largest first; None: a line
    saying how to list them."""

    def cell(v: object, none: str = "-") -> str:
        return none if v is None else printable(str(v))

    for line in _info_summary(info):
        print(line)
    print()
    files = [["file", "tensors", "bytes", "file size"]]
    for f in info.files:
        size = f.file_size
        shown_size = "-" if size is None else f"{size} ({human(size)})"
        files.append(
            [
                cell(f.location, "inline"),
                str(f.tensor_count),
                f"{f.tensor_bytes} ({human(f.tensor_bytes)})",
                "missing" if f.missing else shown_size,
            ]
        )
    print(table(files, {1, 2, 3}))
    if tensors is None:
        print()
        print(_table_hint(info))
        return
    print()
    tensors = sorted(tensors, key=_largest_first)  # stable: equal sizes in the model's order
    rows = [["name", "dtype", "shape", "location", "offset", "length", "offset 2^k"]]
    for t in tensors:
        inline = t.location is None
        pow2 = "-" if inline or not isinstance(t.offset, int) else cell(t.offset_pow2, "any")
        rows.append(
            [
                printable(t.name),
                t.dtype,
                str(list(t.shape)),
                cell(t.location, "inline"),
                cell(t.offset),
                cell(t.length),
                pow2,
            ]
        )
    if external_only or min_size:
        what = " external" if external_only else ""
        size = f" of at least {min_size} bytes" if min_size else ""
        print(
            f"{len(tensors)} of {len(info.tensors)} tensors listed:{what} tensors{size}, "
            "largest first"
        )
    else:
        print(f"every tensor ({len(info.tensors)}), largest first")
    print(table(rows, {4, 5, 6}))


def _largest_first(t: TensorInfo) -> int:
    """The sort key of the tensor table: its length, descending; unknown ones last."""
    return -t.length if isinstance(t.length, int) else 1


def _table_hint(info: ModelInfo) -> str:
    """The line that says how to list the tensors, and how many a size filter keeps."""
    total = len(info.tensors)
    if not total:
        return "no tensor to list"
    large = sum(isinstance(t.length, int) and t.length >= HINT_SIZE for t in info.tensors)
    return (
        f"{total} {plural(total, 'tensor')} not listed: --tensors lists "
        f"{'it' if total == 1 else 'them'}, largest first; --min-size 1K lists the {large} "
        "of at least 1 KiB"
    )


def _info_summary(info: ModelInfo) -> list[str]:
    """The lines that lead ``info``: what a reader looks for first."""
    external_files = [f for f in info.files if f.location is not None]
    external_bytes = sum(f.tensor_bytes for f in external_files)
    count = len(external_files)
    total = len(info.tensors)
    lines = [
        f"{printable(info.model)}: {total} {plural(total, 'tensor')}, "
        f"{info.external_tensors} external ({human(external_bytes)} in {count} "
        f"{plural(count, 'file')}), {info.inline_tensors} inline "
        f"({human(info.inline_bytes)})"
    ]
    if info.external_tensors:
        common = "any" if info.alignment is None else str(info.alignment)
        lines.append(f"common alignment of external offsets: {common}")
    note = " (no external tensors)" if not info.external_tensors else ""
    for a in ALIGNMENTS:
        lines.append(f"aligned to {a}: {'yes' if info.aligned_to(a) else 'no'}{note}")
    shared = info.shared_ranges
    if shared:
        lines.append(f"{len(shared)} {plural(len(shared), 'range')} read by several tensors")
    for location in info.missing_files:
        lines.append(
            f"missing: {printable(location)} does not exist (onnx-light verify checks every "
            "reference)"
        )
    return lines


def add_parser(sub) -> None:
    """Declare ``onnx-light info`` on the subcommands ``sub``."""
    p = sub.add_parser(
        "info",
        help="show where a model's bytes live and how they are aligned; its tensors on request",
        description="A summary (tensors by place, whether the model is aligned to 4096 / "
        "65536), totals per file, and the ranges several tensors read (a deduplicated model). "
        "With --tensors (or --external, --min-size): a table of the tensors, largest first "
        "(name, dtype, shape, location, offset, length, the largest power of two dividing "
        "the offset). --json prints every tensor, in the model's order. Weights are not read "
        "(but with --twins).",
    )
    p.add_argument(
        "model",
        nargs="+",
        metavar="MODEL.onnx",
        help="one model, or several: then the ranges their tensors share are listed too",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print a JSON document instead, with every tensor in the model's order (or those "
        "--external and --min-size keep)",
    )
    p.add_argument(
        "--tensors",
        action="store_true",
        help="also print the table of every tensor, largest first",
    )
    p.add_argument(
        "--external",
        action="store_true",
        help="list only the external tensors (implies --tensors; the summary and files still "
        "count every one)",
    )
    p.add_argument(
        "--min-size",
        type=size_arg,
        default=0,
        metavar="BYTES",
        help="list only the tensors of at least BYTES, e.g. 1K (implies --tensors)",
    )
    p.add_argument(
        "--twins",
        action="store_true",
        help="also look for 2-D tensors stored as the transpose of another (as dedup does): "
        "this reads their bytes, a few samples first, then tile by tile",
    )
    p.set_defaults(func=cmd_info)
