"""quantize_weights: int4/int8 weight-only quantization of a model of any size, file to file.

The graph is changed on the model scanned without its weights, by the rules
of onnxruntime's ``MatMulNBitsQuantizer`` (``_graph/quantize.py``); each
weight it replaces becomes references to its bytes in the source, which the
writer reads once, in slabs of whole blocks of rows, quantizes and writes
(``_write/quantize.py``): memory holds one weight's quantized output and one
slab, never the model. The rest is the write pipeline (``_pipeline.py``), as
the float16 converter goes through it: the one planner, the copy engine for
the weights that stay as they are, the one ending, the prune in place.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field

from ._commit.targets import destination_path, overwrite_hint
from ._graph.quantize import check_settings, part_key, quantize_graph
from ._options import WriteOptions, check_options
from ._pipeline import Pipeline, WriteResult
from ._read.sources import kernel_path
from ._read.tensors import Cast, is_external, iter_tensors

__all__ = ["QuantizeResult", "quantize_weights"]


@dataclass(frozen=True, eq=False, repr=False, kw_only=True)
class QuantizeResult(WriteResult):
    """What :func:`quantize_weights` did: a :class:`WriteResult` (as an int, the bytes
    of the weights files written, padding included), and

    Attributes:
        quantized: ``{node: the weight it reads}`` of the nodes replaced
            (an unnamed node is named ``OP #i in graph 'NAME'``).
        skipped: ``{node: why}`` of the nodes of the op types left as they
            are (excluded, a weight that is not an initializer, not 2-D...).
        weights: the weights quantized (a weight read by two nodes once).
        bytes_read: bytes of the source's weights read (those quantized and
            those copied as they are).
        files_copied: the files of ``with_files`` copied beside the model
            (their destinations).
        files_left: the files of ``with_files`` left out, as ``(file, the
            file copied under its name)``.
        files_rewritten: ``{copied config: {old model name: new name}}``:
            a ``genai_config.json`` copy made to name the model written under
            a new name.

    .. versionadded:: 0.1
    """

    quantized: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    weights: int = 0
    bytes_read: int = 0
    files_copied: list[str] = field(default_factory=list)
    files_left: list[tuple[str, str]] = field(default_factory=list)
    files_rewritten: dict[str, dict[str, str]] = field(default_factory=dict)


def quantize_weights(
    src_onnx_path: str | os.PathLike,
    dst_onnx_path: str | os.PathLike,
    dst_weights_path: str | os.PathLike | None = None,
    *,
    bits: int = 4,
    block_size: int = 128,
    symmetric: bool = False,
    accuracy_level: int = 0,
    nodes_to_exclude: Sequence[str] = (),
    op_types: Sequence[str] = ("MatMul",),
    options: WriteOptions | None = None,
    with_files: Sequence[str | os.PathLike] = (),
) -> QuantizeResult:
    """Quantize a model's MatMul weights to 4 or 8 bits, streaming them.

    The result is the model onnxruntime's ``MatMulNBitsQuantizer`` (its
    default algorithm, the same bits, block size, symmetry, accuracy level
    and exclusions; its defaults) makes of the model loaded with its weights:
    each ``MatMul`` whose B is a float32, float16 or bfloat16 initializer of
    2 dims (or more, the leading ones 1: the output is then reshaped as
    there) becomes a ``com.microsoft.MatMulNBits`` of the same name plus
    ``_Q4`` (``_Q8``), reading ``B_Q4``, ``B_scales`` and (asymmetric)
    ``B_zero_points``, whose bytes are those onnxruntime writes. The
    quantization is onnxruntime's own per-tensor function
    (``quantize_matmul_4bits`` / ``quantize_matmul_8bits``, multi-threaded)
    when onnxruntime is installed (the ``quantize`` extra: ``pip install
    onnx-light[quantize]``), else the same MLAS arithmetic in numpy on one
    thread, tested bit for bit against it. With ``"Gather"`` in ``op_types``,
    a ``Gather`` of a float table becomes ``GatherBlockQuantized`` (4 bits, as
    there); with ``"Gemm"``, a Gemm with a constant B (transB 0 or 1, alpha and
    beta 1, C absent or a bias of N values) becomes ``MatMulNBits`` with that
    bias, which onnxruntime's quantizer does not do. The nodes of those op
    types left as they are are listed in ``skipped``, with the reason.

    No weight is ever held whole in memory: the graph is changed on the model
    read without its weights, and each weight is read from its file in slabs
    of whole blocks of rows, quantized, and written at its place in the new
    weights file; memory holds one weight's quantized output and a slab of
    16 MiB. Nothing depends on the current folder.

    ``dst == src`` quantizes in place: one commit replaces the model and its
    weights, written to ``DST.data``; the old weights files it no longer reads
    are listed in ``unreferenced`` (deleted with
    ``options.remove_unreferenced``). Otherwise the source's files are never
    modified.

    Args:
        src_onnx_path: the model.
        dst_onnx_path: the quantized model (may be ``src_onnx_path``).
        dst_weights_path: its weights file, inside the folder of
            ``dst_onnx_path``, read as ``save``'s ``location``. None: ``DST.data``.
        bits: 4 or 8.
        block_size: weights per block along K: a power of two from 16 to 256.
        symmetric: no zero points (the middle value is the implicit one).
        accuracy_level: MatMulNBits's ``accuracy_level``, 0 (not set) to 4
            (int8 compute on the CPU).
        nodes_to_exclude: names of nodes left as they are; each must be a
            node of the model.
        op_types: among ``"MatMul"``, ``"Gemm"``, ``"Gather"``.
        options: the :class:`~onnx_light.onnx.WriteOptions` of the new
            weights (alignment, size threshold, shards, chunk size, durable,
            pruning of the old files in place, progress); None: the defaults.
        with_files: files of the source's folder to copy beside the new
            model (an exporter's ``config.json``, tokenizer files,
            ``genai_config.json``), in the same commit, under
            :func:`~onnx_light.onnx.convert_float_to_float16`'s rules (the
            same argument there): listed in ``files_copied``.

    Returns:
        A :class:`QuantizeResult`: an int, the bytes of the weights files
        written; the nodes quantized and those skipped with the reason, the
        bytes read, the files written.

    Raises:
        TypeError: a setting of the wrong type, or ``options`` not a
            :class:`~onnx_light.onnx.WriteOptions`.
        ValueError: bits not 4 or 8, a block size that is not a power of two
            from 16 to 256, an accuracy level outside 0 to 4, an unknown op
            type, a name of ``nodes_to_exclude`` that is no node of the model,
            a weight to quantize that is not float32, float16 or bfloat16
            (naming the node and the weight), a name the quantizer makes
            (``W_Q4``, ``W_scales``...) that the model already uses or that
            another form of the same weight takes (a MatMul's B that is also a
            Gather's table), or a weights path outside the destination folder;
            nothing is written then.
        FileNotFoundError: the source model or a data file is missing.
        ExternalDataError: a reference is malformed, unsafe or out of range
            (naming the tensor and the file), or a destination is a file the
            source reads.
        TruncatedFileError: a data file ends before a weight's bytes; nothing
            is left under the destination names.
        OSError: disk full or I/O error; nothing is left under the destination
            names.

    Examples:
        Quantize a model to 4 bits, blocks of 32, symmetric (onnxruntime-genai's
        CPU settings, with ``accuracy_level=4``)::

            import onnx_light.onnx as onnxl

            result = onnxl.quantize_weights(
                "model.onnx", "model_int4.onnx", block_size=32, symmetric=True,
                accuracy_level=4,
            )
            print(len(result.quantized), result.skipped)

    .. versionadded:: 0.1
    """
    settings = check_settings(
        bits, block_size, symmetric, accuracy_level, nodes_to_exclude, op_types
    )
    options = check_options(options)
    src, dst = kernel_path(src_onnx_path), destination_path(dst_onnx_path)
    with Pipeline(options, [dst], dst_weights_path) as run:
        model = run.scan(src, run.threshold)
        graph = quantize_graph(model, settings, src)
        casts = {}
        for site in iter_tensors(model):
            part = graph.parts.get(part_key(site.tensor)) if is_external(site.tensor) else None
            if part is not None:
                casts[site.path] = Cast(part, site)
        run.add_model(
            model,
            dst,
            keep=False,
            base=src,
            casts=casts,
            src=src,
            own=True,
            hint=overwrite_hint(src, dst, "quantize"),
        )
        run.copy_files(with_files)
        run.lay_out()
        run.check_targets()
        run.write()
    read: dict = {}  # each source range once (a weight's parts read it once)
    weights = set()
    for item in run.items:
        if item.ref is not None:
            read[item.ref.span] = item.ref.length
            if item.cast is not None:
                weights.add((item.ref.span, item.cast.conversion.quantization))
    return run.result(
        QuantizeResult,
        quantized=graph.quantized,
        skipped=graph.skipped,
        weights=len(weights) + graph.inline,
        bytes_read=sum(read.values()),
    )
