"""``onnx-light convert``: a model converted to float16, its weights streamed."""

from __future__ import annotations

import argparse
import os

from onnx_light._progress import human, rate
from onnx_light.onnx import ConvertResult, convert_float_to_float16

from ._args import add_layout_flags, add_write_flags, limit_arg, output_arg
from ._files import add_with_files_flag, run_one_model
from ._text import aligned, left_over, plural, printable

__all__ = ["add_parser"]

TARGETS = ("float16",)  # bfloat16: the bytes convert, but no onnxruntime build runs the graph


def _target(text: str) -> str:
    if text not in TARGETS:
        raise argparse.ArgumentTypeError(
            f"--to {text!r}: only float16 is supported (a graph tool that writes bfloat16 "
            "can save through onnx_light.onnx.save_edited, whose bytes follow the dtype)"
        )
    return text


class _Limit(argparse.Action):
    """Stores a clipping limit, and refuses ``--min-positive-val`` above
    ``--max-finite-val`` whichever is given first (the other then holds its
    default, or the value given before): a usage error naming both."""

    def __call__(self, parser, namespace, values, _option_string=None) -> None:
        setattr(namespace, self.dest, values)
        low, high = namespace.min_positive_val, namespace.max_finite_val
        if low > high:
            raise argparse.ArgumentError(
                self,
                f"--min-positive-val {low:g} is above --max-finite-val {high:g}: every "
                "weight would be clipped to one of them; give --min-positive-val a value at "
                "most --max-finite-val's",
            )


def cmd_convert(args: argparse.Namespace) -> int:
    """Run ``onnx-light convert``.

    Args:
        args: the parsed arguments.

    Returns:
        The exit code, 0.
    """
    return run_one_model(
        args,
        "convert",
        lambda options, files: convert_float_to_float16(
            args.src,
            args.dst,
            args.weights,
            keep_io_types=args.keep_io_types,
            op_block_list=args.op_block_list,
            node_block_list=args.node_block_list,
            min_positive_val=args.min_positive_val,
            max_finite_val=args.max_finite_val,
            options=options,
            with_files=files,
        ),
        _summary,
    )


def _summary(args: argparse.Namespace, result: ConvertResult, elapsed: float) -> str:
    """What ``convert`` did, each line saying what it counts: the source's tensors by
    place, those converted and kept (why), where they went, MiB read -> written, the
    time, the values clipped."""
    src, dst = printable(os.path.basename(args.src)), printable(os.path.basename(args.dst))
    inline = result.tensors - result.source_external
    lines = [
        f"source {src}: {result.tensors} {plural(result.tensors, 'tensor')}, "
        + (
            "all inline (no external data)"
            if not result.source_external
            else f"{result.source_external} external, {inline} inline"
        ),
        _converted(result, dst),
        _placed(args, result, src, dst),
    ]
    if result.weights_paths:
        lines.append(
            f"{human(result.bytes_read)} of weights read -> {human(result.bytes_written)} "
            f"written, in {elapsed:.2f} s ({rate(result.bytes_read, elapsed)})"
        )
    else:
        lines[-1] += f", in {elapsed:.2f} s"
    if result.clipped:
        worst = sorted(result.clipped.items(), key=lambda kv: -kv[1])[:3]
        names = ", ".join(f"{printable(name)} ({count})" for name, count in worst)
        more = "" if len(result.clipped) <= 3 else f", and {len(result.clipped) - 3} more"
        lines.append(
            f"clipped {result.values_clipped} {plural(result.values_clipped, 'value')} to "
            f"float16's range (--min-positive-val, --max-finite-val) in "
            f"{len(result.clipped)} {plural(len(result.clipped), 'tensor')}: {names}{more}"
        )
    else:
        lines.append("no value clipped: every weight fits float16's range")
    if args.prune and os.path.abspath(args.src) != os.path.abspath(args.dst):
        lines.append("--prune: nothing to prune, the source was not replaced (not in place)")
    return "\n".join(lines + left_over(result))


