"""Weights files left behind: what a model replaced in place no longer references.

Re-laying out a model in place (4 shards to 2, shards to one file, one file
per tensor to one file) leaves the files the old model read and the new one
does not. They are never deleted silently: another model of the folder may
share them (a variant saved with shared weights). :func:`unreferenced` lists
those that no ``.onnx`` of the model's folder references; :func:`remove`
deletes them when the caller asks.
"""

from __future__ import annotations

import contextlib
import os
import warnings

from ._external import read_entries
from ._scan import scan_model
from ._signals import critical
from ._sources import SourceFile, SourceFiles
from ._tensors import is_external, iter_tensors


def _locations(model_path: str) -> set[str]:
    """The real paths of every file ``model_path`` references (metadata only).

    Raises:
        ValueError, OSError: the model cannot be read.
    """
    folder = os.path.dirname(model_path)
    with SourceFiles() as files:
        model, spans = scan_model(model_path, files)
    found = set()
    for site in iter_tensors(model):
        if is_external(site.tensor):
            entries = read_entries(site)
            if not spans.holds(entries):
                found.add(os.path.realpath(os.path.join(folder, entries["location"])))
    return found


def unreferenced(model_path: str, old: list[SourceFile], new: list[str]) -> list[str]:
    """The files the old model read that no ``.onnx`` of its folder references now.

    Args:
        model_path: the model just replaced in place.
        old: the data files the old model read (as opened by the call).
        new: the weights files the new model references.

    Returns:
        Their paths, in the order of ``old``; empty when a ``.onnx`` of the
        folder cannot be read (then a :class:`UserWarning` says which: it
        may reference them).
    """
    fresh = {os.path.realpath(p) for p in new}
    candidates: dict[str, str] = {}
    for source in old:
        real = os.path.realpath(source.path)
        with contextlib.suppress(OSError):
            st = os.stat(real)
            if real not in fresh and (st.st_dev, st.st_ino) == source.identity:
                candidates.setdefault(real, source.path)
    if not candidates:
        return []
    folder = os.path.dirname(model_path)
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        if not name.endswith(".onnx") or not os.path.isfile(path):
            continue
        try:
            for real in _locations(path):
                candidates.pop(real, None)
        except (ValueError, OSError) as e:
            warnings.warn(
                f"{len(candidates)} weights file(s) that {model_path!r} no longer references "
                f"were kept: {path!r} could not be read to check what it references ({e})",
                stacklevel=3,
            )
            return []
    return list(candidates.values())


def remove(paths: list[str]) -> list[str]:
    """Delete ``paths`` (the caller holds the lock of the model's folder); return those deleted."""
    removed = []
    with critical():
        for path in paths:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
                removed.append(path)
    return removed
