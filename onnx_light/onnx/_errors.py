"""Exceptions raised by onnx-light, and how messages show a file name."""

from __future__ import annotations

import os

__all__ = ["ExternalDataError", "Lazy", "OUTSIDE", "TruncatedFileError", "shown"]


def shown(path: str | bytes) -> str:
    """``path`` quoted for a message: bytes that are not UTF-8 show as ``\\xe9``,
    control characters escaped."""
    out = []
    for char in os.fsdecode(path):
        if "\udc80" <= char <= "\udcff":  # an undecodable byte (surrogateescape)
            out.append(f"\\x{ord(char) - 0xDC00:02x}")
        else:
            out.append(char if char.isprintable() else repr(char)[1:-1])
    return "'" + "".join(out) + "'"


class Lazy:
    """Part of a message, formatted only when a message needs it.

    ``str(Lazy(fn, *args))`` is ``fn(*args)``: a label passed along a hot path
    (one per tensor) costs one small object, and nothing when all goes well.
    """

    __slots__ = ("fn", "args")

    def __init__(self, fn, *args) -> None:
        self.fn = fn
        self.args = args

    def __str__(self) -> str:
        return self.fn(*self.args)


OUTSIDE = "outside"  # a reference resolves outside the folders a model may read


class ExternalDataError(ValueError):
    """A tensor's ``external_data`` is malformed, unsafe or out of range.

    The message always names the tensor and the file concerned.

    Attributes:
        reason: what kind of problem, for code that decides on it rather than
            on the wording: ``"outside"`` (the reference resolves outside the
            model's folder), or None.
    """

    def __init__(self, message: str, *, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason


class TruncatedFileError(OSError, EOFError):
    """A file ended before the bytes a model places in it: it shrank while being read.

    An :class:`OSError` (the file changed under the reader, as an I/O failure
    would) and an :class:`EOFError`. The message names the tensor and the file.
    """

    @classmethod
    def ended(cls, what: object, doing: str = "copying") -> TruncatedFileError:
        """The error for a source that ended before the bytes planned in it.

        Args:
            what: the tensor and the file (anything whose ``str`` names them).
            doing: what was under way ("copying", "reading").
        """
        return cls(f"{what}: the source file ended early (truncated while {doing}?)")
