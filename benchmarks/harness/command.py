"""The ``onnx-light`` command run from a gallery script, as a reader would type it."""

from __future__ import annotations

import os
import subprocess
import sys

__all__ = ["show_command"]


def show_command(*args: str, cwd: str, lines: int | None = None, expect: int = 0) -> str:
    """Run ``onnx-light ARGS`` in ``cwd`` and print the command and what it says.

    Paths under ``cwd`` are printed relative to it, as a reader in that folder
    would see them. An exit code other than 0 is printed after the command.

    Args:
        args: the command's arguments (``"align", "model.onnx", ...``).
        cwd: the folder it runs in.
        lines: print only the first ``lines`` lines of what it says, and how
            many more there are (None: all of it).
        expect: the exit code it must return (1: a check that finds a
            problem, as ``verify`` on a broken model).

    Returns:
        All it said, standard output then standard error, with the same
        relative paths (``--json`` output stays valid JSON when the command
        writes nothing to standard error).

    Raises:
        subprocess.CalledProcessError: it returned another exit code than
            ``expect`` (what it said is printed first).
    """
    proc = subprocess.run(
        [sys.executable, "-m", "onnx_light", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
    )
    said = (proc.stdout + proc.stderr).replace(cwd + os.sep, "").rstrip()
    code = f"   # exit code {proc.returncode}" if proc.returncode else ""
    print("$ onnx-light", " ".join(args) + code)
    out = said.split("\n")
    shown = out if lines is None else out[:lines]
    print("\n".join(shown))
    if len(out) > len(shown):
        print(f"... ({len(out) - len(shown)} more lines)")
    if proc.returncode != expect:  # what it said is printed above
        raise subprocess.CalledProcessError(
            proc.returncode, ["onnx-light", *args], proc.stdout, proc.stderr
        )
    return said
