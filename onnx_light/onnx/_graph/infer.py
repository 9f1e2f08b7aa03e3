"""onnx's shape inference on a model without its weights, as if they were there.

``onnx.shape_inference.infer_shapes`` runs on a model loaded with
``load_external_data=False``: it is small, so a model whose weights exceed
2 GiB infers as any other. But where a node's inference reads an input's
values (TopK's K, Reshape's shape, Slice's starts...) and that input is an
external tensor, onnx raises for the node and, outside strict mode, drops
every type the node would have given, then those of the nodes after it. A
graph rule that asks which values are float then sees none.

:func:`infer_shapes` therefore runs onnx on a copy where each external
tensor is a graph input of the same type and dims (an initializer; a
Constant's value becomes an Identity of one): onnx infers every type, and the
shapes that do not depend on those values, as it does for a model whose
weights are inputs. The inferred types then go back into the model.
"""

from __future__ import annotations

import onnx
from google.protobuf.message import Message

from .._read.tensors import is_external

__all__ = ["infer_shapes", "tensor_value_info"]


def tensor_value_info(name: str, elem_type: int, dims) -> onnx.ValueInfoProto:
    """``onnx.helper.make_tensor_value_info(name, elem_type, dims)`` for known dims, built
    field by field (five times faster: a model may have 200,000 weights)."""
    info = onnx.ValueInfoProto(name=name)
    tensor_type = info.type.tensor_type
    tensor_type.elem_type = elem_type
    shape = tensor_type.shape
    shape.SetInParent()  # a scalar has a shape too, of no dims
    add = shape.dim.add
    for d in dims:
        add().dim_value = d
    return info


def _graphs(graph: onnx.GraphProto):
    """``graph`` and its subgraphs at any depth, in a fixed order."""
    stack = [graph]
    while stack:
        graph = stack.pop()
        yield graph
        for node in reversed(graph.node):
            for attribute in reversed(node.attribute):
                stack.extend(reversed(attribute.graphs))
                if attribute.HasField("g"):
                    stack.append(attribute.g)


def _copy_fields(src: Message, dst: Message, skip: str) -> None:
    """Copy every set field of ``src`` into ``dst`` but the one named ``skip``."""
    for field, value in src.ListFields():
        if field.name == skip:
            continue
        if isinstance(value, Message):
            getattr(dst, field.name).CopyFrom(value)
        elif hasattr(value, "extend") and not isinstance(value, (str, bytes)):
            getattr(dst, field.name).extend(value)  # a repeated field
        else:
            setattr(dst, field.name, value)


def _inference_copy(model: onnx.ModelProto, read: set[str]) -> tuple[onnx.ModelProto, dict]:
    """A copy of ``model`` for onnx's inference, without its main graph's external
    initializers (a model of 200,000 weights is not copied twice to be inferred).

    Returns:
        ``(the copy, {name: (type, dims)} of those a node reads or the graph
        outputs)``: they become inputs of the copy; the others cannot change a
        type onnx infers, and are left out.
    """
    copy = onnx.ModelProto()
    _copy_fields(model, copy, "graph")
    graph, target = model.graph, copy.graph
    _copy_fields(graph, target, "initializer")
    outputs = {v.name for v in graph.output}
    hidden: dict[str, tuple[int, list[int]]] = {}
    for tensor in graph.initializer:
        if not is_external(tensor):
            target.initializer.append(tensor)
        elif tensor.name in read or tensor.name in outputs:
            hidden.setdefault(tensor.name, (tensor.data_type, tensor.dims[:]))
    return copy, hidden


def _hide_external(model: onnx.ModelProto, hidden: dict[str, tuple[int, list[int]]]) -> None:
    """Make every external tensor of ``model`` that a node reads an input of its main
    graph (one no node reads cannot make onnx drop a type: it stays, unread), with
    the main graph's own already taken out (``hidden``, :func:`_inference_copy`)."""
    graphs = list(_graphs(model.graph))
    read = {name for graph in graphs for node in graph.node for name in node.input}

    def hides(tensor: onnx.TensorProto) -> bool:
        return tensor.name in read and is_external(tensor)

    for index, graph in enumerate(graphs):
        inputs = {v.name for v in graph.input} if index else set()  # the main graph's: below
        external = [t for t in graph.initializer if hides(t)]
        for tensor in external:
            if tensor.name not in inputs:
                hidden.setdefault(tensor.name, (tensor.data_type, list(tensor.dims)))
        if external:  # moved last (a stable sort), then dropped
            graph.initializer.sort(key=hides)
            del graph.initializer[len(graph.initializer) - len(external) :]
        for node in graph.node:
            values = [a for a in node.attribute if a.name == "value" and a.HasField("t")]
            if node.op_type == "Constant" and values and is_external(values[0].t):
                name = f"{node.output[0]}::onnx-light-constant"
                hidden[name] = (values[0].t.data_type, list(values[0].t.dims))
                node.op_type, node.domain = "Identity", ""
                del node.attribute[:]
                node.input[:] = [name]
    declared = {v.name for v in model.graph.input}
    model.graph.input.extend(
        tensor_value_info(name, elem, dims)
        for name, (elem, dims) in hidden.items()
        if name not in declared
    )


def infer_shapes(model: onnx.ModelProto) -> None:
    """Add to ``model`` the types and shapes onnx infers, without reading a weight.

    What ``model.CopyFrom(onnx.shape_inference.infer_shapes(model))`` does with
    the weights loaded (value_info of every graph, inputs and outputs
    completed), but for the shapes that depend on an external tensor's
    values, and without replacing the model's objects.

    Args:
        model: changed in place.

    Raises:
        onnx.shape_inference.InferenceError: as onnx raises it (a malformed
            model; node errors are not raised, as in onnx's default mode).
    """
    read = {name for graph in _graphs(model.graph) for node in graph.node for name in node.input}
    copy, hidden = _inference_copy(model, read)
    _hide_external(copy, hidden)
    inferred = onnx.shape_inference.infer_shapes(copy)
    for mine, theirs in zip(_graphs(model.graph), _graphs(inferred.graph), strict=True):
        for ours, inferred_ones in ((mine.input, theirs.input), (mine.output, theirs.output)):
            for value, new in zip(ours, inferred_ones):  # the hidden inputs come last
                value.CopyFrom(new)
        del mine.value_info[:]
        mine.value_info.extend(theirs.value_info)
