"""convert_float_to_float16: a model of any size converted to float16 without loading it.

The graph is converted on the model scanned without its weights (small, whatever
the weights' size: shape inference and the checker run on it), by the graph
rules of onnxruntime's own converter (``_graph/float16.py``). The weights follow:
each float32 tensor the rules turn into float16 keeps its reference to the
float32 bytes, and the writer clips and casts those bytes while it streams them
into the new weights file (``_write/convert.py``), so memory holds a few chunks.
The rest is ``save_edited``'s compact copy: the one planner, the copy engine for
the bytes that do not change, the one ending.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ._commit.atomic import folder_lock
from ._commit.prune import remove, unreferenced
from ._commit.targets import destination_path, is_in_place, overwrite_hint, weights_destination
from ._dtypes import FLOAT, FLOAT16, Conversion
from ._graph.float16 import convert_graph
from ._options import SerializeOptions, check_progress, check_size_threshold
from ._read.scan import scan_model
from ._read.sources import SourceFiles, kernel_path
from ._read.tensors import Cast, iter_tensors
from ._write.save_plan import SavePlan
from ._write.shards import default_weights

__all__ = ["ConvertResult", "convert_float_to_float16"]


@dataclass
class ConvertResult:
    """What :func:`convert_float_to_float16` did.

    Attributes:
        size: bytes of the new weights files, padding included (0: none written).
        converted: external tensors whose bytes were converted while copied.
        converted_inline: tensors converted in the ``.onnx`` itself (small
            ones, and attribute tensors held inline).
        bytes_read: bytes of the source's weights read.
        bytes_written: bytes of tensor data written to the weights files.
        clipped: ``{tensor name: values changed by the clipping}``, only the
            tensors where the clipping changed at least one value: magnitudes
            above ``max_finite_val`` (from 65520 on, float16 would have made
            them infinite) or strictly between 0 and ``min_positive_val``
            (under about 2.98e-08, float16 would have made them 0).
        weights_paths: the weights files written.
        unreferenced: in place, weights files the old model read that no
            ``.onnx`` of its folder references any more.
        removed: those deleted (``remove_unreferenced=True``).
    """

    size: int
    converted: int
    converted_inline: int
    bytes_read: int
    bytes_written: int
    clipped: dict[str, int] = field(default_factory=dict)
    weights_paths: list[str] = field(default_factory=list)
    unreferenced: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)

    @property
    def values_clipped(self) -> int:
        """The values the clipping changed, over every tensor."""
        return sum(self.clipped.values())


def _casts(model, external, min_positive_val: float, max_finite_val: float) -> dict:
    """``{tensor path: Cast}`` of the external tensors the graph rules retyped: their
    float32 bytes clipped and cast as onnxruntime's converter does. The limits keep
    their type: a numpy float64 one makes numpy compare in float64 (a NaN payload
    comes out quiet), a Python float in float32, there as here."""
    conversion = Conversion(FLOAT, FLOAT16, min_positive_val, max_finite_val)
    retyped = {id(tensor) for _, tensor in external}
    return {
        site.path: Cast(conversion, site)
        for site in iter_tensors(model)
        if id(site.tensor) in retyped
    }


def convert_float_to_float16(
    src_onnx_path: str | os.PathLike,
    dst_onnx_path: str | os.PathLike,
    dst_weights_path: str | os.PathLike | None = None,
    *,
    keep_io_types: bool | Sequence[str] = False,
    op_block_list: Sequence[str] | None = None,
    node_block_list: Sequence[str] | None = None,
    min_positive_val: float = 5.96e-08,
    max_finite_val: float = 65504.0,
    force_fp16_initializers: bool = False,
    alignment: int = 4096,
    size_threshold: int = 1024,
    max_shard_size: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    durable: bool = False,
    drop_behind: bool | None = None,
    remove_unreferenced: bool = False,
) -> ConvertResult:
    """Convert a model's float32 graph and weights to float16, streaming its weights.

    The result is the graph onnxruntime's converter
    (``onnxruntime.transformers.float16.convert_float_to_float16``, same
    parameters and defaults) makes of the model loaded with its weights, and the
    same weights bit for bit: its clipping rule applied to the streamed bytes
    (values strictly between 0 and ``min_positive_val`` in magnitude become
    ``min_positive_val``, finite values beyond ``max_finite_val`` become
    ``max_finite_val``, the sign kept; 0, NaN and infinities unchanged), then
    numpy's float16 cast. Unlike it, the output is topologically sorted (it
    passes ``onnx.checker``), and no weight is ever held in memory: the graph
    is converted on the model scanned without its weights, which is small (a
    model whose weights exceed 2 GiB converts as any other), and the bytes are
    converted chunk by chunk on their way to the new weights file, at offsets
    aligned to ``alignment``. Tensors that stay float32 (used only by blocked
    nodes) are copied file to file.

    ``dst == src`` converts in place: one commit replaces the model and its
    weights; the old weights files it no longer reads are listed in
    ``unreferenced`` (deleted with ``remove_unreferenced``). Otherwise the
    source's files are never modified.

    Args:
        src_onnx_path: the float32 model.
        dst_onnx_path: the float16 model (may be ``src_onnx_path``).
        dst_weights_path: its weights file, inside the folder of
            ``dst_onnx_path``, read as ``save``'s ``location``. None: ``DST.data``.
        keep_io_types: keep the graph's float32 inputs and outputs (True), or
            those named in a list, with Cast nodes after and before them.
        op_block_list: op types left in float32 (None: onnxruntime's
            ``DEFAULT_OP_BLOCK_LIST``: TopK, Range, Upsample, the ML ops...; a
            list replaces it). Resize's scales and GroupNorm's gamma and beta
            stay float32 by another rule, as there.
        node_block_list: node names left in float32.
        min_positive_val: smallest magnitude kept (at least 5.96e-08, the
            smallest float16 subnormal).
        max_finite_val: largest finite magnitude kept (at most 65504).
        force_fp16_initializers: convert float32 initializers even when only
            blocked nodes use them.
        alignment: offsets in the new weights file are multiples of it
            (0 or 1: dense; else a power of two up to 1 GiB).
        size_threshold: inline tensors (held in the ``.onnx``) of at least
            this many bytes (their size in the source) move to the weights
            file; smaller ones stay inline, converted in memory: with a
            threshold above every tensor, a single-file model stays one file.
            External tensors stay external, whatever their size (the usual
            recipe's ``onnx.save`` writes those under 1024 bytes inline).
        max_shard_size: split the weights into files of at most this many
            bytes (named as onnx-ir names shards). None: one file.
        progress: ``progress(done_bytes, total_bytes)`` while the weights are
            written, as in :func:`~onnx_light.onnx.align_external_data_streaming`
            (whose docstring shows a tqdm bar).
        durable: flush the new files and their folder to the disk before
            returning (``fsync``).
        drop_behind: drop the copied ranges from the page cache as they are
            written (None: when they exceed the memory available; the
            source's only when it is cold), as in
            :func:`~onnx_light.onnx.align_external_data_streaming`.
        remove_unreferenced: in place, delete the old weights files no
            ``.onnx`` of the folder references any more.

    Returns:
        A :class:`ConvertResult`: tensors converted, bytes read and written,
        values clipped per tensor, the files written.

    Raises:
        TypeError: a setting has the wrong type, or ``progress`` is not callable.
        ValueError: a bad setting (``min_positive_val`` below 5.96e-08,
            ``max_finite_val`` above 65504...), or a weights path outside the
            destination folder.
        FileNotFoundError: the source model or a data file is missing.
        ExternalDataError: a reference is malformed, unsafe or out of range
            (naming the tensor and the file), or a destination is a file the
            source reads.
        TruncatedFileError: a data file ends before a tensor's bytes; nothing
            is left under the destination names.
        OSError: disk full or I/O error; nothing is left under the destination
            names.

    Examples:
        Convert a model, keeping float32 inputs and outputs, and see what the
        clipping changed::

            import onnx_light.onnx as onnxl

            result = onnxl.convert_float_to_float16(
                "model.onnx", "model16.onnx", keep_io_types=True
            )
            print(result.converted, result.values_clipped, result.clipped)

    .. versionadded:: 0.2
    """
    check_progress(progress)
    src = kernel_path(src_onnx_path)
    dst = destination_path(dst_onnx_path)
    if dst_weights_path is None:
        dst_weights_path = default_weights(dst)[0]
    weights_destination(dst, dst_weights_path)  # a bad name fails before any reading
    size_threshold = check_size_threshold(size_threshold)
    options = SerializeOptions(
        alignment=alignment,
        size_threshold=size_threshold,
        use_external_data_location=False,
        base_dir=src,  # every reference read from the source
        max_shard_size=max_shard_size,
        durable=durable,
    )
    in_place = is_in_place(src, dst)
    with SourceFiles() as files:
        with folder_lock(os.path.dirname(src), shared=True):
            # inline bytes under the threshold stay raw_data: converted in memory, they
            # stay inline; those at or over it become references into the file, moved
            model, _ = scan_model(src, files, size_threshold)
        graph = convert_graph(
            model,
            keep_io_types=keep_io_types,
            op_block_list=op_block_list,
            node_block_list=node_block_list,
            min_positive_val=min_positive_val,
            max_finite_val=max_finite_val,
            force_fp16_initializers=force_fp16_initializers,
        )
        casts = _casts(model, graph.external, min_positive_val, max_finite_val)
        hint = overwrite_hint(src, dst, "convert")
        plan = SavePlan(model, dst, dst_weights_path, options, files, casts, hint)
        size = plan.write(progress=progress, drop_behind=drop_behind, own=True)
        sources = plan.plan.sources
    stale, removed = [], []
    if in_place:
        with folder_lock(os.path.dirname(dst)):
            stale = unreferenced(dst, sources, plan.weights.outputs if plan.weights else [])
            if remove_unreferenced:
                removed = remove(stale)
    clipped = {name: count for name, count in graph.clipped.items() if count}
    for cast in casts.values():
        if cast.clipped:
            name = cast.site.tensor.name or cast.site.label
            clipped[name] = clipped.get(name, 0) + cast.clipped
    unique = {item.key if item.key is not None else id(item): item for item in plan.plan.items}
    return ConvertResult(
        size=size,
        converted=len(casts),
        converted_inline=graph.converted_inline,
        bytes_read=sum(item.ref.length for item in unique.values() if item.ref is not None),
        bytes_written=sum(item.size for item in unique.values()),
        clipped=clipped,
        weights_paths=list(plan.weights.outputs if plan.weights else []),
        unreferenced=list(stale),
        removed=list(removed),
    )