def _converted(result: ConvertResult, dst: str) -> str:
    """``float16: N tensors converted (M of them inline in DST), K kept as they were (why)``."""
    converted = result.converted + result.converted_inline
    line = f"float16: {converted} {plural(converted, 'tensor')} converted"
    if result.converted_inline:
        line += f" ({result.converted_inline} of them inline in {dst})"
    kept = sum(result.kept.values())
    if not kept:
        return line + ", none kept"
    why = []
    floats = result.kept.get("FLOAT", 0)
    if floats:
        why.append(
            f"{floats} float32 by the rules: --op-block-list, --node-block-list, inputs "
            "that stay float32"
        )
    others = [f"{n} {dtype}" for dtype, n in result.kept.items() if dtype != "FLOAT"]
    if others:
        why.append(f"not float32: {', '.join(others)}")
    return f"{line}, {kept} kept as they were ({'; '.join(why)})"


def _placed(args: argparse.Namespace, result: ConvertResult, src: str, dst: str) -> str:
    """Where the tensors went: the weights file (external in the source, moved out of
    it), or inline in DST."""
    placed = result.source_external + result.moved_out
    threshold = 1024 if args.size_threshold is None else args.size_threshold
    moved = f"moved out of {src} (inline ones of {threshold} bytes or more, --size-threshold)"
    if not result.weights_paths:
        return (
            f"no weights file: all {result.tensors} stay inline in {dst} (none external, "
            f"none of {threshold} bytes or more)"
        )
    where = printable(os.path.basename(result.weights_paths[0]))
    if len(result.weights_paths) > 1:
        where = f"{len(result.weights_paths)} shards ({where}, ...)"
    tensors = f"{placed} {plural(placed, 'tensor')}"
    if not result.moved_out:
        came = f"{tensors}, external in the source"
    elif not result.source_external:
        came = f"{tensors} {moved}"
    else:
        came = (
            f"{tensors}: {result.source_external} external in the source, "
            f"{result.moved_out} {moved}"
        )
    stay = result.tensors - placed
    return f"{where}: {came}, {aligned(args.alignment)}; {stay} stay inline in {dst}"


def add_parser(sub) -> None:
    """Declare ``onnx-light convert`` on the subcommands ``sub``."""
    p = sub.add_parser(
        "convert",
        help="convert a model to float16, streaming its weights (never in RAM)",
        description="Convert SRC's graph to float16 with the rules of onnxruntime's own "
        "converter, on the model read without its weights; its float32 weights are clipped "
        "and cast while they stream into DST's weights file.",
    )
    p.add_argument("src", metavar="SRC.onnx", help="the float32 model")
    p.add_argument(
        "dst", type=output_arg, metavar="DST.onnx", help="the new model (may be SRC: in place)"
    )
    p.add_argument("--to", type=_target, required=True, metavar="DTYPE", help="float16")
    p.add_argument(
        "--keep-io-types",
        action="store_true",
        help="keep the graph's float32 inputs and outputs (Cast nodes after and before them)",
    )
    p.add_argument(
        "--op-block-list",
        nargs="+",
        default=None,
        metavar="OP",
        help="op types left in float32 (default: onnxruntime's DEFAULT_OP_BLOCK_LIST)",
    )
    p.add_argument(
        "--node-block-list", nargs="+", default=None, metavar="NAME", help="nodes left in float32"
    )
    p.add_argument(
        "--min-positive-val",
        type=limit_arg("min_positive_val"),
        action=_Limit,
        default=5.96e-08,
        metavar="X",
        help="smaller magnitudes become X, from 5.96e-08 to 65504 (default 5.96e-08, "
        "float16's smallest subnormal)",
    )
    p.add_argument(
        "--max-finite-val",
        type=limit_arg("max_finite_val"),
        action=_Limit,
        default=65504.0,
        metavar="X",
        help="larger finite magnitudes become X, from 5.96e-08 to 65504 (default 65504, "
        "float16's largest)",
    )
    add_layout_flags(
        p,
        weights="the new weights file, inside DST's folder (default: DST.data)",
        threshold=1024,
        threshold_help="inline tensors of at least BYTES move to the weights file, smaller "
        "ones stay in DST; external ones stay external (default: 1024)",
        shard_example="model-00001-of-00003.onnx.data",
    )
    add_with_files_flag(p, "when DST is in another folder")
    add_write_flags(p, "model")
    p.set_defaults(func=cmd_convert)
