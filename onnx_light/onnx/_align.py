"""Re-align a model: :func:`align_external_data_streaming`, a recipe over the write pipeline.

The source added (scanned, every reference checked), laid out, the targets
checked, written (its inline weights spliced from the source, never read into
memory), pruned in place: the pipeline's stages (``_pipeline.py``). Its own step:
in place, files already as the call would write them are not written again
(:func:`_as_written`).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field

from ._commit.targets import destination_path, overwrite_hint
from ._options import WriteOptions, check_options, check_size_threshold
from ._pipeline import Pipeline, WriteResult
from ._plan.planner import Plan
from ._read.external import PLACED
from ._read.sources import SourceFiles, identity, kernel_path
from ._write.shards import WeightsFiles, only_padding_left

__all__ = ["AlignResult", "align_external_data_streaming"]


_TOO_LARGE = "lower inline_below (or size_threshold)"


@dataclass(frozen=True, eq=False, repr=False, kw_only=True)
class AlignResult(WriteResult):
    """What a re-align did: a :class:`WriteResult` (as an int, the bytes of the weights
    files written, which :func:`~onnx_light.onnx.align_external_data_streaming`
    returned before it returned this object), and

    Attributes:
        moved: tensors placed in the weights files.
        typed: of those, tensors that held their values in a typed field
            (``float_data``, ``int32_data``...), written as raw bytes.
        inline: tensors whose bytes are inline in the new ``.onnx`` (strings
            and empty tensors left out).
        inlined: of those, external tensors brought back inline (``inline_below``).
        threshold: the size threshold applied to inline tensors (None: they
            all stayed inline).
        rewritten: False when an in-place call found the files already as it
            would write them, and wrote nothing (see ``rewrite``): then
            ``bytes_written`` is 0 and ``weights_paths`` lists the files found.
        files_copied: the files of ``with_files`` copied beside the model
            (their destinations).
        files_left: the files of ``with_files`` left out, as ``(file, the
            file copied under its name)``.
        files_rewritten: ``{copied config: {old model name: new name}}``:
            a ``genai_config.json`` copy made to name the model written under
            a new name.

    .. versionadded:: 0.1
    """

    moved: int = 0
    typed: int = 0
    inline: int = 0
    inlined: int = 0
    threshold: int | None = None
    rewritten: bool = True
    files_copied: list[str] = field(default_factory=list)
    files_left: list[tuple[str, str]] = field(default_factory=list)
    files_rewritten: dict[str, dict[str, str]] = field(default_factory=dict)


def align_external_data_streaming(
    src_onnx_path: str | os.PathLike,
    dst_onnx_path: str | os.PathLike,
    dst_weights_path: str | os.PathLike | None = None,
    alignment: int | None = None,
    chunk_size: int | None = None,
    *,
    options: WriteOptions | None = None,
    inline_below: int | None = None,
    rewrite: bool = False,
    with_files: Sequence[str | os.PathLike] = (),
) -> AlignResult:
    """Rewrite a model with every external tensor at an aligned offset, streaming its bytes.

    Only the metadata of ``src_onnx_path`` is parsed; each tensor's bytes are
    copied file to file by the kernel (``copy_file_range``, then ``splice``,
    then a ``chunk_size`` buffer) into the destination weights file (or its
    shards), at offsets that are multiples of the alignment (the first at 0,
    zero padding between). Memory does not grow with the model's size.

    Tensors spread over many source files all land in the destination
    weights; tensors sharing a source byte range share one copy; extra
    ``external_data`` keys (e.g. ``checksum``) are kept. Inline tensors stay
    inline unless ``options.size_threshold`` is set, and are then copied file
    to file too: memory stays flat for single-file sources. A source with no
    external data at all (a single-file model) has its inline tensors of
    1 KiB or more moved (onnx.save's own threshold) when the threshold is not
    set: re-aligning a single file means giving it aligned external data.
    Tensors holding their values in a typed field (``float_data``,
    ``int32_data``...) move like the others, written as their little-endian
    raw bytes. When no tensor goes to the weights file, it is not created.
    Destination == source (re-aligning in place) works: every file is
    replaced atomically, and an interrupt (SIGINT, SIGTERM) or an error at
    any instant leaves either the old files or the new ones.

    Args:
        src_onnx_path: the model to re-align.
        dst_onnx_path: the new ``.onnx``.
        dst_weights_path: the new weights file, inside the folder of
            ``dst_onnx_path``, read as ``save``'s ``location`` (a path from
            the current folder into that folder, or, as in onnx, a path from
            that folder: a name is placed next to it). None (default): in
            place, the name the model's weights already have (its one
            weights file, or the name its shards derive from: optimum's
            ``model.onnx_data`` stays ``model.onnx_data``); else ``DST.data``
            (``model.onnx.data`` for ``model.onnx``), or ``DST_data`` with
            transformers.js's shard naming.
        alignment: ``options.alignment``, as the original API passes it
            (positionally too); None: the settings' (4096 by default).
        chunk_size: ``options.chunk_size``, as the original API passes it;
            None: the settings' (4 MiB by default).
        options: the :class:`~onnx_light.onnx.WriteOptions` (alignment, size
            threshold, shards, chunk size, durable, drop behind, pruning of the
            old files in place, progress); None: the defaults.
        inline_below: external tensors of fewer bytes are written inline
            in the new ``.onnx`` (copied file to file), whatever the size
            threshold: onnxruntime refuses some small inputs (a shape, axes)
            stored as external data. None (default): none.
        rewrite: in place, rewrite the files even when they already are as
            this call would write them (the same names, offsets, lengths
            and file sizes). False (default): then nothing is written, and
            the result says ``rewritten=False``.
        with_files: files of the source's folder to copy beside the new
            model, each under its own name (an exporter's ``config.json``,
            tokenizer files, ``genai_config.json``), in the same commit, under
            :func:`~onnx_light.onnx.deduplicate_external_data`'s rules (never a
            weights file, a folder or a file from outside the model's folder;
            nothing is copied into the source's own folder). A ``genai_config.json`` naming the
            model is copied naming the new file. Listed in ``files_copied``
            (``files_rewritten``).

    Returns:
        An :class:`AlignResult`: an int, the bytes of the weights files
        written, padding included (0 when no tensor went there and no file
        was written), with what was moved, inlined and left behind as
        attributes.

    Raises:
        ValueError: ``alignment``, ``chunk_size`` or ``inline_below`` out of
            range; a weights path outside the destination folder; two
            destinations that are one file on this filesystem (``a.onnx`` and
            ``A.onnx`` where case is not told apart).
        TypeError: a setting of the wrong type (``alignment="4096"``), or
            ``options`` is not a :class:`~onnx_light.onnx.WriteOptions`.
        FileNotFoundError: the source model or a data file is missing (the
            message names the tensor and the path).
        ExternalDataError: a reference is malformed, unsafe or out of range.
        OSError: disk full or I/O error; nothing is left under the destination names.

    Examples:
        Re-align a model into a new pair of files, every external tensor at
        an offset multiple of 4096, the weights in ``aligned.onnx.data``::

            from onnx_light.onnx import WriteOptions, align_external_data_streaming

            result = align_external_data_streaming("model.onnx", "aligned.onnx")
            print(int(result), result.moved, result.weights_paths)

        Or in place, at 65536 bytes (``model.onnx`` and its weights are
        replaced atomically), deleting the weights files no ``.onnx`` of the
        folder reads any more::

            opts = WriteOptions(alignment=65536, remove_unreferenced=True)
            result = align_external_data_streaming("model.onnx", "model.onnx", options=opts)
            print(result.removed)

        With a progress bar: ``options.progress`` is any ``progress(done,
        total)`` callable; with tqdm::

            from tqdm import tqdm

            with tqdm(unit="B", unit_scale=True, unit_divisor=1024) as bar:

                def progress(done, total):
                    bar.total = total  # the total may be refined as the call learns
                    bar.update(done - bar.n)

                opts = WriteOptions(progress=progress)
                align_external_data_streaming("model.onnx", "aligned.onnx", options=opts)

    .. versionadded:: 0.1
    """
    options = check_options(options, alignment=alignment, chunk_size=chunk_size)
    if inline_below is not None:
        inline_below = check_size_threshold(inline_below, "inline_below")
    src, dst = kernel_path(src_onnx_path), destination_path(dst_onnx_path)
    with Pipeline(options, [dst], dst_weights_path, too_large=_TOO_LARGE) as run:
        threshold = options.size_threshold  # None: inline tensors stay (a single file aside)
        hint = overwrite_hint(src, dst)
        model = run.add_source(src, dst, threshold=threshold, inline_below=inline_below, hint=hint)
        run.copy_files(with_files)
        weights = run.lay_out()
        run.check_targets()
        plan = model.plan
        rewritten = rewrite or not model.in_place or not _as_written(plan, weights, run.files)
        if rewritten:  # else the files already are as this call would write them
            run.write()
    return run.result(
        AlignResult,
        moved=len(plan.items),
        typed=plan.typed,
        inline=plan.kept_inline + len(plan.inline),
        inlined=plan.inlined,
        threshold=model.threshold,
        rewritten=rewritten,
    )


def _as_written(plan: Plan, weights: WeightsFiles, files: SourceFiles) -> bool:
    """True when the files are already as the call would write them: every tensor read
    from the file it goes to, at its offset, its entries as written, each file of the
    planned size, a plain file with one link, zeros between the tensors, no other file
    read, nothing converted or brought inline (sparse values included)."""
    if plan.typed or plan.inlined or not plan.items:
        return False
    external = {s.identity for s in plan.sources}
    if any(r.source.identity in external for r in plan.inline):  # a data file's bytes inlined
        return False
    for path in weights.paths:
        try:
            st = os.lstat(path)
        except OSError:
            return False
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:  # a link: a copy is wanted
            return False
    ids = {loc: identity(p) for loc, p in zip(weights.locations, weights.paths, strict=True)}
    for item, (location, offset) in zip(plan.items, weights.placement, strict=True):
        ref = item.ref
        if ref is None or ref.source.identity != ids[location] or ref.offset != offset:
            return False
        written = [("location", location), ("offset", str(offset)), ("length", str(item.size))]
        written += [(k, v) for k, v in (item.extra or {}).items() if k not in PLACED]
        if [(e.key, e.value) for e in item.site.tensor.external_data] != written:
            return False
    sizes = [shard.layout.total for shard in weights.shards]
    if external != set(ids.values()):
        return False
    if not all(os.path.getsize(p) == n for p, n in zip(weights.paths, sizes, strict=True)):
        return False
    return all(only_padding_left(source, plan.items, files) for source in plan.sources)
