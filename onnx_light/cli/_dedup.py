"""``onnx-light dedup``: models that share one weights file, each distinct tensor once."""

from __future__ import annotations

import argparse
import os

from onnx_light._progress import human, rate
from onnx_light.onnx import DedupResult, deduplicate_external_data

from ._args import (
    add_layout_flags,
    add_write_flags,
    with_progress,
)
from ._files import IN_OWN_FOLDER, add_with_files_flag, exporter_files, files_notes
from ._text import aligned, left_over, percent, plural, printable

__all__ = ["add_parser"]


def cmd_dedup(args: argparse.Namespace) -> int:
    """Run ``onnx-light dedup``.

    Args:
        args: the parsed arguments (sources, out, in_place, weights,
            alignment, chunk_size, size_threshold, max_shard_size, reuse,
            prune, with_files, quiet).

    Returns:
        The exit code, 0.

    Raises:
        ValueError: two sources share a name with ``--out``, the folder is
            missing, or ``--out`` is the sources' own folder.
        ExternalDataError: with ``--with-files``, a file of the sources'
            folders links outside them (or has several hard links): refused
            by name, before anything is written.
    """
    srcs, dsts = args.sources, _dedup_destinations(args)
    extra = exporter_files(srcs) if args.out else []
    weights = args.weights  # None: the library's default (in place, the name already used)
    label = os.path.basename(srcs[0]) if len(srcs) == 1 else f"{len(srcs)} models"
    result, elapsed = with_progress(
        args,
        f"dedup {label}",
        lambda options: deduplicate_external_data(
            srcs,
            dsts,
            weights,
            options=options,
            reuse=args.reuse,
            with_files=extra if args.with_files else (),
        ),
    )
    if not args.quiet:
        print(_dedup_summary(args, result, len(srcs), elapsed))
        for line in _out_notes(args, dsts, extra, result):
            print(line)
    return 0


def _out_notes(
    args: argparse.Namespace, dsts: list[str], extra: list[str], result: DedupResult
) -> list[str]:
    """What ``dedup --out`` named otherwise, and the exporter's files: copied, or not."""
    lines = []
    renamed = [
        f"{printable(s)} -> {printable(os.path.basename(d))}"
        for s, d in zip(args.sources, dsts, strict=True)
        if os.path.basename(s) != os.path.basename(d)
    ]
    if renamed:
        lines.append(f"written as: {', '.join(renamed)}")
    if args.in_place:
        return [IN_OWN_FOLDER] if args.with_files else []
    folder = args.out or os.path.dirname(dsts[0])
    return lines + files_notes(args.with_files, extra, result, folder)


def _dedup_destinations(args: argparse.Namespace) -> list[str]:
    """One destination per source: itself (``--in-place``), or ``DIR/<name>``: the name
    given (``--names``), else its file name, else, when two sources share a file name
    (onnxruntime-genai writes every model as ``model.onnx`` in a folder of its own),
    ``<its folder's name>_<its file name>``."""
    if args.in_place:
        if args.names:
            raise ValueError("--names names the models written with --out, not in place")
        return list(args.sources)
    folder = args.out
    if not os.path.isdir(folder):
        what = "is not a folder" if os.path.exists(folder) else "does not exist"
        raise ValueError(f"--out {folder}: {what} (create the folder first)")
    names = _output_names(args.sources, args.names)
    dsts = [os.path.join(folder, name) for name in names]
    for src, dst in zip(args.sources, dsts, strict=True):
        if os.path.basename(src) == os.path.basename(dst) and _same_folder(src, folder):
            raise ValueError(
                f"--out {folder} is the folder of {src}: the models would replace themselves; "
                "pass --in-place instead to deduplicate them in place"
            )
        invented = not args.names and os.path.basename(src) != os.path.basename(dst)
        if invented and os.path.lexists(dst):  # a name the user never gave replaces nothing
            raise ValueError(
                f"{src} would be written as {dst}, which exists: name the outputs with --names, "
                "or remove it"
            )
    return dsts


def _same_folder(src: str, folder: str) -> bool:
    """True when ``folder`` is the folder ``src`` lies in (links resolved)."""
    try:
        return os.path.samefile(os.path.dirname(os.path.abspath(src)), folder)
    except OSError:
        return False


def _output_names(sources: list[str], given: list[str] | None) -> list[str]:
    """The file names of the models ``dedup --out`` writes.

    Raises:
        ValueError: ``--names`` does not give one plain ``.onnx`` name per source,
            or two sources would get one name.
    """
    if given:
        if len(given) != len(sources):
            n = len(given)
            raise ValueError(f"--names gives {n} {plural(n, 'name')} for {len(sources)} models")
        bad = [n for n in given if os.path.basename(n) != n or not n.endswith(".onnx")]
        if bad:
            raise ValueError(f"--names {bad[0]}: a file name ending in .onnx, without a folder")
        names = list(given)
    else:
        names = [os.path.basename(s) for s in sources]
        if len(set(names)) < len(names):  # genai's layout: model.onnx in each folder
            names = [
                f"{os.path.basename(os.path.dirname(os.path.abspath(s)))}_{os.path.basename(s)}"
                for s in sources
            ]
    seen: dict[str, str] = {}
    for src, name in zip(sources, names, strict=True):
        if name in seen:
            fix = "give each model its own name" if given else "name the outputs with --names"
            raise ValueError(
                f"{seen[name]} and {src} would both be written as {name}: {fix} "
                "(one .onnx name per model)"
            )
        seen[name] = src
    return names


