"""The graph rules of onnxruntime's float16 converter, run on a model without its weights.

:func:`convert_graph` makes of a model loaded with ``load_external_data=False``
the graph ``onnxruntime.transformers.float16.convert_float_to_float16``
(onnxruntime 1.32) makes of the same model loaded with its weights, with the
same parameters and defaults: which nodes stay float32 (the block lists), which
value types, attributes and initializers become float16, the Cast nodes between
the two, under the same names. The weights are never read: a tensor with
external data only gets FLOAT16 as its ``data_type``, and the caller converts
its bytes as it copies them (with :func:`~onnx_light.onnx._write.clip.clip_to_float16`,
the rule onnxruntime's converter applies in memory). Inline tensors are
converted here, bit for bit as onnxruntime's converter converts them.

Where onnxruntime's converter is wrong, this is not: it appends every new Cast
to the main graph's node list, even one that reads or feeds a node of a
subgraph, so ``onnx.checker`` refuses its output (and onnxruntime too when a
Cast reads a subgraph's value); here each Cast is inserted where it keeps its
graph sorted, in the graph of the nodes it serves, with its value_info there
(:mod:`.insert`). It reads each converted initializer's bytes for its shape
(``numpy_helper.to_array``): the dims say it. And its shape inference, on a
model without weights, loses the types after any node that reads an external
tensor's values: :mod:`.infer` keeps them.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper

from .._options import (
    LARGEST_FLOAT16,
    SMALLEST_FLOAT16,
    check_limits,
)
from .._read.tensors import is_external
from .._write.clip import clip_to_float16
from .infer import infer_shapes, tensor_value_info
from .insert import Insertion, Scope, insert_nodes

__all__ = ["ALWAYS_FLOAT_INPUTS", "DEFAULT_OP_BLOCK_LIST", "GraphResult", "convert_graph"]

# onnxruntime 1.32's lists (onnxruntime/transformers/float16.py)
DEFAULT_OP_BLOCK_LIST = (
    "ArrayFeatureExtractor", "Binarizer", "CastMap", "CategoryMapper", "DictVectorizer",
    "FeatureVectorizer", "Imputer", "LabelEncoder", "LinearClassifier", "LinearRegressor",
    "Normalizer", "OneHotEncoder", "RandomUniformLike", "SVMClassifier", "SVMRegressor",
    "Scaler", "TreeEnsembleClassifier", "TreeEnsembleRegressor", "TreeEnsemble", "ZipMap",
    "NonMaxSuppression", "TopK", "RoiAlign", "Range", "CumSum", "Min", "Max", "Upsample",
)  # fmt: skip
# inputs kept float32 (op type -> input indices); opset <= 10 moves Resize's scales to 1
ALWAYS_FLOAT_INPUTS = {"Resize": (2,), "GroupNorm": (1, 2), "SkipGroupNorm": (1, 2)}
_DTYPE_OPS = (
    "EyeLike", "Multinomial", "RandomNormal", "RandomNormalLike", "RandomUniform",
    "RandomUniformLike", "SequenceEmpty", "Bernoulli",
)  # fmt: skip
_FLOAT_BY_DEFAULT = ("RandomNormal", "RandomUniform", "SequenceEmpty")  # dtype optional
_FLOAT, _FLOAT16 = TensorProto.FLOAT, TensorProto.FLOAT16


@dataclass
class GraphResult:
    """What :func:`convert_graph` changed in the model's tensors.

    Attributes:
        external: ``(name, tensor)`` of each tensor with external data whose
            ``data_type`` became FLOAT16, initializers and attribute tensors in
            the order converted; ``tensor`` is the model's own object, its
            ``external_data`` untouched: its bytes are still float32, for the
            caller to convert.
        converted_inline: inline tensors converted in memory.
        clipped: ``{name: values the clipping changed}``, one entry per inline
            tensor converted (0 included; two tensors of one name add up). An
            unnamed attribute tensor is named ``NODE.ATTRIBUTE`` (the node's
            op type when it has no name).
    """

    external: list[tuple[str, TensorProto]] = field(default_factory=list)
    converted_inline: int = 0
    clipped: dict[str, int] = field(default_factory=dict)


def _retyped(
    info: onnx.ValueInfoProto | TensorProto, name: str, elem_type: int
) -> onnx.ValueInfoProto:
    """A copy of ``info`` for the value ``name`` of ``elem_type`` (onnxruntime's way:
    a sequence's copy becomes a tensor of that type); of an initializer, the value
    info onnxruntime makes of it (its dims), made only when a Cast needs it."""
    if isinstance(info, TensorProto):
        return tensor_value_info(name, elem_type, info.dims)
    copy = onnx.ValueInfoProto()
    copy.CopyFrom(info)
    copy.name = name
    copy.type.tensor_type.elem_type = elem_type
    return copy


@dataclass(eq=False)
class _Tracker:
    """A float32 initializer and whether a float16 node uses it (onnxruntime's converter
    also lists the float32 ones, only to log them)."""

    tensor: TensorProto
    fp16: bool = False


@dataclass(frozen=True)
class _Settings:
    keep_io_types: bool | frozenset[str]
    op_block_list: frozenset[str]
    node_block_list: frozenset[str]
    min_positive_val: float
    max_finite_val: float
    force_fp16_initializers: bool
    force_fp16_inputs: dict[str, tuple[int, ...]]
    always_float: dict[str, tuple[int, ...]]


class _Rules:
    """One run of the rules over a model, in onnxruntime's order (a breadth-first walk:
    the main graph, its nodes' attributes, their subgraphs...), so that every name,
    and the value_info each new Cast copies, is the one onnxruntime's converter picks."""

    def __init__(self, model: onnx.ModelProto, settings: _Settings) -> None:
        self.model, self.settings = model, settings
        self.main = Scope(model.graph)
        # its value_info_list, the first of each name (an initializer: the tensor itself)
        self.float16: dict[str, onnx.ValueInfoProto | TensorProto] = {}
        self.renamed: dict[str, str] = {}
        self.kept_io: set[str] = set()
        self.trackers: dict[str, _Tracker] = {}
        self.blocked: list[tuple[onnx.NodeProto, Scope]] = []
        self.mixed: list[tuple[onnx.NodeProto, Scope]] = []
        self.casts: list[Insertion] = []
        self.to_float: dict[str, Insertion] = {}
        self.graphs: list[onnx.GraphProto] = []  # every graph walked
        self.result = GraphResult()

    def run(self) -> GraphResult:
        """The rules, in onnxruntime's order; the Casts inserted last."""
        settings = self.settings
        self.io_casts()
        level: list[tuple] = [(self.main,)]
        while level:
            following: list[tuple] = []
            for item in level:
                if len(item) == 1:
                    self.visit_graph(item[0], following)
                else:
                    self.visit_attribute(*item, following)
            level = following
        for tracker in self.trackers.values():
            if settings.force_fp16_initializers or tracker.fp16:
                tensor = tracker.tensor
                self.convert(tensor, tensor.name)
                self.float16.setdefault(tensor.name, tensor)  # its value info, when needed
        for node, scope in self.mixed:
            forced = settings.force_fp16_inputs.get(node.op_type, ())
            for i, name in enumerate(node.input):
                fixed = i in settings.always_float[node.op_type] and i not in forced
                if fixed and name in self.float16:
                    node.input[i] = self.cast_to_float(name, scope)
        for node, scope in self.blocked:
            for i, name in enumerate(node.input):
                if name in self.float16:
                    node.input[i] = self.cast_to_float(name, scope)
            for i, name in enumerate(node.output):
                if name in self.float16:
                    out = name + "_cast_to_fp16"
                    cast = helper.make_node("Cast", [out], [name], to=10, name=out + "_node")
                    self.add(cast, _retyped(self.float16[name], out, _FLOAT), True, [scope])
                    node.output[i] = out
        self.keep_float_types()
        insert_nodes(self.casts)
        return self.result

    def keep_float_types(self) -> None:
        """An initializer that stays float32 keeps a float32 type where the graph declares
        one (value_info, an input of the same name). onnxruntime's converter makes every
        float value_info float16, so its output declares ``float16`` for a float32
        tensor (Resize's scales, as torch's dynamo exporter declares them), which
        ``onnx.checker``'s full check refuses; its nodes are kept as they are."""
        stay = {n for n, t in self.trackers.items() if t.tensor.data_type == _FLOAT}
        if not stay:
            return
        for graph in self.graphs:
            for value in itertools.chain(graph.input, graph.value_info):
                if value.name in stay and value.type.tensor_type.elem_type == _FLOAT16:
                    value.type.tensor_type.elem_type = _FLOAT

    def add(self, node: onnx.NodeProto, info, after: bool, scopes: list[Scope]) -> Insertion:
        cast = Insertion(node, info, after, scopes)
        self.casts.append(cast)
        return cast

    def io_casts(self) -> None:
        """Casts after the graph inputs and before the outputs kept float32."""
        graph, keep = self.model.graph, self.settings.keep_io_types
        for kind, values in (("input", graph.input), ("output", graph.output)):
            for i, value in enumerate(values):
                if value.type.tensor_type.elem_type != _FLOAT or not (
                    keep is True or (keep is not False and value.name in keep)
                ):
                    continue
                name = f"graph_{kind}_cast_{i}"
                self.renamed[value.name] = name
                self.kept_io.add(value.name)
                info = _retyped(value, name, _FLOAT16)
                if kind == "input":
                    node = helper.make_node(
                        "Cast", [value.name], [name], to=_FLOAT16, name=f"graph_input_cast{i}"
                    )
                else:
                    node = helper.make_node(
                        "Cast", [name], [value.name], to=1, name=f"graph_output_cast{i}"
                    )
                self.add(node, info, kind == "output", [self.main])
                self.float16.setdefault(name, info)

    def visit_graph(self, scope: Scope, following: list[tuple]) -> None:
        """Its initializers tracked, its nodes sorted into blocked, mixed and float16 (their
        attributes walked next), then its float value types made float16."""
        graph, settings = scope.graph, self.settings
        self.graphs.append(graph)
        for tensor in graph.initializer:
            if tensor.data_type == _FLOAT:
                if tensor.name in self.trackers:
                    raise ValueError(
                        f"initializer {tensor.name!r} is defined twice (in graph {graph.name!r} "
                        "and an enclosing one): the float16 rules track initializers by name, "
                        "as onnxruntime's converter does (it fails on an assert); rename one"
                    )
                self.trackers[tensor.name] = _Tracker(tensor)
        for node in graph.node:
            for names in (node.input, node.output):
                for i, name in enumerate(names):
                    if name in self.renamed:
                        names[i] = self.renamed[name]
            blocked = (
                node.op_type in settings.op_block_list or node.name in settings.node_block_list
            )
            always = settings.always_float.get(node.op_type, ())
            forced = settings.force_fp16_inputs.get(node.op_type, ())
            for i, name in enumerate(node.input):
                tracker = self.trackers.get(name)
                if tracker is not None and not (blocked or (i in always and i not in forced)):
                    tracker.fp16 = True
            if blocked:
                self.blocked.append((node, scope))
                continue
            _retype_attributes(node)
            if (
                node.op_type not in settings.always_float
                or node.op_type in settings.force_fp16_inputs
            ):
                following.extend((a, node, scope) for a in node.attribute)
            else:
                self.mixed.append((node, scope))
        for value in itertools.chain(graph.input, graph.output, graph.value_info):
            if value.name in self.kept_io:
                continue
            if value.type.tensor_type.elem_type == _FLOAT:
                value.type.tensor_type.elem_type = _FLOAT16
                self.float16.setdefault(value.name, value)
            if value.type.HasField("sequence_type"):
                inner = value.type.sequence_type.elem_type.tensor_type
                if inner.elem_type == _FLOAT:
                    inner.elem_type = _FLOAT16
                    self.float16.setdefault(value.name, value)

    def visit_attribute(self, attribute, node, scope: Scope, following: list[tuple]) -> None:
        """Its subgraphs walked next, its tensors converted."""
        for graph in _subgraphs_of(attribute):
            following.append((scope.child(graph),))
        label = f"{node.name or node.op_type}.{attribute.name}"
        if attribute.HasField("t"):
            self.convert(attribute.t, attribute.t.name or label)
        for tensor in attribute.tensors:
            self.convert(tensor, tensor.name or label)

    def cast_to_float(self, name: str, scope: Scope) -> str:
        """The float32 copy of the float16 value ``name`` (one Cast per value, shared)."""
        cast = self.to_float.get(name)
        if cast is None:
            out = name + "_cast_to_fp32"
            node = helper.make_node("Cast", [name], [out], to=1, name=out + "_node")
            cast = self.add(node, _retyped(self.float16[name], out, _FLOAT), False, [])
            self.to_float[name] = cast
        cast.scopes.append(scope)
        return cast.node.output[0]

    def convert(self, tensor: TensorProto, label: str) -> None:
        """A FLOAT tensor becomes FLOAT16: its inline values converted, external ones listed."""
        if tensor.data_type != _FLOAT:
            return
        tensor.data_type = _FLOAT16
        if is_external(tensor):
            self.result.external.append((label, tensor))
            return
        clipped = 0
        low, high = self.settings.min_positive_val, self.settings.max_finite_val
        if tensor.float_data:  # onnxruntime's way: float64 values, bits to int32_data
            half, count = clip_to_float16(np.array(tensor.float_data), low, high)
            tensor.int32_data[:] = half.view(np.uint16).tolist()
            tensor.float_data[:] = []
            clipped += count
        if tensor.raw_data:
            half, count = clip_to_float16(np.frombuffer(tensor.raw_data, "<f4"), low, high)
            tensor.raw_data = half.astype("<f2", copy=False).tobytes()
            clipped += count
        self.result.converted_inline += 1
        self.result.clipped[label] = self.result.clipped.get(label, 0) + clipped


def _subgraphs_of(attribute: onnx.AttributeProto) -> list[onnx.GraphProto]:
    return ([attribute.g] if attribute.HasField("g") else []) + list(attribute.graphs)


def _retype_attributes(node: onnx.NodeProto) -> None:
    """A float16 node's attributes that name float32: Cast's ``to``, the random and
    EyeLike ops' ``dtype``, ConstantOfShape's default value."""
    if node.op_type == "Cast":
        for attribute in node.attribute:
            if attribute.name == "to" and attribute.i == _FLOAT:
                attribute.i = _FLOAT16
                break
    if node.op_type in _DTYPE_OPS:
        dtypes = [a for a in node.attribute if a.name == "dtype"]
        for attribute in dtypes:
            if attribute.i == _FLOAT:
                attribute.i = _FLOAT16
        if node.op_type in _FLOAT_BY_DEFAULT and not dtypes:
            node.attribute.extend([helper.make_attribute("dtype", _FLOAT16)])
    if (
        node.domain in ("", "ai.onnx")
        and node.op_type == "ConstantOfShape"
        and not any(a.name == "value" for a in node.attribute)
    ):
        value = helper.make_tensor("value", _FLOAT16, [1], [0])
        node.attribute.extend([helper.make_attribute("value", value)])


def _names(value, what: str) -> frozenset[str]:
    if isinstance(value, str) or not isinstance(value, (Sequence, set, frozenset)):
        raise TypeError(f"{what} must be a list of names, not {type(value).__name__}")
    if not all(isinstance(v, str) for v in value):
        raise TypeError(f"{what} must hold names (str)")
    return frozenset(value)


def convert_graph(
    model: onnx.ModelProto,
    *,
    keep_io_types: bool | Sequence[str] = False,
    op_block_list: Sequence[str] | None = None,
    node_block_list: Sequence[str] | None = None,
    min_positive_val: float = SMALLEST_FLOAT16,
    max_finite_val: float = LARGEST_FLOAT16,
    force_fp16_initializers: bool = False,
    force_fp16_inputs: Mapping[str, Sequence[int]] | None = None,
    disable_shape_infer: bool = False,
) -> GraphResult:
    """Convert a model's graph to float16 in place, by onnxruntime's converter's rules.

    The model is changed as ``onnxruntime.transformers.float16.
    convert_float_to_float16`` (onnxruntime 1.32, same parameters) changes the
    model loaded with its weights: float32 value types, attribute tensors and
    the initializers a float16 node uses become float16; blocked nodes stay
    float32 behind Casts (``X_cast_to_fp32`` before, ``Y_cast_to_fp16``
    after); ``keep_io_types`` adds ``graph_input_cast_I`` /
    ``graph_output_cast_I``. Its inline tensors are converted in memory with
    its clipping rule; a tensor with external data only gets FLOAT16 as its
    ``data_type`` and is listed: its bytes are the caller's to convert. Unlike
    onnxruntime's converter, each new Cast is placed where it keeps the graph
    topologically sorted, in the graph of the nodes it serves (the output
    passes ``onnx.checker`` when the input does).

    Args:
        model: loaded without its weights (or with them); changed in place,
            its objects kept (a node or tensor taken from it stays its own).
        keep_io_types: True keeps every float32 graph input and output in
            float32; a list (or tuple, set), those of these names.
        op_block_list: op types left in float32 (None: ``DEFAULT_OP_BLOCK_LIST``).
        node_block_list: node names left in float32.
        min_positive_val: smallest magnitude kept (5.96e-08 to 65504).
        max_finite_val: largest finite magnitude kept (5.96e-08 to 65504, at
            least ``min_positive_val``).
        force_fp16_initializers: convert every float32 initializer the walk
            meets, even one only blocked nodes use.
        force_fp16_inputs: ``{op type: input indices}`` made float16 though
            ``ALWAYS_FLOAT_INPUTS`` keeps them float32.
        disable_shape_infer: skip onnx's shape inference (run on the model
            without its weights: small whatever their size; see :mod:`.infer`).

    Returns:
        A :class:`GraphResult`: the external tensors retyped, the inline
        ones converted and what the clipping changed in each.

    Raises:
        TypeError: ``model`` is not a ModelProto, or a setting has the wrong type.
        ValueError: a limit is outside float16's positive range (5.96e-08 to
            65504, infinities and NaN refused), ``min_positive_val`` is above
            ``max_finite_val``, or two initializers of the walked graphs share a name.
    """
    if not isinstance(model, onnx.ModelProto):
        raise TypeError(f"convert_graph takes an onnx.ModelProto, not {type(model).__name__}")
    check_limits(min_positive_val, max_finite_val)  # the command line's rule too
    if keep_io_types is None:  # as onnxruntime reads it
        keep_io_types = False
    if not isinstance(keep_io_types, bool):
        keep_io_types = _names(keep_io_types, "keep_io_types")
    blocked_ops = _names(
        DEFAULT_OP_BLOCK_LIST if op_block_list is None else op_block_list, "op_block_list"
    )
    blocked_nodes = _names([] if node_block_list is None else node_block_list, "node_block_list")
    forced = {k: tuple(v) for k, v in (force_fp16_inputs or {}).items()}
    if not disable_shape_infer:
        infer_shapes(model)
    opset = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=11)
    always_float = dict(ALWAYS_FLOAT_INPUTS)
    if opset <= 10:  # Resize(X, scales): scales at 1
        always_float["Resize"] = (1,)
    settings = _Settings(
        keep_io_types=keep_io_types,
        op_block_list=blocked_ops,
        node_block_list=blocked_nodes,
        min_positive_val=min_positive_val,
        max_finite_val=max_finite_val,
        force_fp16_initializers=bool(force_fp16_initializers),
        force_fp16_inputs=forced,
        always_float=always_float,
    )
    return _Rules(model, settings).run()
