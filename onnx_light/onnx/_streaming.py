"""The streaming helpers: re-align a model, or save a variant, without loading weights."""

from __future__ import annotations

import os
from collections.abc import Callable

import onnx

from ._align import AlignResult, align_model
from ._options import SerializeOptions, check_options, check_progress, derived
from ._save import SavePlan
from ._sources import SourceFiles
from ._targets import destination_path


def align_external_data_streaming(
    src_onnx_path: str | os.PathLike,
    dst_onnx_path: str | os.PathLike,
    dst_weights_path: str | os.PathLike | None = None,
    alignment: int = 4096,
    chunk_size: int = 4 * 1024 * 1024,
    *,
    size_threshold: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    max_shard_size: int | None = None,
    inline_below: int | None = None,
    shard_naming: str = "onnx-ir",
    remove_unreferenced: bool = False,
    durable: bool = False,
    drop_behind: bool | None = None,
) -> AlignResult:
    """Rewrite a model with every external tensor at an aligned offset, streaming its bytes.

    Only the metadata of ``src_onnx_path`` is parsed; each tensor's bytes are
    copied file to file by the kernel (``copy_file_range``, then ``splice``,
    then a ``chunk_size`` buffer) into the destination weights file (or its
    shards), at offsets that are multiples of ``alignment`` (the first at 0,
    zero padding between). Memory does not grow with the model's size.

    Tensors spread over many source files all land in the destination
    weights; tensors sharing a source byte range share one copy; extra
    ``external_data`` keys (e.g. ``checksum``) are kept. Inline tensors stay
    inline unless ``size_threshold`` is given, and are then copied file to
    file too: memory stays flat for single-file sources. A source with no
    external data at all (a single-file model) has its inline tensors of
    1 KiB or more moved (onnx.save's own threshold) when ``size_threshold``
    is None: re-aligning a single file means giving it aligned external data.
    Tensors holding their values in a typed field (``float_data``,
    ``int32_data``...) move like the others, written as their little-endian
    raw bytes. When no tensor goes to the weights file, it is not created
    (0 is returned). Destination == source (re-aligning in place) works: every
    file is replaced atomically, and an interrupt (SIGINT, SIGTERM) or an
    error at any instant leaves either the old files or the new ones.

    Args:
        src_onnx_path: the model to re-align.
        dst_onnx_path: the new ``.onnx``.
        dst_weights_path: the new weights file, inside the folder of
            ``dst_onnx_path``, read as ``save``'s ``location`` (a path from
            the current folder into that folder, or, as in onnx, a path from
            that folder: a name is placed next to it). None (default): ``DST.data`` as the command line
            names it (``model.onnx.data`` for ``model.onnx``), or
            ``DST_data`` with ``shard_naming="transformers.js"``.
        alignment: a power of two >= 1.
        chunk_size: bytes per copy call, and between two progress calls.
            Without ``progress``, copies the filesystem may share (XFS,
            btrfs) go in calls of up to 1 GiB: sharing blocks is a metadata
            operation, and fewer calls make a re-align of aligned weights
            several times faster.
        size_threshold: when set, inline tensors with at least this many bytes
            of data move into the weights file too, streamed from the
            source ``.onnx``. None: inline tensors stay inline, except in a
            source without external data (see above).
        progress: ``progress(done_bytes, total_bytes)``, called at least once
            per ``chunk_size`` copied and last with ``done == total``.
        max_shard_size: split the weights into files of at most this many
            bytes, each tensor whole in one file, aligned within it; a tensor
            larger than the limit is alone in its file. The shards and the
            ``.onnx`` are committed together. None (default): one file.
        inline_below: external tensors of fewer bytes are written inline
            in the new ``.onnx`` (copied file to file), whatever
            ``size_threshold``: onnxruntime refuses some small inputs (a
            shape, axes) stored as external data. None (default): none.
        shard_naming: ``"onnx-ir"`` (default: ``model-00001-of-00003.onnx.data``
            for ``model.onnx.data``) or ``"transformers.js"``
            (``model.onnx_data``, ``model.onnx_data_1``... at most 100
            files: the names its loader derives from ``model.onnx``).
        remove_unreferenced: in place, delete the weights files the old
            model read and that no ``.onnx`` of its folder references any
            more (they are listed in the result either way).
        durable: flush the new files and their folder to the disk before
            returning (``fsync``), so a power cut after the call cannot lose
            them. Always done when the call replaces existing files (in
            place); for new files it costs the time to write them to the disk
            (see the security page).
        drop_behind: drop the copied ranges of the source and destination
            files from the page cache as the copy goes (the destination's
            written to the disk first), so a copy larger than the memory
            leaves the rest of the page cache alone. None (default): only
            when the bytes to copy exceed the memory available (the kernel's
            ``MemAvailable``, or the room left in the process's memory
            cgroup), where the page cache could not keep them anyway; a
            copy that fits is never slowed.

    Returns:
        An :class:`AlignResult`: an int, the number of bytes of the
        destination weights files, padding included (0 when no tensor went
        there and no file was written), with what was moved, inlined and
        left behind as attributes.

    Raises:
        ValueError: bad ``alignment`` (a power of two up to 1 GiB), ``chunk_size``
            (1 byte to 1 GiB), ``size_threshold``, ``inline_below``,
            ``max_shard_size`` or ``shard_naming``; a weights path outside the
            destination folder; two destinations that are one file on this
            filesystem (``a.onnx`` and ``A.onnx`` where case is not told apart).
        TypeError: ``progress`` is not callable.
        FileNotFoundError: the source model or a data file is missing (the
            message names the tensor and the path).
        ExternalDataError: a reference is malformed, unsafe or out of range.
        OSError: disk full or I/O error; nothing is left under the destination names.

    Examples:
        Re-align a model into a new pair of files, every external tensor at
        an offset multiple of 4096, the weights in ``aligned.onnx.data``::

            from onnx_light.onnx import align_external_data_streaming

            result = align_external_data_streaming("model.onnx", "aligned.onnx")
            print(int(result), result.moved, result.weights_paths)

        Or in place, at 65536 bytes (``model.onnx`` and its weights are
        replaced atomically)::

            result = align_external_data_streaming("model.onnx", "model.onnx", alignment=65536)
            print(result.unreferenced)  # weights files no .onnx of the folder reads any more

    .. versionadded:: 0.1
    """
    return align_model(
        src_onnx_path,
        dst_onnx_path,
        dst_weights_path,
        alignment,
        chunk_size,
        size_threshold=size_threshold,
        progress=progress,
        max_shard_size=max_shard_size,
        inline_below=inline_below,
        shard_naming=shard_naming,
        remove_unreferenced=remove_unreferenced,
        durable=durable,
        drop_behind=drop_behind,
    )


