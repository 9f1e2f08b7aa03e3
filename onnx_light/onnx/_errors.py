"""Exceptions raised by onnx-light, and how messages show a file name."""

import os


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


class ExternalDataError(ValueError):
    """A tensor's ``external_data`` is malformed, unsafe or out of range.

    The message always names the tensor and the file concerned.
    """


class TruncatedFileError(OSError, EOFError):
    """A file ended before the bytes a model places in it: it shrank while being read.

    An :class:`OSError` (the file changed under the reader, as an I/O failure
    would) and an :class:`EOFError`. The message names the tensor and the file.
    """
