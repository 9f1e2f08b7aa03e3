"""Exceptions raised by onnx-light."""


class ExternalDataError(ValueError):
    """A tensor's ``external_data`` is malformed, unsafe or out of range.

    The message always names the tensor and the file concerned.
    """


class TruncatedFileError(OSError, EOFError):
    """A file ended before the bytes a model places in it: it shrank while being read.

    An :class:`OSError` (the file changed under the reader, as an I/O failure
    would) and an :class:`EOFError`. The message names the tensor and the file.
    """
