"""The graph rules of onnxruntime's weight-only quantizer, run on a model without its weights.

:func:`quantize_graph` makes of a model read without its weights the graph
onnxruntime's ``MatMulNBitsQuantizer`` (onnxruntime 1.32, its default
algorithm, ``DefaultWeightOnlyQuantizer``) makes of the same model loaded
with them: the same nodes replaced, under the same names, with the same
attributes, and the same new initializers (``W_Q4`` / ``W_Q8``, ``W_scales``,
``W_zero_points``, appended to the graph that holds ``W``). Its rules:

- a ``MatMul`` whose B is an initializer (of its graph or an enclosing one)
  of 2 dims, or more whose leading ones are 1, becomes
  ``com.microsoft.MatMulNBits`` (K, N, bits, block_size, and accuracy_level
  when not 0), followed by its output reshape when B had more dims than A
  may have (``nbits_reshape.py``); a node named in ``nodes_to_exclude``, a B
  that is not an initializer, has fewer than 2 dims or a batch stays;
- with ``Gather`` in the op types, a ``Gather`` of a float32 or float16
  initializer table of 2 dims or more becomes ``GatherBlockQuantized`` (4
  bits only, int4 values along axis 1);
- the weights no node reads any more are removed, with their graph inputs;
  the ``com.microsoft`` opset is imported.

Beyond it: a ``Gemm`` (``Gemm`` in the op types) whose B is a constant
initializer, transB 0 or 1, transA 0, alpha and beta 1, and C absent or a
constant of N values becomes ``MatMulNBits`` with C as its bias (onnxruntime's
quantizer leaves every Gemm as it is). Where this differs, it says so: each
node of the op types left is reported with the reason; a weight of a dtype
other than float32, float16 or bfloat16 is refused by name (onnxruntime
fails on it), and an integer Gather table is left (onnxruntime would
"quantize" it); the default opset is raised to 21 and the IR version to 10
(int4 types) only when a Gather is quantized (onnxruntime does it whenever
Gather is among the op types); only the weights replaced are removed when
unused (onnxruntime removes every unused initializer); the ``com.microsoft``
opset is imported only when a node is replaced (onnxruntime imports it
always); at 8 bits a Gather is left (onnxruntime makes it int4 whatever the
bits); a name the quantizer would make that its graph already uses (an
existing ``W_Q4``), or that two forms of one weight would both take (a
MatMul's B that is also a Gather's table), is refused before anything is
written (onnxruntime writes a model its checker or its session refuses).

A weight in memory (a small one the scan kept inline) is quantized here; an
external one becomes references to its bytes, each with a
:class:`~onnx_light.onnx._write.quantize.QuantPart` the writer quantizes
while it streams them (``_write/quantize.py``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .._dtypes import BFLOAT16, FLOAT, FLOAT16, dtype_name
from .._errors import shown
from .._read.tensors import is_external
from .._write.quantize import Quantization, QuantPart, quantize
from .nbits_reshape import output_reshape, static_rank

__all__ = [
    "MAX_BLOCK",
    "OP_TYPES",
    "QuantizedGraph",
    "Settings",
    "check_settings",
    "part_key",
    "quantize_graph",
]

OP_TYPES = ("MatMul", "Gemm", "Gather")
MS_DOMAIN = "com.microsoft"
MAX_BLOCK = 256  # MLAS's largest block (onnxruntime's quantizer fails beyond it)
_WEIGHT_DTYPES = (FLOAT, FLOAT16, BFLOAT16)  # MatMul and Gemm; Gather: float32 and float16
_TABLE_DTYPES = (FLOAT, FLOAT16)


@dataclass(frozen=True)
class Settings:
    """The quantizer's settings, checked (:func:`check_settings`)."""

    bits: int
    block_size: int
    symmetric: bool
    accuracy_level: int
    nodes_to_exclude: frozenset[str]
    op_types: frozenset[str]


def _names(value, what: str) -> tuple[str, ...]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise TypeError(f"{what} must be a list of names, e.g. [{value!r}], got {value!r}")
    names = tuple(value)
    for name in names:
        if not isinstance(name, str):
            raise TypeError(f"{what} must hold strings, got {name!r}")
    return names


