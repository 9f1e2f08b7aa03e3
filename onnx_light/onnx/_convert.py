"""convert_float_to_float16: a model of any size converted to float16 without loading it.

The graph is converted on the model scanned without its weights (small, whatever
the weights' size: shape inference and the checker run on it), by the graph
rules of onnxruntime's own converter (``_graph/float16.py``). The weights follow:
each float32 tensor the rules turn into float16 keeps its reference to the
float32 bytes, and the writer clips and casts those bytes while it streams them
into the new weights file (``_write/convert.py``), so memory holds a few chunks.
The rest is the write pipeline (``_pipeline.py``), as ``save_edited``'s compact
copy goes through it: the one planner, the copy engine for the bytes that do not
change, the one ending, the prune in place.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from ._commit.targets import destination_path, overwrite_hint
from ._dtypes import FLOAT, FLOAT16, Conversion, dtype_name
from ._graph.float16 import convert_graph
from ._options import WriteOptions, check_options
from ._pipeline import Pipeline, WriteResult
from ._read.external import InlineSpans
from ._read.sources import kernel_path
from ._read.tensors import Cast, TensorSite, is_external, iter_tensors, tensor_nbytes

__all__ = ["ConvertResult", "convert_float_to_float16"]


@dataclass(frozen=True, eq=False, repr=False, kw_only=True)
class ConvertResult(WriteResult):
    """What :func:`convert_float_to_float16` did: a :class:`WriteResult` (as an int, the
    bytes of the weights files written, padding included), and

    Attributes:
        converted: tensors whose bytes were converted on their way to the
            weights file: external in the source, or inline ones moved out of
            it (``moved_out``).
        converted_inline: tensors converted in the ``.onnx`` itself (small
            ones, and attribute tensors held inline).
        source_external: tensors whose bytes the source kept in other files
            (external data); the others were inline in the source ``.onnx``.
        moved_out: tensors inline in the source written to the weights file
            (of at least the size threshold, converted or not).
        kept: ``{dtype name: tensors}`` of the tensors left in their dtype:
            ``"FLOAT"`` counts the float32 ones the rules keep (used only by
            blocked nodes, or an input that stays float32), the others are
            not float32 (``"INT64"``...).
        bytes_read: bytes of the source's weights read.
        clipped: ``{tensor name: values changed by the clipping}``, only the
            tensors where the clipping changed at least one value: magnitudes
            above ``max_finite_val`` (from 65520 on, float16 would have made
            them infinite) or strictly between 0 and ``min_positive_val``
            (under about 2.98e-08, float16 would have made them 0).
        files_copied: the files of ``with_files`` copied beside the model
            (their destinations).
        files_left: the files of ``with_files`` left out, as ``(file, the
            file copied under its name)``.
        files_rewritten: ``{copied config: {old model name: new name}}``:
            a ``genai_config.json`` copy made to name the model written under
            a new name.

    .. versionadded:: 0.1
    """

    converted: int = 0
    converted_inline: int = 0
    source_external: int = 0
    moved_out: int = 0
    kept: dict[str, int] = field(default_factory=dict)
    bytes_read: int = 0
    clipped: dict[str, int] = field(default_factory=dict)
    files_copied: list[str] = field(default_factory=list)
    files_left: list[tuple[str, str]] = field(default_factory=list)
    files_rewritten: dict[str, dict[str, str]] = field(default_factory=dict)

    @property
    def values_clipped(self) -> int:
        """The values the clipping changed, over every tensor."""
        return sum(self.clipped.values())

    @property
    def tensors(self) -> int:
        """Every tensor of the model: converted, or kept."""
        return self.converted + self.converted_inline + sum(self.kept.values())


def _source_layout(model, inline: InlineSpans) -> tuple[int, Counter]:
    """The tensors the scanned source held in other files (external references other
    than the inline bytes the scan made references), and its tensors by dtype, before
    the graph pass changes any."""
    external = 0
    dtypes: Counter = Counter()
    for site in iter_tensors(model):
        tensor = site.tensor
        dtypes[tensor.data_type] += 1
        if is_external(tensor):
            entries = {entry.key: entry.value for entry in tensor.external_data}
            external += not inline.holds(entries)
    return external, dtypes


def _moved_out(items, inline: InlineSpans) -> int:
    """The tensors of ``items`` (those for the weights file) that were inline in the
    source: a reference the scan made, or bytes held by the tensor itself."""
    return sum(
        item.ref is None
        or item.ref.location == inline.location
        and (item.ref.offset, item.ref.length) in inline.spans
        for item in items
    )


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


def _sizes_before(model):
    """The byte size each inline tensor held in a typed field (``float_data``...) has
    in the source, by tensor: the graph pass converts it in memory (a float32 one
    halves), and the threshold compares its size in the source, as it compares a
    ``raw_data`` tensor's (those of at least the threshold are references by then)."""
    held = {
        id(site.tensor): (site.tensor, tensor_nbytes(site.tensor))  # the tensor kept alive:
        for site in iter_tensors(model)  # its id stays its own
        if not is_external(site.tensor) and not site.tensor.HasField("raw_data")
    }

    def source_size(site: TensorSite) -> int | None:
        found = held.get(id(site.tensor))
        return None if found is None else found[1]

    return source_size


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
    options: WriteOptions | None = None,
    with_files: Sequence[str | os.PathLike] = (),
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
    weights, written to ``DST.data`` (the converted weights are new bytes:
    the old file's name is not taken over); the old weights files it no
    longer reads are listed in ``unreferenced`` (deleted with
    ``options.remove_unreferenced``). Otherwise the source's files are never
    modified.

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
        min_positive_val: smallest magnitude kept: from 5.96e-08 (the
            smallest float16 subnormal) to 65504, at most ``max_finite_val``.
        max_finite_val: largest finite magnitude kept: from 5.96e-08 to
            65504 (the largest finite float16).
        force_fp16_initializers: convert float32 initializers even when only
            blocked nodes use them.
        options: the :class:`~onnx_light.onnx.WriteOptions` of the new
            weights (alignment, size threshold, shards, chunk size, durable,
            drop behind, pruning of the old files in place, progress); None:
            the defaults. The size threshold is compared with an inline
            tensor's size in the source: smaller ones stay inline, converted in
            memory (with a threshold above every tensor, a single-file model
            stays one file); external tensors stay external, whatever their
            size (the usual recipe's ``onnx.save`` writes those under 1024
            bytes inline).
        with_files: files of the source's folder to copy beside the new
            model, each under its own name (an exporter's ``config.json``,
            tokenizer files, ``genai_config.json``), in the same commit, under
            :func:`~onnx_light.onnx.deduplicate_external_data`'s rules (never a
            weights file, a folder or a file from outside the model's folder;
            nothing is copied into the source's own folder). A ``genai_config.json`` naming the
            model is copied naming the new file. Listed in ``files_copied``
            (``files_rewritten``).

    Returns:
        A :class:`ConvertResult`: an int, the bytes of the weights files
        written; tensors converted, bytes read, values clipped per tensor, the
        files written.

    Raises:
        TypeError: a limit is not a number, or ``options`` not a
            :class:`~onnx_light.onnx.WriteOptions`.
        ValueError: a bad limit (outside 5.96e-08 to 65504, infinite or NaN,
            or ``min_positive_val`` above ``max_finite_val``: the message names
            both), or a weights path outside the destination folder.
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

    .. versionadded:: 0.1
    """
    options = check_options(options)
    src, dst = kernel_path(src_onnx_path), destination_path(dst_onnx_path)
    with Pipeline(options, [dst], dst_weights_path) as run:
        # inline bytes under the threshold stay raw_data: converted in memory, they
        # stay inline; those at or over it become references into the file, moved
        model = run.scan(src, run.threshold)
        source_external, dtypes = _source_layout(model, run.inline)
        source_size = _sizes_before(model)
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
        run.add_model(
            model,
            dst,
            keep=False,
            base=src,
            casts=casts,
            src=src,
            own=True,
            hint=hint,
            source_size=source_size,
        )
        run.copy_files(with_files)
        run.lay_out()
        moved_out = _moved_out(run.items, run.inline)
        run.check_targets()
        run.write()
    clipped = {name: count for name, count in graph.clipped.items() if count}
    for cast in casts.values():
        if cast.clipped:
            name = cast.site.tensor.name or cast.site.label
            clipped[name] = clipped.get(name, 0) + cast.clipped
    unique = {item.key if item.key is not None else id(item): item for item in run.items}
    kept = {dtype_name(code): n for code, n in dtypes.items() if code != FLOAT}
    floats = dtypes[FLOAT] - len(casts) - graph.converted_inline
    if floats:
        kept = {"FLOAT": floats, **kept}
    return run.result(
        ConvertResult,
        converted=len(casts),
        converted_inline=graph.converted_inline,
        source_external=source_external,
        moved_out=moved_out,
        kept=kept,
        bytes_read=sum(item.ref.length for item in unique.values() if item.ref is not None),
        clipped=clipped,
    )
