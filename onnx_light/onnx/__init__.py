"""``onnx_light.onnx``: onnx's protos and helpers, plus memory-light load and save.

The proto classes are the very classes of the ``onnx`` package, so everything
interoperates with onnx, onnxruntime and onnx-ir. ``onnx_light.onnx.helper``
and ``onnx_light.onnx.numpy_helper`` are onnx's own modules (``import
onnx_light.onnx.helper as oh`` works and gives :mod:`onnx.helper` itself).
Importing this package adds one method to :class:`onnx.ModelProto`,
``SerializeToFile(path, options=None, weights_path=None)``, the in-memory
save of :func:`save`; nothing else of onnx changes::

    import onnx_light.onnx as onnxl

    model = onnxl.load("model.onnx")
    opts = onnxl.SerializeOptions()
    opts.alignment = 4096
    onnxl.save(model, "aligned.onnx", location="aligned.onnx.data", options=opts)
"""

import sys

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

from ._align import AlignResult, align_external_data_streaming
from ._convert import ConvertResult, convert_float_to_float16
from ._dedup import DedupResult, deduplicate_external_data
from ._edit import save_edited
from ._errors import ExternalDataError, TruncatedFileError
from ._inspect.info import (
    FileInfo,
    InspectReport,
    ModelInfo,
    TensorInfo,
    inspect_model,
    inspect_models,
)
from ._inspect.loaders import LoaderVerdict
from ._inspect.ranges import SharedRange
from ._inspect.verify import VerifyReport, VerifyResult, verify_model, verify_models
from ._io import load, save, serialize_to_file
from ._options import SerializeOptions, WriteOptions, check_setting
from ._pipeline import WriteResult
from ._quantize import QuantizeResult, quantize_weights
from ._read.wire import WireError
from ._save import save_model_with_shared_external_data

# every name of this package reports this module (tracebacks, help(), pickles)
for _public in (
    AlignResult,
    ConvertResult,
    DedupResult,
    ExternalDataError,
    FileInfo,
    InspectReport,
    LoaderVerdict,
    ModelInfo,
    QuantizeResult,
    SerializeOptions,
    SharedRange,
    TensorInfo,
    TruncatedFileError,
    VerifyReport,
    VerifyResult,
    WireError,
    WriteOptions,
    WriteResult,
    align_external_data_streaming,
    check_setting,
    convert_float_to_float16,
    deduplicate_external_data,
    inspect_model,
    inspect_models,
    load,
    quantize_weights,
    save,
    save_edited,
    save_model_with_shared_external_data,
    verify_model,
    verify_models,
):
    _public.__module__ = __name__
del _public

# onnx's own submodules, importable as ``onnx_light.onnx.helper`` (the same objects)
sys.modules[__name__ + ".helper"] = helper
sys.modules[__name__ + ".numpy_helper"] = numpy_helper
if not hasattr(ModelProto, "SerializeToFile"):  # onnx has none: the one method added
    ModelProto.SerializeToFile = serialize_to_file

__all__ = [
    "AlignResult",
    "AttributeProto",
    "ConvertResult",
    "DedupResult",
    "ExternalDataError",
    "FileInfo",
    "FunctionProto",
    "GraphProto",
    "InspectReport",
    "LoaderVerdict",
    "ModelInfo",
    "ModelProto",
    "NodeProto",
    "OperatorSetIdProto",
    "QuantizeResult",
    "SerializeOptions",
    "SharedRange",
    "SparseTensorProto",
    "StringStringEntryProto",
    "TensorInfo",
    "TensorProto",
    "TruncatedFileError",
    "TypeProto",
    "ValueInfoProto",
    "VerifyReport",
    "VerifyResult",
    "WireError",
    "WriteOptions",
    "WriteResult",
    "align_external_data_streaming",
    "check_setting",
    "convert_float_to_float16",
    "deduplicate_external_data",
    "helper",
    "inspect_model",
    "inspect_models",
    "load",
    "numpy_helper",
    "quantize_weights",
    "save",
    "save_edited",
    "save_model_with_shared_external_data",
    "verify_model",
    "verify_models",
]