def check_settings(
    bits, block_size, symmetric, accuracy_level, nodes_to_exclude, op_types
) -> Settings:
    """Check the quantizer's settings, before anything is read.

    Raises:
        TypeError: a setting of the wrong type (naming it).
        ValueError: bits not 4 or 8, a block size that is not a power of two
            from 16 to 256, an accuracy level outside 0 to 4, an op type that
            cannot be quantized.
    """
    for name, value in (
        ("bits", bits),
        ("block_size", block_size),
        ("accuracy_level", accuracy_level),
    ):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"{name} must be an int, got {value!r}")
    if bits not in (4, 8):
        raise ValueError(f"bits={bits}: only 4 and 8 bits are supported")
    if block_size < 16 or block_size > MAX_BLOCK or block_size & (block_size - 1):
        raise ValueError(
            f"block_size={block_size}: it must be a power of two, at least 16, at most "
            f"{MAX_BLOCK} (16, 32, 64, 128, 256), as MatMulNBits and onnxruntime's "
            "quantizer require"
        )
    if not 0 <= accuracy_level <= 4:
        raise ValueError(
            f"accuracy_level={accuracy_level}: it must be 0 (unset) to 4 (int8 compute), "
            "MatMulNBits's levels"
        )
    if not isinstance(symmetric, (bool, np.bool_)):
        raise TypeError(f"symmetric must be a bool, got {symmetric!r}")
    types = _names(op_types, "op_types")
    wrong = [t for t in types if t not in OP_TYPES]
    if wrong or not types:
        raise ValueError(
            f"op_types={list(types)}: the op types quantized are among {list(OP_TYPES)}"
            + (f" ({', '.join(map(repr, wrong))} is not)" if wrong else "")
        )
    return Settings(
        int(bits),
        int(block_size),
        bool(symmetric),
        int(accuracy_level),
        frozenset(_names(nodes_to_exclude, "nodes_to_exclude")),
        frozenset(types),
    )


@dataclass
class QuantizedGraph:
    """What :func:`quantize_graph` changed.

    Attributes:
        parts: ``{part_key(new tensor): QuantPart}``: the new tensors that
            are references to a weight's bytes, quantized by the writer.
        quantized: the nodes replaced, by name (``op_type #i in graph``
            when unnamed), with the weight each reads.
        skipped: nodes of the op types left as they are, with the reason.
        inline: weights quantized in memory (small ones held in the model).
    """

    parts: dict[tuple, QuantPart] = field(default_factory=dict)
    quantized: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    inline: int = 0


