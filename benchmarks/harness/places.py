"""Where the bytes of each weight lie: file, offset, length, read from the ``.onnx`` only."""

from __future__ import annotations

import math
import os

__all__ = ["tensor_places"]


def tensor_places(path: str | os.PathLike):
    """One row per external initializer of a model: its file, offset and length.

    Only the ``.onnx`` is read, no weight (:func:`onnx_light.onnx.load` with
    ``load_external_data=False``); initializers held in the ``.onnx`` itself
    are left out. ``onnx-light info`` shows the same from the command line.

    Args:
        path: the ``.onnx`` file.

    Returns:
        A :class:`pandas.DataFrame` with columns ``name``, ``location``,
        ``offset`` and ``length`` (without a length in the reference, the
        bytes its type and shape take), in the order of the graph's
        initializers.

    Raises:
        ImportError: pandas is not installed.
        onnx_light.onnx.ExternalDataError: a reference is malformed or unsafe.
    """
    import pandas

    import onnx_light.onnx as onnxl
    from onnx_light.onnx import helper

    rows = []
    for init in onnxl.load(path, load_external_data=False).graph.initializer:
        entries = {e.key: e.value for e in init.external_data}
        if "location" not in entries:
            continue
        if "length" in entries:
            length = int(entries["length"])
        else:  # to the end of the file: the bytes its type and shape take
            length = math.prod(init.dims) * helper.tensor_dtype_to_np_dtype(init.data_type).itemsize
        rows.append((init.name, entries["location"], int(entries.get("offset", 0)), length))
    return pandas.DataFrame(rows, columns=["name", "location", "offset", "length"])
