"""The layout planner: tensor sizes + alignment -> offsets in one weights file.

``save`` and the streaming helpers both call :func:`plan_layout`, so the same
model at the same alignment gives byte-identical weights files either way.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

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