class _Pass:
    def __init__(self, model: onnx.ModelProto, settings: Settings, src: str) -> None:
        self.model, self.settings, self.src = model, settings, src
        self.result = QuantizedGraph()
        # what to append to the initializers, in onnxruntime's order: a weight's parts
        # ((id(weight), transposed) -> ...) after its last reader's, a reshape's constants
        self.pending: dict[tuple, tuple] = {}
        self.inserts: list[tuple[onnx.GraphProto, dict[int, list]]] = []  # children first
        self.replaced: list[tuple[onnx.GraphProto, onnx.TensorProto]] = []
        self.gather = False
        # the names of each graph and its subgraphs, before any change: a new tensor
        # appended to a graph takes none of them (a subgraph may hold a W_Q4 of its own);
        # each graph is kept with its names (an id is that of a live object)
        self.taken: dict[int, tuple[onnx.GraphProto, set[str]]] = {}
        _scope_names(model.graph, self.taken)
        self.made: dict[tuple, tuple] = {}  # (graph, new name) -> (key, target, reader)

    def label(self, node: onnx.NodeProto, graph: onnx.GraphProto, index: int) -> str:
        if node.name:
            return node.name
        return f"{node.op_type} #{index} in graph {graph.name!r}"

    def visit(self, stack: list[onnx.GraphProto]) -> None:
        graph = stack[-1]
        after: dict[int, list] = {}  # nodes that follow a replaced node, by its index
        for index, node in enumerate(graph.node):
            for attribute in node.attribute:  # onnxruntime's order: subgraphs first
                for sub in [attribute.g] if attribute.HasField("g") else attribute.graphs:
                    self.visit([*stack, sub])
            if node.op_type not in self.settings.op_types:
                continue
            label = self.label(node, graph, index)
            if node.name in self.settings.nodes_to_exclude:
                self.result.skipped[label] = "in nodes_to_exclude"
                continue
            rule = {"MatMul": self._matmul, "Gemm": self._gemm, "Gather": self._gather}
            why = rule[node.op_type](node, stack, label)
            if isinstance(why, list):
                after[index] = why
            elif why:
                self.result.skipped[label] = why
        if after:
            self.inserts.append((graph, after))

    def find(self, name: str, stack: list[onnx.GraphProto]):
        """The initializer ``name`` seen from the innermost graph, and its graph."""
        for graph in reversed(stack):
            for tensor in graph.initializer:
                if tensor.name == name:
                    return tensor, graph
        return None, None

    def weight(self, node, position: int, stack, what: str):
        """The constant weight input ``position`` of ``node``, or the reason there is none."""
        name = node.input[position] if len(node.input) > position else ""
        tensor, graph = self.find(name, stack) if name else (None, None)
        if tensor is None:
            return None, None, f"its {what} {name!r} is not an initializer"
        return tensor, graph, None

    def refuse_dtype(self, tensor, label: str, op: str) -> None:
        if tensor.data_type not in _WEIGHT_DTYPES:
            raise ValueError(
                f"{op} node {label!r} of {shown(self.src)} reads the weight {tensor.name!r} "
                f"of dtype {dtype_name(tensor.data_type)}: only float32, float16 and "
                "bfloat16 weights can be quantized; leave the node out with nodes_to_exclude"
            )

    def new_tensors(
        self, weight, graph, q: Quantization, transposed: bool, reader: str
    ) -> list[str]:
        """The names of the new initializers of ``weight`` quantized by ``q``; they are
        made once per weight (:meth:`make`), placed after its last reader's, as
        onnxruntime's clean-up leaves the last of the copies it makes per reader.

        Raises:
            ValueError: a name is one the model already uses, or one another form of
                the weight takes (a MatMul's B and a Gather's table).
        """
        key = (id(weight), transposed)
        base = weight.name + ("_T" if transposed else "")
        suffix = {"B": f"_Q{q.bits}", "data": "_Q4", "scales": "_scales"}
        names = [base + suffix.get(part, "_" + part) for part in q.outputs()]
        for name in names:
            made = self.made.setdefault((id(graph), name), (key, q.target, reader))
            what = f"{reader} of {shown(self.src)}: quantizing its weight {weight.name!r} makes"
            if made[:2] != (key, q.target):
                raise ValueError(
                    f"{what} the initializer {name!r}, which {made[2]} makes of it as "
                    f"{made[1]}: leave one of them out with nodes_to_exclude"
                )
            if name in self.taken[id(graph)][1]:
                raise ValueError(
                    f"{what} the initializer {name!r}, a name the model already uses: rename "
                    "that tensor, or leave the node out with nodes_to_exclude"
                )
        self.pending.pop(key, None)
        self.pending[key] = ("weight", weight, graph, q, names)
        _drop_input(graph, weight.name)
        if all(w is not weight for _, w in self.replaced):
            self.replaced.append((graph, weight))
        return names

    def make(self, weight, graph, q: Quantization, names: list[str]) -> None:
        """Append the new initializers: references to the weight's bytes (quantized by
        the writer), or, for a weight held in memory, quantized here."""
        values = None
        if not is_external(weight):  # small, in memory: quantized here
            array = numpy_helper.to_array(weight).reshape(q.shape[0], -1)
            if weight.data_type == BFLOAT16:
                array = array.view(np.uint16)  # its bits, as the writer reads them
            values = quantize(q, lambda first, count: array[first : first + count])
            self.result.inline += 1
        for name, (part, (dims, dtype)) in zip(names, q.outputs().items(), strict=True):
            tensor = graph.initializer.add()
            tensor.name = name
            tensor.data_type = dtype
            tensor.dims.extend(dims)
            if values is None:
                tensor.data_location = onnx.TensorProto.EXTERNAL
                tensor.external_data.extend(weight.external_data)
                self.result.parts[part_key(tensor)] = QuantPart(q, part)
            else:
                tensor.raw_data = np.ascontiguousarray(values[part]).tobytes()

    def _matmul(self, node, stack, label: str) -> str | None:
        weight, graph, why = self.weight(node, 1, stack, "B")
        if why:
            return why
        dims = list(weight.dims)
        if len(dims) < 2:
            return f"its B {weight.name!r} has fewer than 2 dims"
        if any(d != 1 for d in dims[:-2]):
            return f"its B {weight.name!r} has batch dims {dims[:-2]} (not all 1)"
        self.refuse_dtype(weight, label, "MatMul")
        self.replace(node, stack, label, weight, graph, dims[-2:], transposed=False, bias=None)
        if len(dims) == 2:
            return None
        rank = static_rank(node.input[0], stack)  # MatMulNBits gives A's rank
        if rank is not None and rank >= len(dims):
            return None
        output = node.output[0]
        pre = output + "_pre_reshape"
        node.output[0] = pre
        prefix = node.name or weight.name + f"_Q{self.settings.bits}"
        inits, nodes = output_reshape(node.input[0], dims, prefix, pre, output)
        self.pending[("reshape", id(node))] = ("constants", inits, graph)
        return nodes

    def _gemm(self, node, stack, label: str) -> str | None:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        if attrs.get("transA", 0):
            return "transA=1 (A is transposed)"
        if attrs.get("alpha", 1.0) != 1.0 or attrs.get("beta", 1.0) != 1.0:
            return (
                f"alpha={attrs.get('alpha', 1.0):g}, beta={attrs.get('beta', 1.0):g} "
                "(only 1 and 1 are quantized)"
            )
        weight, graph, why = self.weight(node, 1, stack, "B")
        if why:
            return why
        dims = list(weight.dims)
        if len(dims) != 2:
            return f"its B {weight.name!r} has {len(dims)} dims {dims}, not 2"
        transposed = bool(attrs.get("transB", 0))
        n = dims[0] if transposed else dims[1]
        bias = node.input[2] if len(node.input) > 2 and node.input[2] else None
        if bias is not None:
            c, _, _ = self.weight(node, 2, stack, "C")
            if c is None or list(c.dims) != [n]:
                return f"its C {bias!r} is not a constant of {n} values (a bias)"
        self.refuse_dtype(weight, label, "Gemm")
        self.replace(node, stack, label, weight, graph, dims, transposed=transposed, bias=bias)
        return None

    def replace(self, node, stack, label, weight, graph, dims, *, transposed, bias) -> None:
        s = self.settings
        q = Quantization(
            "MatMulNBits",
            weight.data_type,
            tuple(dims),
            s.bits,
            s.block_size,
            s.symmetric,
            transposed,
        )
        names = self.new_tensors(weight, graph, q, transposed, f"{node.op_type} node {label!r}")
        k, n = dims[::-1] if transposed else dims
        inputs = [node.input[0], *names]
        if bias is not None:
            inputs += [""] * (5 - len(inputs)) + [bias]
        kwargs = {"K": k, "N": n, "bits": s.bits, "block_size": s.block_size}
        if s.accuracy_level:
            kwargs["accuracy_level"] = s.accuracy_level
        new = helper.make_node(
            "MatMulNBits",
            inputs,
            [node.output[0]],
            name=node.name + f"_Q{s.bits}" if node.name else "",
            domain=MS_DOMAIN,
            **kwargs,
        )
        self.result.quantized[label] = weight.name
        node.CopyFrom(new)

    def _gather(self, node, stack, label: str) -> str | None:
        s = self.settings
        if s.bits != 4:
            return "Gather is quantized at 4 bits only"
        weight, graph, why = self.weight(node, 0, stack, "data")
        if why:
            return why
        dims = list(weight.dims)
        if len(dims) < 2:
            return f"its data {weight.name!r} has {len(dims)} dims: no axis 1 to quantize"
        if weight.data_type not in _TABLE_DTYPES:
            return f"its data {weight.name!r} is {dtype_name(weight.data_type)}, not a float weight"
        q = Quantization(
            "GatherBlockQuantized", weight.data_type, tuple(dims), 4, s.block_size, s.symmetric
        )
        names = self.new_tensors(weight, graph, q, False, f"Gather node {label!r}")
        axis = next((helper.get_attribute_value(a) for a in node.attribute if a.name == "axis"), 0)
        new = helper.make_node(
            "GatherBlockQuantized",
            [names[0], node.input[1], *names[1:]],
            [node.output[0]],
            name=node.name + "_Q4" if node.name else "",
            domain=MS_DOMAIN,
            gather_axis=axis,
            quantize_axis=1,
            block_size=s.block_size,
        )
        self.result.quantized[label] = weight.name
        self.gather = True
        node.CopyFrom(new)

    def finish(self) -> None:
        """Remove the weights no node reads any more; import the domain (and, for int4
        tables, the opset and IR version they need)."""
        for entry in self.pending.values():
            if entry[0] == "weight":
                self.make(*entry[1:])
            else:
                entry[2].initializer.extend(entry[1])
        read = set()
        _reads(self.model.graph, read)
        for graph, weight in self.replaced:
            if weight.name not in read:
                _drop_input(graph, weight.name)
                for i, tensor in enumerate(graph.initializer):
                    if tensor is weight or tensor.name == weight.name and tensor == weight:
                        del graph.initializer[i]
                        break
        for graph, after in self.inserts:  # innermost first: copies carry their changes
            nodes = []
            for index, node in enumerate(graph.node):
                kept = onnx.NodeProto()
                kept.CopyFrom(node)  # the list is cleared next
                nodes += [kept, *after.get(index, ())]
            graph.ClearField("node")
            graph.node.extend(nodes)
        if not self.result.quantized:
            return
        _set_opset(self.model, MS_DOMAIN, 1)
        if self.gather:
            for opset in self.model.opset_import:
                if opset.domain in ("", "ai.onnx") and opset.version < 21:
                    opset.version = 21
            self.model.ir_version = max(self.model.ir_version, 10)