def _dedup_summary(
    args: argparse.Namespace, result: DedupResult, models: int, elapsed: float
) -> str:
    """What ``dedup`` did, a few lines (from the result: nothing is read again)."""
    before, saved = result.bytes_before, result.bytes_saved
    plural = "model" if models == 1 else "models"
    if saved >= 0:
        gain = f"{percent(saved, before)} saved ({saved} of {before} bytes)"
    else:
        gain = (
            f"nothing saved: {-saved} bytes more than before (alignment padding; "
            "--alignment 0 packs the tensors densely)"
        )
    lines = [
        f"deduplicated {models} {plural} in {elapsed:.2f} s ({rate(before, elapsed)} of tensors "
        f"read): {human(before)} of tensors -> "
        f"{human(result.bytes_written)} written + {human(result.bytes_reused)} reused, {gain}"
    ]
    shared = sum(len(g) for g in result.groups)
    if result.groups:
        ranges = (
            "1 range is" if len(result.groups) == 1 else f"{len(result.groups)} ranges are each"
        )
        lines.append(f"{ranges} read by several tensors ({shared} tensors)")
    else:
        lines.append("no two tensors hold the same bytes: each keeps its own range")
    if result.transposed:
        several = models > 1

        def name(t: tuple[str, str]) -> str:
            model, tensor = t
            return f"{os.path.basename(model)}:{tensor}" if several else tensor

        pairs = ", ".join(f"{name(a)!r} / {name(b)!r}" for a, b, _ in result.transposed[:3])
        more = f" and {len(result.transposed) - 3} more" if len(result.transposed) > 3 else ""
        nbytes = sum(n for _, _, n in result.transposed)
        twins = "twin" if len(result.transposed) == 1 else "twins"
        lines.append(
            f"{len(result.transposed)} transposed {twins} kept ({human(nbytes)}; "
            f"sharing them needs a graph change): {printable(pairs)}{more}"
        )
    if result.weights_paths:
        where = printable(result.weights_paths[0])
        if len(result.weights_paths) > 1:
            where = f"{len(result.weights_paths)} shards ({where}, ...)"
        lines.append(f"weights: {where} {aligned(args.alignment)}")
    elif result.bytes_reused:
        lines.append("weights: none written, every tensor points into a reused file")
    else:
        lines.append(
            f"weights: none written, no tensor of {args.size_threshold} bytes or more to move "
            "(smaller ones stay in their model)"
        )
    if args.prune and not args.in_place:
        lines.append("--prune: nothing to prune, the sources were not replaced (not in place)")
    lines.extend(left_over(result))
    return "\n".join(lines)


def add_parser(sub) -> None:
    """Declare ``onnx-light dedup`` on the subcommands ``sub``."""
    p = sub.add_parser(
        "dedup",
        help="write models that share one weights file, each distinct tensor stored once",
        description="Compare the tensors of every SRC by content (lengths, then samples, then "
        "bytes compared chunk by chunk) and write models that all reference one weights file "
        "in which each distinct byte string is stored once, at aligned offsets: an exporter's "
        "decoder and decoder-with-past, or tied weights in one model. Names, dtypes and shapes "
        "do not matter, equal bytes do. Weights never sit in RAM. Every output model and the "
        "weights are committed together: an error leaves every old file as it was. A 2-D tensor "
        "stored as the transpose of another is reported, not shared.",
    )
    p.add_argument("sources", nargs="+", metavar="SRC.onnx", help="the models to deduplicate")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument(
        "--out",
        metavar="DIR",
        help="write each model to DIR/<its file name> (DIR must exist; see --names)",
    )
    p.add_argument(
        "--names",
        nargs="+",
        metavar="NAME",
        help="with --out: the file name of each output model, one per SRC, in order "
        "(default: each source's file name; when two share one, as onnxruntime-genai's "
        "folders do, FOLDER_FILE: int4_model.onnx for int4/model.onnx)",
    )
    add_with_files_flag(p, "with --out")
    where.add_argument(
        "--in-place",
        action="store_true",
        help="replace every SRC (all in one folder); the old weights files are listed, or "
        "deleted with --prune",
    )
    add_layout_flags(
        p,
        weights="the shared weights file, inside the destination folder: a path from the "
        "current folder or from that folder (default: in place, the name the weights already "
        "have when the models read one file, e.g. model.onnx_data; else weights.data, or "
        "with one model its name + .data, e.g. model.onnx.data)",
        threshold=1024,
        threshold_help="inline tensors of at least BYTES move to the weights file and are "
        "compared; smaller ones stay in their model (default: 1K)",
        shard_example="weights-00001-of-00003.data",
    )
    p.add_argument(
        "--reuse",
        action="append",
        default=[],
        metavar="FILE.safetensors",
        help="a .safetensors file of the destination folder that already holds weights "
        "(repeatable; a path from the current folder, e.g. out/model.safetensors): a tensor "
        "whose bytes are a whole tensor of it points into it instead of being written; the "
        "file is only read",
    )
    add_write_flags(p, "models")
    p.set_defaults(func=cmd_dedup)
