"""Weights files left behind: what a model replaced in place no longer references.

Re-laying out a model in place (4 shards to 2, shards to one file, one file
per tensor to one file) leaves the files the old model read and the new one
does not. They are never deleted silently: another model of the folder may
share them (a variant saved with shared weights). :func:`unreferenced` lists
those that no ``.onnx`` of the model's folder references (see
:mod:`_commit.readers`); :func:`remove` deletes them when the caller asks.
"""

from __future__ import annotations

import contextlib
import os
import warnings

from .._errors import shown
from .._read.sources import SourceFile, identity
from .._system.signals import critical
from .readers import Listings, is_model_name, readers, stored_spelling

__all__ = ["remove", "unreferenced"]


# the frame a warning names: the user's call of a writer (this module's unreferenced,
# the write pipeline's prune, its write, the writer, the line that called it)
CALLER = 5


def _foreign(path: str) -> bool:
    """A file other tools load for themselves (a ``.safetensors`` that transformers or
    PyTorch read, and an ONNX model may point into): never left for pruning."""
    return path.casefold().endswith(".safetensors")  # MODEL.SAFETENSORS too


def unreferenced(model_path: str, old: list[SourceFile], new: list[str]) -> list[str]:
    """The weights files the old model read that no ``.onnx`` of its folder references now.

    Args:
        model_path: the model just replaced in place.
        old: the data files the old model read (as opened by the call).
        new: the weights files the new model references.

    Returns:
        Their paths, in the order of ``old``: never a ``.onnx`` (another
        model, whose inline bytes the old one read), never a ``.safetensors``
        (other tools load it for themselves), never a file a model of
        the folder, or of a folder between it and the file, references. Empty
        when one of those models cannot be read (then a :class:`UserWarning`
        says which: it may reference them).
    """
    listings = Listings()
    fresh = {stored_spelling(p, listings) for p in new}
    fresh_ids = {identity(p) for p in new} - {None}
    model = stored_spelling(model_path, listings)
    candidates: dict[str, str] = {}
    for source in old:
        stored = stored_spelling(source.path, listings)
        if stored in fresh or stored == model or is_model_name(stored) or _foreign(stored):
            continue
        if source.identity in fresh_ids:  # the new model reads it under another name
            continue
        if identity(stored) == source.identity:  # still the file read
            candidates.setdefault(stored, source.path)
    if not candidates:
        return []
    read, unreadable = readers(list(candidates.values()), os.path.dirname(model), set(), listings)
    if unreadable:
        warnings.warn(
            f"{len(candidates)} weights file(s) that {shown(model_path)} no longer references "
            f"were kept: {shown(unreadable[0])} could not be read to check what it references",
            stacklevel=CALLER,
        )
        return []
    return [path for path in candidates.values() if path not in read]


def remove(paths: list[str]) -> list[str]:
    """Delete ``paths`` (the caller holds the lock of the model's folder); return those deleted."""
    removed = []
    with critical():
        for path in paths:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
                removed.append(path)
    return removed
