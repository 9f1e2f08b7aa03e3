"""The layout planner: tensor sizes + alignment -> offsets in one weights file.

``save`` and the streaming helpers both call :func:`plan_layout`, so the same
model at the same alignment gives byte-identical weights files either way.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from .._options import ONNX_IR, TRANSFORMERS_JS

__all__ = [
    "Layout",
    "TRANSFORMERS_JS_MAX_FILES",
    "followed_naming",
    "plan_shards",
    "shard_name",
]


MAX_FILE_SIZE = 2**63 - 1


def align_up(offset: int, alignment: int) -> int:
    """The smallest multiple of ``alignment`` (a power of two) >= ``offset``."""
    return (offset + alignment - 1) & ~(alignment - 1)


@dataclass(frozen=True)
class Layout:
    """Where each tensor goes.

    Attributes:
        offsets: one offset per input size, in the input order.
        total: size of the weights file (end of the last tensor).
        unique: indices of the inputs that own their bytes (the first of each
            shared group); the others reuse an earlier offset.
    """

    offsets: list[int]
    total: int
    unique: list[int]


def plan_layout(
    sizes: Sequence[int], alignment: int, keys: Sequence[Hashable | None] | None = None
) -> Layout:
    """Place tensors one after the other, each at an aligned offset.

    The first tensor starts at 0; the gaps are zero padding. Tensors with the
    same non-None key (the same source byte range) share one copy.

    Args:
        sizes: byte size of each tensor, in the walker's order.
        alignment: a power of two (1 means dense).
        keys: optional sharing keys, one per size.

    Returns:
        The :class:`Layout`.

    Raises:
        ValueError: when the alignment is not a power of two >= 1, a size is
            negative, or the file would be larger than a file offset allows
            (2**63 - 1 bytes: a reference into a huge sparse file).
    """
    if alignment < 1 or alignment & (alignment - 1):
        raise ValueError(f"alignment must be a power of two >= 1, got {alignment}")
    offsets: list[int] = []
    unique: list[int] = []
    seen: dict[Hashable, int] = {}
    end = 0
    for i, size in enumerate(sizes):
        if size < 0:
            raise ValueError(f"negative tensor size {size}")
        key = keys[i] if keys is not None else None
        if key is not None and key in seen:
            offsets.append(seen[key])
            continue
        offset = align_up(end, alignment)
        offsets.append(offset)
        unique.append(i)
        if key is not None:
            seen[key] = offset
        end = offset + size
    if end > MAX_FILE_SIZE:
        raise ValueError(
            f"the weights file would hold {end} bytes, more than any file can (2**63 - 1)"
        )
    return Layout(offsets, end, unique)


@dataclass(frozen=True)
class Shard:
    """One weights file of a sharded layout.

    Attributes:
        items: indices (in the input order) of the tensors stored in it.
        layout: their offsets in this file (in the order of ``items``).
    """

    items: list[int]
    layout: Layout


def plan_shards(
    sizes: Sequence[int],
    alignment: int,
    keys: Sequence[Hashable | None] | None = None,
    max_shard_size: int | None = None,
) -> list[Shard]:
    """Split tensors into weights files of at most ``max_shard_size`` bytes each.

    Tensors stay in the walker's order, each whole in one file, at aligned
    offsets (:func:`plan_layout` within each file). A file is closed when the
    next tensor would end past the limit; a tensor larger than the limit is
    alone in its file. Tensors sharing a key share the copy of the first.

    Args:
        sizes: byte size of each tensor.
        alignment: a power of two (1 means dense).
        keys: optional sharing keys.
        max_shard_size: the limit in bytes; None: one file.

    Returns:
        The shards, at least one (empty when there is no tensor).
    """
    keys = list(keys) if keys is not None else [None] * len(sizes)
    if max_shard_size is None:
        return [Shard(list(range(len(sizes))), plan_layout(sizes, alignment, keys))]
    groups: list[list[int]] = [[]]
    home: dict[Hashable, int] = {}
    end = 0
    for i, size in enumerate(sizes):
        key = keys[i]
        if key is not None and key in home:
            groups[home[key]].append(i)  # shares the bytes of an earlier tensor
            continue
        offset = align_up(end, alignment)
        if offset + size > max_shard_size and groups[-1]:
            groups.append([])
            offset = 0
        groups[-1].append(i)
        if key is not None:
            home[key] = len(groups) - 1
        end = offset + size
    return [
        Shard(g, plan_layout([sizes[i] for i in g], alignment, [keys[i] for i in g]))
        for g in groups
    ]


TRANSFORMERS_JS_MAX_FILES = 100  # transformers.js's MAX_EXTERNAL_DATA_CHUNKS


def shard_name(location: str, index: int, count: int, naming: str = ONNX_IR) -> str:
    """The name of shard ``index`` (from 0) of ``count``.

    As onnx-ir names them (default), ``model.onnx.data`` becomes
    ``model-00001-of-00003.onnx.data``: the marker goes before the chain of
    extensions. As transformers.js's loader derives them
    (``"transformers.js"``), ``model.onnx_data`` is the first file, then
    ``model.onnx_data_1``, ``model.onnx_data_2``... One shard keeps the name
    as it is, in both namings.
    """
    if count == 1:
        return location
    if naming == TRANSFORMERS_JS:
        return location if index == 0 else f"{location}_{index}"
    folder, name = location.rsplit("/", 1) if "/" in location else ("", location)
    suffixes = []
    while "." in name[1:]:
        stem, ext = name.rsplit(".", 1)
        if not (ext[:1].isalpha() and all(c.isalnum() or c == "_" for c in ext) and ext.isascii()):
            break
        suffixes.append("." + ext)
        name = stem
    marked = f"{name}-{index + 1:05d}-of-{count:05d}{''.join(reversed(suffixes))}"
    return f"{folder}/{marked}" if folder else marked


_ONNX_IR_SHARD = re.compile(r"^(?P<stem>.+)-(?P<index>\d{5})-of-(?P<count>\d{5})(?P<ext>(\.\w+)*)$")


def followed_naming(locations: Sequence[str]) -> tuple[str, str] | None:
    """The weights name and shard naming a model's weights files already follow.

    One file is its own name; shards named as :func:`shard_name` names them
    (``model-00001-of-00003.onnx.data``..., or ``model.onnx_data``,
    ``model.onnx_data_1``...) give the name they derive from. Used in place,
    so a re-layout keeps the exporter's names.

    Args:
        locations: the files' locations, relative to the model's folder.

    Returns:
        ``(location, naming)``, or None when the files follow no single name.
    """
    names = sorted(set(locations))
    if len(names) == 1:
        return names[0], ONNX_IR
    if not names:
        return None
    count = len(names)
    base = min(names, key=len)
    if names == sorted(shard_name(base, i, count, TRANSFORMERS_JS) for i in range(count)):
        return base, TRANSFORMERS_JS
    folder, _, first = names[0].rpartition("/")
    m = _ONNX_IR_SHARD.match(first)
    if m is None:
        return None
    base = (folder + "/" if folder else "") + m["stem"] + m["ext"]
    if names == sorted(shard_name(base, i, count, ONNX_IR) for i in range(count)):
        return base, ONNX_IR
    return None
