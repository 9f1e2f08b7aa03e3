"""``onnx-light align``: re-align a model into a new pair, or in place."""

from __future__ import annotations

import argparse
import os

from onnx_light._progress import human, rate
from onnx_light.onnx import AlignResult, align_external_data_streaming

from ._args import (
    add_layout_flags,
    add_write_flags,
    output_arg,
    size_arg,
)
from ._files import add_with_files_flag, run_one_model
from ._text import aligned, left_over, plural, printable

__all__ = ["add_parser"]


def cmd_align(args: argparse.Namespace) -> int:
    """Run ``onnx-light align``.

    Args:
        args: the parsed arguments (src, dst, weights, alignment, chunk_size,
            size_threshold, quiet).

    Returns:
        The exit code, 0.
    """
    return run_one_model(
        args,
        "align",
        lambda options, files: align_external_data_streaming(
            args.src,
            args.dst,
            args.weights,
            options=options,
            with_files=files,
            inline_below=args.inline_below,
            rewrite=args.rewrite,
        ),
        _align_summary,
    )


def _align_summary(args: argparse.Namespace, result: AlignResult, elapsed: float) -> str:
    """What ``align`` did, in one or two lines (from the result: nothing is read again)."""
    note = ""
    if args.size_threshold is None and result.threshold is not None:
        note = (
            f"single-file model: inline tensors of {result.threshold} bytes or more moved "
            "(--size-threshold sets another limit)\n"
        )
    if not result.rewritten:
        files = ", ".join(printable(os.path.basename(p)) for p in result.weights_paths)
        return (
            f"{printable(args.dst)} is already as this align would write it ({result.moved} "
            f"{plural(result.moved, 'tensor')} in {files}, offsets multiples of "
            f"{args.alignment}): nothing written "
            "(--rewrite writes it again)"
        )
    if not result.moved:
        limit = "" if result.threshold is None else f" of {result.threshold} bytes or more"
        line = (
            f"{note}no tensor{limit} to move: wrote {printable(args.dst)} alone, "
            f"no weights file, in {elapsed:.2f} s"
        )
        return "\n".join([line, *_more(result, args)])
    where = printable(result.weights_paths[0])
    if len(result.weights_paths) > 1:
        where = f"{len(result.weights_paths)} shards ({where}, ...)"
    typed = f" ({result.typed} from typed fields such as float_data)" if result.typed else ""
    lines = [
        f"{note}wrote {result.bytes_written} bytes ({human(result.bytes_written)}) for "
        f"{result.moved} tensors{typed} to {where} {aligned(args.alignment)} in {elapsed:.2f} s "
        f"({rate(result.bytes_written, elapsed)})"
    ]
    return "\n".join(lines + _more(result, args))


def _more(result: AlignResult, args: argparse.Namespace) -> list[str]:
    """The lines about tensors brought back inline and files left behind."""
    lines = []
    if args.prune and os.path.abspath(args.src) != os.path.abspath(args.dst):
        lines.append("--prune: nothing to prune, the source was not replaced (not in place)")
    if result.inlined:
        lines.append(f"{result.inlined} small external tensors written inline (--inline-below)")
    return lines + left_over(result)


def add_parser(sub) -> None:
    """Declare ``onnx-light align`` on the subcommands ``sub``."""
    p = sub.add_parser(
        "align",
        help="copy a model into a new (.onnx, weights) pair with aligned offsets",
        description="Stream every external tensor of SRC into ONE weights file, each at an "
        "offset multiple of --alignment; write DST pointing at it. Weights never sit in RAM.",
    )
    p.add_argument("src", metavar="SRC.onnx", help="the model to re-align")
    p.add_argument(
        "dst", type=output_arg, metavar="DST.onnx", help="the new model (may be SRC: in place)"
    )
    add_layout_flags(
        p,
        weights="the new weights file, inside DST's folder: a path from the current folder "
        "(out/w.data) or from DST's folder (w.data) (default: in place, the name the weights "
        "already have, e.g. model.onnx_data; else DST.data, e.g. model.onnx.data)",
        threshold=None,
        threshold_help="also move inline tensors of at least BYTES into the weights file",
        shard_example="model-00001-of-00003.onnx.data",
    )
    p.add_argument(
        "--inline-below",
        type=size_arg,
        default=None,
        metavar="BYTES",
        help="write external tensors smaller than BYTES inline in DST (onnxruntime refuses "
        "some small inputs, a shape or axes, stored as external data)",
    )
    p.add_argument(
        "--rewrite",
        action="store_true",
        help="in place, write the files again even when they already are as this align would "
        "write them (by default nothing is written then)",
    )
    add_with_files_flag(p, "when DST is in another folder")
    add_write_flags(p, "model")
    p.set_defaults(func=cmd_align)
