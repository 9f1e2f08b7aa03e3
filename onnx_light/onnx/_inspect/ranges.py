"""Byte ranges several tensors read: what ``info`` and ``verify`` count as shared.

Sharing is valid (a deduplicated model, tied weights): each such range is
stored once. A range is found by a key its caller chooses (``info``: the file's
path and the range; ``verify``: the opened file's identity and the range) and
shown by the first reader's location.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RangeReaders", "SharedRange"]


@dataclass(frozen=True)
class SharedRange:
    """One byte range of one file read by several tensors.

    Attributes:
        location: the file, as the first tensor reading it names it (its
            ``location`` entry, relative to that tensor's model).
        offset: the first byte of the range.
        length: its length in bytes.
        tensors: the tensors that read it, as ``(model, tensor name)`` pairs
            (the model as its path was given), in the order they were met.

    .. versionadded:: 0.1
    """

    location: str
    offset: int
    length: int
    tensors: tuple[tuple[str, str], ...]


class RangeReaders:
    """Who reads which range: :meth:`add` each reader, then :meth:`shared`.

    A list per range, not an object: most ranges have one reader, and their
    :class:`SharedRange` is built only for the ranges several read.
    """

    def __init__(self) -> None:
        self._readers: dict[object, list] = {}

    def add(self, key: object, where: tuple[str, int, int], who: tuple[str, str]) -> None:
        """Record that ``who`` (model, name) reads ``where`` (location, offset, length),
        a range found again by ``key``."""
        found = self._readers.get(key)
        if found is None:
            self._readers[key] = [where, who]
        else:
            found.append(who)

    def shared(self) -> tuple[SharedRange, ...]:
        """The ranges read more than once, in location, offset and length order."""
        found = [
            SharedRange(location, offset, length, tuple(who))
            for (location, offset, length), *who in self._readers.values()
            if len(who) > 1
        ]
        return tuple(sorted(found, key=lambda r: (r.location, r.offset, r.length)))