class _SharedPlan(SavePlan):
    overwrite_hint = "give the variant another file name than the model it shares weights with"


def save_model_with_shared_external_data(
    model: onnx.ModelProto,
    dst_onnx_path: str | os.PathLike,
    *,
    options: SerializeOptions | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> int:
    """Save a variant model that reuses another model's weights file.

    Tensors already EXTERNAL keep their ``external_data`` entries verbatim: no
    byte of them is read or written. Each must resolve from
    ``dst_onnx_path``'s folder; all are checked before anything is written.
    Inline tensors with at least ``options.size_threshold`` bytes are written
    to ``dst_onnx_path + ".data"`` at offsets aligned to ``options.alignment``.

    .. note:: The caller's model is modified in place: the tensors written to
       the new file lose their ``raw_data`` and point at it.

    Args:
        model: the variant, e.g. loaded with ``load_external_data=False`` and
            given new tensors.
        dst_onnx_path: the new ``.onnx``; it must sit where the reused
            locations resolve (usually next to the first model).
        options: alignment, size threshold and writer threads
            (``use_external_data_location`` is always True here); keyword-only.
        progress: ``progress(done_bytes, total_bytes)`` while the new
            weights are written, as in :func:`align_external_data_streaming`.

    Returns:
        The size of the new ``.data`` file, 0 when no tensor was new (the file
        is then not created).

    Raises:
        FileNotFoundError: a reused file is missing.
        ExternalDataError: a reused reference is unsafe, out of range, or
            would be overwritten by this save.
        TypeError: ``model`` is not a ModelProto, or ``options`` not a
            :class:`SerializeOptions`.

    .. versionadded:: 0.1
    """
    options = check_options(options)
    check_progress(progress)
    opts = derived(options, use_external_data_location=True)
    path = destination_path(dst_onnx_path)
    with SourceFiles() as files:
        plan = _SharedPlan(model, path, os.path.basename(path) + ".data", opts, files)
        return plan.write(mutate=True, progress=progress)