def part_key(tensor: onnx.TensorProto) -> tuple:
    """A new tensor's key in :attr:`QuantizedGraph.parts`: its name and its reference
    (node lists are rebuilt, so the objects are not the ones made)."""
    return tensor.name, tuple((e.key, e.value) for e in tensor.external_data)


def _reads(graph: onnx.GraphProto, read: set[str]) -> None:
    """Every name a node of ``graph`` or of its subgraphs reads, and its outputs."""
    read.update(o.name for o in graph.output)
    for node in graph.node:
        read.update(node.input)
        for attribute in node.attribute:
            for sub in [attribute.g] if attribute.HasField("g") else attribute.graphs:
                _reads(sub, read)


def _scope_names(graph: onnx.GraphProto, taken: dict[int, tuple]) -> set[str]:
    """``taken[id(g)]``: ``g`` and every name it and its subgraphs define or read
    (initializers, inputs, outputs, node inputs and outputs), for ``graph`` and each of
    its subgraphs."""
    names = {t.name for t in graph.initializer}
    names.update(t.values.name for t in graph.sparse_initializer)
    names.update(v.name for v in graph.input)
    names.update(v.name for v in graph.output)
    for node in graph.node:
        names.update(node.input)
        names.update(node.output)
        for attribute in node.attribute:
            for sub in [attribute.g] if attribute.HasField("g") else attribute.graphs:
                names |= _scope_names(sub, taken)
    taken[id(graph)] = graph, names
    return names


