"""The ``onnx-light`` entry point: Ctrl-C is one short line, even while the CLI imports.

Importing :mod:`onnx_light.cli` imports onnx, protobuf and numpy (a tenth of
a second or more); a Ctrl-C then would print Python's traceback. This module
imports nothing heavy, so it can catch it.
"""

from __future__ import annotations

import sys

__all__ = ["main"]


EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports it


def main(argv: list[str] | None = None) -> int:
    """Run ``onnx-light`` (:func:`onnx_light.cli.main`), a Ctrl-C at any point one line.

    Args:
        argv: the arguments, without the program name (default: ``sys.argv[1:]``).

    Returns:
        The exit code (130 when interrupted).
    """
    try:
        from onnx_light.cli import main as run
    except KeyboardInterrupt:
        print("onnx-light: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    return run(argv)
