"""``onnx_light.onnx``: onnx's protos and helpers, plus memory-light load and save.

The proto classes are the very classes of the ``onnx`` package, so everything
interoperates with onnx, onnxruntime and onnx-ir::

    import onnx_light.onnx as onnxl

    model = onnxl.load("model.onnx")
    opts = onnxl.SerializeOptions()
    opts.alignment = 4096
    onnxl.save(model, "aligned.onnx", location="aligned.onnx.data", options=opts)
"""

from onnx import (
    AttributeProto,
    FunctionProto,
    GraphProto,
    ModelProto,
    NodeProto,
    OperatorSetIdProto,
    SparseTensorProto,
    StringStringEntryProto,
    TensorProto,
    TypeProto,
    ValueInfoProto,
    helper,
    numpy_helper,
)

from ._align import AlignResult
from ._dedup import DedupResult, deduplicate_external_data
from ._edit import save_edited
from ._errors import ExternalDataError
from ._io import load, save
from ._options import SerializeOptions
from ._streaming import align_external_data_streaming, save_model_with_shared_external_data

__all__ = [
    "AlignResult",
    "AttributeProto",
    "DedupResult",
    "ExternalDataError",
    "FunctionProto",
    "GraphProto",
    "ModelProto",
    "NodeProto",
    "OperatorSetIdProto",
    "SerializeOptions",
    "SparseTensorProto",
    "StringStringEntryProto",
    "TensorProto",
    "TypeProto",
    "ValueInfoProto",
    "align_external_data_streaming",
    "deduplicate_external_data",
    "helper",
    "load",
    "numpy_helper",
    "save",
    "save_edited",
    "save_model_with_shared_external_data",
]
