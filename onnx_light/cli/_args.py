"""The command line's arguments: byte counts checked by the library's rules, outputs,
the flags every writing command shares and the settings object they make, the
progress bar."""

from __future__ import annotations

import argparse
import re
import sys
import time

from onnx_light._progress import Progress
from onnx_light.onnx import WriteOptions, check_setting

__all__ = [
    "add_layout_flags",
    "add_write_flags",
    "alignment_arg",
    "chunk_arg",
    "limit_arg",
    "naming_arg",
    "output_arg",
    "shard_arg",
    "size_arg",
    "with_progress",
    "write_options",
]


_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}


# ASCII digits, then K, M, G or T with an optional i, then an optional B, in
# any case. re.ASCII: no other digits (int() takes them, and '_'), and no
# KELVIN SIGN for K (it matches 'k' when case-folded in Unicode mode).
_SIZE = re.compile(r"(-?)([0-9]+)(?:([KMGT])I?)?B?", re.ASCII | re.IGNORECASE)


def _byte_count(text: str) -> int:
    """Parse a byte count: ``4096``, ``64K``, ``4M``, ``1GiB`` (powers of 1024).

    A leading ``-`` is read, so that the range checks can say what the bound is.

    Raises:
        argparse.ArgumentTypeError: ``text`` is not a byte count.
    """
    match = _SIZE.fullmatch(text.strip())
    try:
        if match is None:
            raise ValueError(text)
        sign, digits, unit = match.groups()
        value = int(digits)  # ValueError past sys.get_int_max_str_digits() digits
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a byte count: {text!r}") from None
    return value * _UNITS[(unit or "").upper()] * (-1 if sign else 1)


def _setting(name: str):
    """An argparse type: a byte count checked by the library's own rule for the
    setting ``name`` (:func:`~onnx_light.onnx.check_setting`: one validation for the
    API and the command line), its error a usage error."""

    def parse(text: str) -> int:
        value = _byte_count(text)
        try:
            check_setting(name, value)
        except (TypeError, ValueError) as e:
            reason = e.args[0].split(" must ", 1)[-1]
            raise argparse.ArgumentTypeError(f"must {reason} ({text!r})") from None
        return value

    parse.__name__ = name  # argparse names the type in its messages
    return parse


def limit_arg(name: str):
    """An argparse type: a positive number checked by the library's own rule for the
    clipping limit ``name`` (``min_positive_val``, ``max_finite_val``:
    :func:`~onnx_light.onnx.check_setting`), its error a usage error."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"{text!r}: must be a positive number")
        try:
            check_setting(name, value)
        except (TypeError, ValueError) as e:
            reason = e.args[0].removeprefix(f"{name}={value!r} ")
            raise argparse.ArgumentTypeError(f"{text!r} {reason}") from None
        return value

    parse.__name__ = name  # argparse names the type in its messages
    return parse


size_arg = _setting("size_threshold")


alignment_arg = _setting("alignment")  # 0 stays 0 (dense), as given


chunk_arg = _setting("chunk_size")


shard_arg = _setting("max_shard_size")


def naming_arg(text: str) -> str:
    """A shard naming, checked by the library's own rule (``onnx-ir``, ``transformers.js``)."""
    try:
        return check_setting("shard_naming", text)
    except ValueError as e:
        raise argparse.ArgumentTypeError("must " + e.args[0].split(" must ", 1)[-1]) from None


def output_arg(text: str) -> str:
    """An output path: ``-`` is refused (it would name a file, not stdout)."""
    if text == "-":
        raise argparse.ArgumentTypeError(
            "'-': writing to stdout is not supported, name a file (./- for a file named '-')"
        )
    return text


def write_options(args: argparse.Namespace, progress=None) -> WriteOptions:
    """The settings object of a writing command, built once from the flags it shares
    with the others (:func:`add_layout_flags`, :func:`add_write_flags`)."""
    return WriteOptions(
        alignment=args.alignment,
        size_threshold=args.size_threshold,
        max_shard_size=args.max_shard_size,
        shard_naming=args.shard_naming,
        chunk_size=args.chunk_size,
        durable=args.durable,
        drop_behind=args.drop_behind,
        remove_unreferenced=args.prune,
        progress=progress,
    )


def with_progress(args: argparse.Namespace, label: str, call):
    """``call(options)`` with the settings of the flags (:func:`write_options`) and a
    progress bar on a terminal (not with ``-q``).

    Returns:
        ``(what the call returned, seconds it took)``.
    """
    show = not args.quiet and sys.stderr.isatty()
    progress = Progress(label) if show else None
    start = time.perf_counter()
    try:
        result = call(write_options(args, progress))
    finally:
        if progress is not None:
            progress.close()
    return result, time.perf_counter() - start


def add_write_flags(p: argparse.ArgumentParser, models: str) -> None:
    """The flags of every command that writes models: --prune, --durable,
    --drop-behind, -q."""
    p.add_argument(
        "--prune",
        action="store_true",
        help=f"in place: delete the weights files the old {models} used and no .onnx of the "
        "folder references any more (listed either way)",
    )
    p.add_argument(
        "--durable",
        action="store_true",
        help="flush the new files and their folder to the disk before returning (fsync), "
        "even into a new folder; in place (replacing files) it is always done",
    )
    p.add_argument(
        "--drop-behind",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="drop the copied ranges from the page cache as the copy goes (written to disk "
        "first), so the rest of the cache stays; default: when the copy exceeds the "
        "memory available (MemAvailable, or the memory cgroup's room); the source's ranges "
        "only when it is not in the page cache (a copy of 64 MiB or more)",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar, no summary")


def add_layout_flags(
    p: argparse.ArgumentParser,
    *,
    weights: str,
    threshold: int | None,
    threshold_help: str,
    shard_example: str,
) -> None:
    """The flags of every command that lays out weights, declared once: --weights,
    --alignment, --chunk-size, --size-threshold, --max-shard-size, --shard-naming.

    Args:
        p: the command's parser.
        weights: what --weights names, and its default.
        threshold: --size-threshold's default (None: the library's, per command).
        threshold_help: what --size-threshold does for this command.
        shard_example: the name of a shard this command writes.
    """
    p.add_argument("--weights", type=output_arg, metavar="PATH", help=weights)
    p.add_argument(
        "--alignment",
        type=alignment_arg,
        default=4096,
        metavar="BYTES",
        help="a power of two, or 0 for none (default: 4096)",
    )
    p.add_argument(
        "--chunk-size",
        type=chunk_arg,
        default=4 * 1024 * 1024,
        metavar="BYTES",
        help="bytes per copy call, e.g. 4M (default: 4 MiB)",
    )
    p.add_argument(
        "--size-threshold",
        type=size_arg,
        default=threshold,
        metavar="BYTES",
        help=threshold_help,
    )
    p.add_argument(
        "--max-shard-size",
        type=shard_arg,
        default=None,
        metavar="BYTES",
        help="split the weights into files of at most BYTES each, e.g. 2G, named as onnx-ir "
        f"names them ({shard_example}); a larger tensor is alone in its file",
    )
    p.add_argument(
        "--shard-naming",
        type=naming_arg,
        default=None,
        metavar="NAMING",
        help="how shards are named: onnx-ir (default: model-00001-of-00003.onnx.data; in "
        "place, the naming the model's shards follow) or transformers.js (model.onnx_data, "
        "model.onnx_data_1, ...: the names its loader derives, at most 100 files; the "
        "weights default to DST_data)",
    )
