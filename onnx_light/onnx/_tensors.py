"""Walk every TensorProto of a model, wherever it lives.

Graph initializers, sparse initializers (values and indices), node attributes
(``t``, ``tensors``, ``sparse_tensor``, ``sparse_tensors``), subgraphs (``g``,
``graphs``) at any depth, training graphs, function bodies and the default
values of function attributes. The walk uses an explicit stack, so a deeply
nested model cannot exhaust Python's recursion.

Each tensor comes with its *path* from the model, a tuple of ``(field, index)``
steps (``index`` is None for a singular field), used both to name it in error
messages and to substitute it when a model is serialised.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from math import prod

import onnx

Path = tuple[tuple[str, int | None], ...]

# Bits per element of each fixed-size ONNX data type (strings have none).
_BITS = {
    1: 32, 2: 8, 3: 8, 4: 16, 5: 16, 6: 32, 7: 64, 9: 8, 10: 16, 11: 64, 12: 32,
    13: 64, 14: 64, 15: 128, 16: 16, 17: 8, 18: 8, 19: 8, 20: 8, 21: 4, 22: 4,
    23: 4, 24: 8, 25: 2, 26: 2,
}  # fmt: skip


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
    dims = tensor.dims
    if bits is None or (dims and min(dims) < 0):
        return None
    return (prod(dims) * bits + 7) // 8


def is_external(tensor: onnx.TensorProto) -> bool:
    """True when the tensor's data lives in an external file."""
    return tensor.HasField("data_location") and tensor.data_location == onnx.TensorProto.EXTERNAL


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
