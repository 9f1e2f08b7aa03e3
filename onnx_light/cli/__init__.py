"""The ``onnx-light`` command line (also ``python -m onnx_light``).

Six verbs on model files::

    onnx-light align SRC.onnx DST.onnx [--weights PATH] [--alignment 4096]
    onnx-light convert SRC.onnx DST.onnx --to float16 [--keep-io-types]
    onnx-light dedup SRC.onnx [SRC2.onnx ...] (--out DIR | --in-place) [--weights NAME]
    onnx-light info MODEL.onnx [MODEL2.onnx ...] [--json] [--twins]
    onnx-light quantize SRC.onnx DST.onnx [--bits 4] [--block-size 128] [--symmetric]
    onnx-light verify MODEL.onnx [MODEL2.onnx ...]

``align`` streams the weights into one aligned file without loading them,
``convert`` converts a model to float16, its weights cast as they stream,
``dedup`` writes models that share one weights file, each distinct byte
string once, ``quantize`` quantizes a model's weights to int4/int8 as they
stream (as onnxruntime's quantizer does), ``info`` lists every tensor and
where its bytes live (and the ranges several tensors read, within and
across the models given),
``verify`` checks every external reference. Errors print one line,
``onnx-light: error: ...``, on stderr: exit code 1 for a failure, 2 for bad
usage.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys

import onnx_light

from ._align import add_parser as add_align
from ._convert import add_parser as add_convert
from ._dedup import add_parser as add_dedup
from ._info import add_parser as add_info
from ._info import cmd_info
from ._quantize import add_parser as add_quantize
from ._text import PROG, printable
from ._verify import add_parser as add_verify
from ._verify import cmd_verify

__all__ = ["build_parser", "main"]


class _Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line (exit code 2)."""

    def error(self, message: str):  # type: ignore[override]
        # PROG, not self.prog ("onnx-light align"): every error line starts alike
        self.exit(2, f"{PROG}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The ``onnx-light`` argument parser, with its six subcommands.

    Returns:
        An :class:`argparse.ArgumentParser`; each subcommand sets ``func``.
    """
    parser = _Parser(
        prog=PROG,
        description="Inspect, check, re-align, deduplicate, convert and quantize ONNX models with "
        "external data, without loading their weights in memory.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {onnx_light.__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    for add_parser in (add_align, add_convert, add_dedup, add_info, add_quantize, add_verify):
        add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the ``onnx-light`` command.

    Args:
        argv: the arguments, without the program name (default: ``sys.argv[1:]``).

    Returns:
        The exit code: 0 on success, 1 on a failure, 2 on bad usage.
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help, --version, bad usage
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    try:
        return args.func(args)
    except BrokenPipeError:  # e.g. `onnx-light info --json m.onnx | head`
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except (OSError, ValueError) as e:
        return _fail(args, str(e))
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        _json_error(args, "interrupted")
        return 130
    except Exception as e:  # never a traceback, whatever the input file holds
        return _fail(args, f"unexpected {type(e).__name__}: {e}", " (please report it)")


def _fail(args: argparse.Namespace, message: str, hint: str = "") -> int:
    """Report a failure: one line on stderr (and JSON on stdout for ``info --json``).

    Returns:
        The exit code, 1.
    """
    print(f"{PROG}: error: {printable(message)}{hint}", file=sys.stderr)
    _json_error(args, message)
    return 1


def _json_error(args: argparse.Namespace, message: str) -> None:
    """For ``info --json`` and ``verify --json``, print ``{"error": ..., "model": ...}``
    on stdout.

    Scripts parsing stdout then always get one JSON document; each command
    prints its own document in one call, after which nothing can fail but the
    write.
    """
    if args.func in (cmd_info, cmd_verify) and args.json:
        with contextlib.suppress(OSError, ValueError):  # stdout closed or a broken pipe
            model = args.model[0] if len(args.model) == 1 else args.model
            print(json.dumps({"error": message, "model": model}, indent=2), flush=True)
