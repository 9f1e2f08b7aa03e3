"""Exceptions raised by onnx-light."""


class ExternalDataError(ValueError):
    """A tensor's ``external_data`` is malformed, unsafe or out of range.

    The message always names the tensor and the file concerned.
    """
