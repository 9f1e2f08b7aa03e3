"""Walk every TensorProto of a model, wherever it lives.

Graph initializers, sparse initializers (values and indices), node attributes
(``t``, ``tensors``, ``sparse_tensor``, ``sparse_tensors``), subgraphs (``g``,
``graphs``) at any depth, training graphs, function bodies and the default
values of function attributes. The walk uses an explicit stack, so a deeply
nested model cannot exhaust Python's recursion.

Each tensor comes with its *path* from the model, a tuple of ``(field, index)``
steps (``index`` is None for a singular field), used both to name it in error
messages and to substitute it when a model is serialised. A tensor whose bytes
change dtype on their way to a new weights file is a :class:`Cast`: its site
and the conversion (``_dtypes.py``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from math import prod

import numpy as np
import onnx
import onnx.helper
import onnx.numpy_helper

from .._dtypes import Conversion
from .._errors import ExternalDataError

__all__ = [
    "Cast",
    "Path",
    "TensorSite",
    "is_external",
    "iter_tensors",
    "path_to_str",
    "tensor_nbytes",
    "typed_bytes",
]


Path = tuple[tuple[str, int | None], ...]

# Bits per element of the data types the ONNX spec names, fixed by the spec. The
# packed types take ceil(n * bits / 8) bytes for n elements. Older onnx maps
# bfloat16 and float8 to numpy float32 and int4 to int8, so these are not read
# from its numpy dtypes; only a type missing here is (see _element_bits).
_SPEC_BITS = {
    "FLOAT": 32, "UINT8": 8, "INT8": 8, "UINT16": 16, "INT16": 16, "INT32": 32,
    "INT64": 64, "BOOL": 8, "FLOAT16": 16, "DOUBLE": 64, "UINT32": 32, "UINT64": 64,
    "COMPLEX64": 64, "COMPLEX128": 128, "BFLOAT16": 16, "FLOAT8E4M3FN": 8,
    "FLOAT8E4M3FNUZ": 8, "FLOAT8E5M2": 8, "FLOAT8E5M2FNUZ": 8, "UINT4": 4, "INT4": 4,
    "FLOAT4E2M1": 4, "FLOAT8E8M0": 8, "UINT2": 2, "INT2": 2, "FLOAT6E2M3": 6,
    "FLOAT6E3M2": 6,
}  # fmt: skip


def _onnx_bits(code: int) -> int | None:
    """Bits per element of ``code`` read from the numpy dtype onnx maps it to.

    ml_dtypes types (onnx's own dependency) give their bit count, 4 for int4
    although one byte wide; numpy types give their item size. None when onnx
    has no numpy dtype for the type.
    """
    try:
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(code))
    except (KeyError, TypeError, ValueError):
        return None
    if dtype.type.__module__.startswith("ml_dtypes"):
        import ml_dtypes

        for info in (ml_dtypes.finfo, ml_dtypes.iinfo):
            try:
                return info(dtype).bits
            except (TypeError, ValueError):
                pass
    return dtype.itemsize * 8


def _element_bits() -> dict[int, int]:
    """Bits per element of every fixed-size data type the installed onnx defines.

    Iterates ``onnx.TensorProto.DataType`` so a type added by a newer onnx is
    not missed: its width comes from :data:`_SPEC_BITS`, else from onnx's numpy
    dtype. UNDEFINED and STRING have no width.
    """
    bits = {}
    for name, code in onnx.TensorProto.DataType.items():
        if name not in ("UNDEFINED", "STRING"):
            width = _SPEC_BITS.get(name) or _onnx_bits(code)
            if width:
                bits[code] = width
    return bits


# Bits per element of each fixed-size ONNX data type (strings have none).
_BITS = _element_bits()


@dataclass(frozen=True, slots=True)
class TensorSite:
    """A tensor of a model and where it sits.

    Attributes:
        tensor: the TensorProto itself (not a copy).
        path: steps from the model root, e.g. ``(("graph", None), ("initializer", 3))``.
    """

    tensor: onnx.TensorProto
    path: Path

    @property
    def in_sparse(self) -> bool:
        """True for the values or indices of a sparse tensor."""
        return bool(self.path) and self.path[-1][0] in ("values", "indices")

    @property
    def label(self) -> str:
        """A human name: the tensor's name and, when it has none, its path."""
        where = path_to_str(self.path)
        return f"{self.tensor.name!r} ({where})" if self.tensor.name else where


@dataclass(slots=True)
class Cast:
    """One tensor whose bytes are converted while they are copied.

    Attributes:
        conversion: what happens to its bytes.
        site: the edited tensor (its new ``data_type``): the one the new
            ``.onnx`` gets, placed in the new weights file.
        clipped: values the clipping changed, counted by the writer.
    """

    conversion: Conversion
    site: TensorSite
    clipped: int = 0


def path_to_str(path: Path) -> str:
    """Render a path as ``graph.node[2].attribute[0].t``."""
    parts = []
    for field, index in path:
        parts.append(field if index is None else f"{field}[{index}]")
    return ".".join(parts)


def tensor_nbytes(tensor: onnx.TensorProto) -> int | None:
    """Bytes the raw data of ``tensor`` must hold, from its data type and dims.

    Returns:
        The size in bytes, or None when it cannot be known (strings, unknown
        data types, negative dims).
    """
    bits = _BITS.get(tensor.data_type)
    dims = tensor.dims[:]  # a list: protobuf's container is slow to walk
    if bits is None or (dims and min(dims) < 0):
        return None
    return (prod(dims) * bits + 7) // 8


def typed_raw_bytes(tensor: onnx.TensorProto) -> bytes | None:
    """The ``raw_data`` bytes holding the same values as the tensor's typed field.

    The typed field is the one ONNX assigns to the data type (``float_data``,
    ``int32_data``, ``int64_data``, ``double_data`` or ``uint64_data``). The
    bytes are little-endian, packed for the 2-, 4- and 6-bit types, one byte
    0 or 1 per bool: what ``raw_data`` would hold, ``tensor_nbytes`` long.

    Args:
        tensor: the tensor (not modified).

    Returns:
        The bytes, or None when the tensor keeps no values in its typed field
        (it has raw_data or external data, or the field is empty) or cannot
        have raw_data (STRING, UNDEFINED, a type unknown to onnx).

    Raises:
        ValueError: the typed field holds a number of values that does not
            match dtype x dims, or onnx cannot convert the type bit-exactly.
    """
    code, bits = tensor.data_type, _BITS.get(tensor.data_type)
    if bits is None or tensor.HasField("raw_data") or is_external(tensor):
        return None
    values = getattr(tensor, onnx.helper.tensor_dtype_to_field(code))
    if not len(values):
        return None
    n = prod(tensor.dims)
    if bits < 8 and 8 % bits == 0:  # 2 or 4 values packed in each int32_data entry
        expected = (n * bits + 7) // 8
    elif code in (onnx.TensorProto.COMPLEX64, onnx.TensorProto.COMPLEX128):
        expected = 2 * n
    else:
        expected = n
    if len(values) != expected:
        raise ValueError(
            f"tensor {tensor.name!r}: {len(values)} values in its typed field, "
            f"dtype x dims needs {expected}"
        )
    if code == onnx.TensorProto.BOOL:
        # Any nonzero int32 is true (as onnxruntime reads it); onnx's to_array keeps
        # the low byte instead (256 -> false, 2 -> a bool byte 2). Raw bools are 0 or 1.
        return (np.asarray(values, dtype=np.int32) != 0).astype(np.uint8).tobytes()
    raw = onnx.numpy_helper.from_array(onnx.numpy_helper.to_array(tensor))
    if raw.data_type != code or len(raw.raw_data) != tensor_nbytes(tensor):
        raise ValueError(
            f"tensor {tensor.name!r}: onnx {onnx.__version__} does not convert "
            f"{onnx.TensorProto.DataType.Name(code)} to raw_data bit-exactly"
        )
    return raw.raw_data


def is_external(tensor: onnx.TensorProto) -> bool:
    """True when the tensor's data lives in an external file."""
    return tensor.data_location == onnx.TensorProto.EXTERNAL  # unset reads as DEFAULT


def _sparse(sp: onnx.SparseTensorProto, path: Path) -> Iterator[tuple[str, object, Path]]:
    if sp.HasField("values"):
        yield "tensor", sp.values, (*path, ("values", None))
    if sp.HasField("indices"):
        yield "tensor", sp.indices, (*path, ("indices", None))


def _attribute(att: onnx.AttributeProto, path: Path) -> Iterator[tuple[str, object, Path]]:
    if att.HasField("t"):
        yield "tensor", att.t, (*path, ("t", None))
    for i, t in enumerate(att.tensors):
        yield "tensor", t, (*path, ("tensors", i))
    if att.HasField("sparse_tensor"):
        yield from _sparse(att.sparse_tensor, (*path, ("sparse_tensor", None)))
    for i, sp in enumerate(att.sparse_tensors):
        yield from _sparse(sp, (*path, ("sparse_tensors", i)))
    if att.HasField("g"):
        yield "graph", att.g, (*path, ("g", None))
    for i, g in enumerate(att.graphs):
        yield "graph", g, (*path, ("graphs", i))


def _nodes(nodes, path: Path) -> Iterator[tuple[str, object, Path]]:
    for i, node in enumerate(nodes):
        for j, att in enumerate(node.attribute):
            yield from _attribute(att, (*path, ("node", i), ("attribute", j)))


def _graph(graph: onnx.GraphProto, path: Path) -> Iterator[tuple[str, object, Path]]:
    for i, t in enumerate(graph.initializer):
        yield "tensor", t, (*path, ("initializer", i))
    for i, sp in enumerate(graph.sparse_initializer):
        yield from _sparse(sp, (*path, ("sparse_initializer", i)))
    yield from _nodes(graph.node, path)


def _model(model: onnx.ModelProto) -> Iterator[tuple[str, object, Path]]:
    if model.HasField("graph"):
        yield "graph", model.graph, (("graph", None),)
    for i, ti in enumerate(model.training_info):
        for field in ("initialization", "algorithm"):
            if ti.HasField(field):
                yield "graph", getattr(ti, field), (("training_info", i), (field, None))
    for i, f in enumerate(model.functions):
        yield from _nodes(f.node, (("functions", i),))
        for j, att in enumerate(f.attribute_proto):  # default values of its attributes
            yield from _attribute(att, (("functions", i), ("attribute_proto", j)))


def iter_tensors(model: onnx.ModelProto) -> Iterator[TensorSite]:
    """Yield every tensor of ``model`` in a fixed, depth-first order.

    Args:
        model: the model to walk (a ModelProto; a GraphProto is walked as its graph).

    Yields:
        A :class:`TensorSite` per tensor: initializers, sparse initializers,
        attribute tensors, subgraphs at any depth, training graphs, functions
        (their bodies and the default values of their attributes).
    """
    stack = [_graph(model, ())] if isinstance(model, onnx.GraphProto) else [_model(model)]
    while stack:
        item = next(stack[-1], None)
        if item is None:
            stack.pop()
            continue
        kind, proto, path = item
        if kind == "tensor":
            yield TensorSite(proto, path)
        else:
            stack.append(_graph(proto, path))


def typed_bytes(site: TensorSite) -> bytes | None:
    """:func:`typed_raw_bytes` of a tensor of the walker, its errors naming its path.

    Raises:
        ExternalDataError: its typed field does not hold dtype x dims values.
    """
    try:
        return typed_raw_bytes(site.tensor)
    except ValueError as e:
        reason = str(e).removeprefix(f"tensor {site.tensor.name!r}: ")
        raise ExternalDataError(f"tensor {site.label}: cannot be moved: {reason}") from None
