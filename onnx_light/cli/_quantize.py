"""``onnx-light quantize``: a model's weights quantized to int4/int8, streamed."""

from __future__ import annotations

import argparse
import os

from onnx_light._progress import human, rate
from onnx_light.onnx import QuantizeResult, quantize_weights

from ._args import add_layout_flags, add_write_flags, output_arg
from ._files import add_with_files_flag, run_one_model
from ._text import aligned, left_over, plural, printable

__all__ = ["add_parser"]

OP_TYPES = ("MatMul", "Gemm", "Gather")
MAX_BLOCK = 256  # MLAS's largest block
SHOWN = 5  # skipped nodes named in the summary


def _block_size(text: str) -> int:
    try:
        value = int(text, 10)
    except ValueError:
        value = 0
    if value < 16 or value > MAX_BLOCK or value & (value - 1):
        raise argparse.ArgumentTypeError(
            f"{text!r}: a power of two, at least 16, at most {MAX_BLOCK} (16, 32, 64, 128, 256)"
        )
    return value


def _op_types(text: str) -> tuple[str, ...]:
    types = tuple(t.strip() for t in text.split(",") if t.strip())
    wrong = [t for t in types if t not in OP_TYPES]
    if wrong or not types:
        raise argparse.ArgumentTypeError(
            f"{text!r}: a comma-separated list among {', '.join(OP_TYPES)}"
        )
    return types


def cmd_quantize(args: argparse.Namespace) -> int:
    """Run ``onnx-light quantize``.

    Args:
        args: the parsed arguments.

    Returns:
        The exit code, 0.
    """
    return run_one_model(
        args,
        "quantize",
        lambda options, files: quantize_weights(
            args.src,
            args.dst,
            args.weights,
            bits=args.bits,
            block_size=args.block_size,
            symmetric=args.symmetric,
            accuracy_level=args.accuracy_level,
            nodes_to_exclude=args.exclude,
            op_types=args.op_types,
            options=options,
            with_files=files,
        ),
        _summary,
    )


def _summary(args: argparse.Namespace, result: QuantizeResult, elapsed: float) -> str:
    """What ``quantize`` did: nodes quantized, those left and why, MiB read -> written, time."""
    where = ", ".join(printable(os.path.basename(p)) for p in result.weights_paths) or "no file"
    n = len(result.quantized)
    scheme = "symmetric" if args.symmetric else "asymmetric"
    lines = [
        f"quantized {n} {plural(n, 'node')} ({result.weights} "
        f"{plural(result.weights, 'weight')}) to {args.bits} bits, blocks of "
        f"{args.block_size}, {scheme}: {human(result.bytes_read)} read -> "
        f"{human(result.bytes_written)} written to {where} {aligned(args.alignment)}, "
        f"in {elapsed:.2f} s ({rate(result.bytes_read, elapsed)})"
    ]
    if result.skipped:
        k = len(result.skipped)
        named = "; ".join(
            f"{printable(node)} ({printable(why)})"
            for node, why in list(result.skipped.items())[:SHOWN]
        )
        more = "" if k <= SHOWN else f"; and {k - SHOWN} more"
        lines.append(
            f"left {k} {plural(k, 'node')} as {'it was' if k == 1 else 'they were'}: {named}{more}"
        )
    if args.prune and os.path.abspath(args.src) != os.path.abspath(args.dst):
        lines.append("--prune: nothing to prune, the source was not replaced (not in place)")
    return "\n".join(lines + left_over(result))


def add_parser(sub) -> None:
    """Declare ``onnx-light quantize`` on the subcommands ``sub``."""
    p = sub.add_parser(
        "quantize",
        help="quantize a model's weights to int4/int8, streaming them (never in RAM)",
        description="Quantize SRC's MatMul weights (and, asked, Gemm and Gather ones) to 4 or "
        "8 bits in blocks, as onnxruntime's MatMulNBitsQuantizer does, bit for bit: the graph "
        "is changed on the model read without its weights, and each weight is read in slabs, "
        "quantized and written to DST's weights file.",
    )
    p.add_argument("src", metavar="SRC.onnx", help="the model")
    p.add_argument(
        "dst", type=output_arg, metavar="DST.onnx", help="the new model (may be SRC: in place)"
    )
    p.add_argument("--bits", type=int, choices=(4, 8), default=4, help="4 or 8 (default: 4)")
    p.add_argument(
        "--block-size",
        type=_block_size,
        default=128,
        metavar="N",
        help="weights per block along K, a power of two from 16 to 256 (default: 128)",
    )
    p.add_argument("--symmetric", action="store_true", help="no zero points (default: asymmetric)")
    p.add_argument(
        "--accuracy-level",
        type=int,
        choices=range(5),
        default=0,
        metavar="N",
        help="MatMulNBits's accuracy_level, 0 (not set) to 4 (int8 compute on the CPU)",
    )
    p.add_argument(
        "--exclude",
        action="append",
        default=[],
        metavar="NODE",
        help="a node left as it is (repeat for several); it must be a node of SRC",
    )
    p.add_argument(
        "--op-types",
        type=_op_types,
        default=("MatMul",),
        metavar="TYPES",
        help="the node types quantized, comma-separated among MatMul, Gemm, Gather "
        "(default: MatMul)",
    )
    add_layout_flags(
        p,
        weights="the new weights file, inside DST's folder (default: DST.data)",
        threshold=1024,
        threshold_help="inline tensors of at least BYTES move to the weights file, smaller "
        "ones stay in DST (default: 1024)",
        shard_example="model-00001-of-00003.onnx.data",
    )
    add_with_files_flag(p, "when DST is in another folder")
    add_write_flags(p, "model")
    p.set_defaults(func=cmd_quantize)
