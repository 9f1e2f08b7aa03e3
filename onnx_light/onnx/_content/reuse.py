"""Files that already hold weights: tensors whose bytes a ``.safetensors`` file holds point into it.

ONNX external data may point anywhere in a file; a tensor of a
``.safetensors`` file lies at ``8 + header length + its start``. A model
published beside its safetensors weights then needs to store only the bytes
that differ (onnx-ir's ``save_safetensors`` writes such references, and
onnx, onnx-ir and onnxruntime load them). A reused file must sit in the
destination folder (the rule every location follows) and is only read.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from .._errors import ExternalDataError, shown
from .._read.external import check_location
from .._read.sources import SourceFiles
from .keys import Blob
from .safetensors import read_safetensors_header

__all__ = ["Reused", "open_reused"]


@dataclass(frozen=True)
class Reused:
    """One tensor of a reused file.

    Attributes:
        location: the file, relative to the destination folder (as recorded).
        name: the tensor's name in the file.
        offset: its first byte in the file.
        blob: its bytes, for comparison.
    """

    location: str
    name: str
    offset: int
    blob: Blob


def open_reused(
    paths: Sequence[str | os.PathLike], folder: str, files: SourceFiles
) -> list[Reused]:
    """Open and check every reused file, and list its tensors.

    Args:
        paths: the ``.safetensors`` files (absolute, or relative to the
            working folder).
        folder: the destination folder: every file must lie in it.
        files: the call's opened source files.

    Returns:
        Every tensor of every file, in file order.

    Raises:
        TypeError: ``paths`` is a single path, not a list.
        FileNotFoundError: a file is missing.
        ExternalDataError: a file lies outside the destination folder, is not
            a regular file, has several hard links, or is not a valid
            ``.safetensors`` file (its header says why).
    """
    if isinstance(paths, (str, bytes, os.PathLike)):
        raise TypeError("reuse is a list of paths, e.g. reuse=['model.safetensors']")
    found = []
    real_folder = os.path.realpath(folder)
    for path in paths:
        path = os.path.abspath(os.fsdecode(path))
        if not (path + os.sep).startswith(os.path.join(folder, "")):
            raise ExternalDataError(
                f"reused file {shown(path)} is outside the destination folder {shown(folder)}: "
                "a model may only reference files of its folder; copy or move it there"
            )
        location = os.path.relpath(path, folder).replace(os.sep, "/")
        label = f"reused file {location!r}"
        check_location(location, label)
        source = files.data(folder, (real_folder,), location, label)
        with files.lease(source) as fd:
            tensors = read_safetensors_header(fd, source.path)
        for t in tensors:
            found.append(Reused(location, t.name, t.offset, Blob(t.length, source, t.offset)))
    return found