def _drop_input(graph: onnx.GraphProto, name: str) -> None:
    for i, value in enumerate(graph.input):
        if value.name == name:
            del graph.input[i]
            return


def _set_opset(model: onnx.ModelProto, domain: str, version: int) -> None:
    for opset in model.opset_import:
        if opset.domain == domain:
            opset.version = version
            return
    model.opset_import.add(domain=domain, version=version)


def quantize_graph(model: onnx.ModelProto, settings: Settings, src: str) -> QuantizedGraph:
    """Replace the nodes onnxruntime's quantizer replaces (and Gemms), in place.

    Args:
        model: read without its weights (external references, small inline
            tensors in memory); modified in place.
        settings: checked settings.
        src: the source ``.onnx``, for messages.

    Returns:
        A :class:`QuantizedGraph`.

    Raises:
        ValueError: ``nodes_to_exclude`` names a node the model does not have,
            a weight to quantize is not float32, float16 or bfloat16 (naming the node,
            the weight and its dtype), or a new initializer's name is one the model
            already uses or one another form of the same weight takes (naming the
            node, the weight and the name).
    """
    names: set[str] = set()
    _node_names(model.graph, names)
    missing = sorted(settings.nodes_to_exclude - names)
    if missing:
        raise ValueError(
            f"nodes_to_exclude names {len(missing)} node(s) {shown(src)} does not have: "
            + ", ".join(map(repr, missing[:5]))
            + (" ..." if len(missing) > 5 else "")
            + " (node names are case-sensitive)"
        )
    run = _Pass(model, settings, src)
    run.visit([model.graph])
    run.finish()
    return run.result


def _node_names(graph: onnx.GraphProto, names: set[str]) -> None:
    for node in graph.node:
        names.add(node.name)
        for attribute in node.attribute:
            for sub in [attribute.g] if attribute.HasField("g") else attribute.graphs:
                _node_names(sub, names)
