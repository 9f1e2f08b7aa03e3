"""The ``onnx-light`` command run from a gallery script, as a reader would type it."""

from __future__ import annotations

import os
import subprocess
import sys

__all__ = ["show_command"]


def show_command(*args: str, cwd: str) -> str:
    """Run ``onnx-light ARGS`` in ``cwd`` and print the command and what it says.

    Paths under ``cwd`` are printed relative to it, as a reader in that folder
    would see them.

    Args:
        args: the command's arguments (``"align", "model.onnx", ...``).
        cwd: the folder it runs in.

    Returns:
        What it printed (standard output, then standard error).

    Raises:
        subprocess.CalledProcessError: the command failed.
    """
    proc = subprocess.run(
        [sys.executable, "-m", "onnx_light", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        text=True,
    )
    said = (proc.stdout + proc.stderr).replace(cwd + os.sep, "").rstrip()
    print("$ onnx-light", " ".join(args))
    print(said)
    return said
