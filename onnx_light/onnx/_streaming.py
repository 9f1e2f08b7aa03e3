"""The streaming helpers: re-align a model, or save a variant, without loading weights."""

from __future__ import annotations

import os
from collections.abc import Callable

import onnx

from ._atomic import AtomicFiles, folder_lock, write_all
from ._external import Resolver, external_entries, set_external, set_inline
from ._files import read_refs
from ._io import scan_model
from ._layout import plan_layout
from ._options import SerializeOptions, check_alignment, check_options, check_size_threshold
from ._plan import SavePlan
from ._sources import SourceFiles
from ._targets import check_targets, destination_dir, weights_destination
from ._tensors import is_external, iter_tensors, tensor_nbytes
from ._writer import Item, write_weights

MAX_CHUNK_SIZE = 2**30  # the kernel moves at most ~2 GiB per call anyway


def _check_args(
    alignment: object, chunk_size: object, size_threshold: object, progress: object
) -> None:
    if isinstance(alignment, bool) or not isinstance(alignment, int) or alignment < 1:
        raise ValueError(f"alignment must be a power of two >= 1, got {alignment!r}")
    check_alignment(alignment)
    if (
        isinstance(chunk_size, bool)
        or not isinstance(chunk_size, int)
        or not 0 < chunk_size <= MAX_CHUNK_SIZE
    ):
        raise ValueError(f"chunk_size must be an int in [1, {MAX_CHUNK_SIZE}], got {chunk_size!r}")
    if size_threshold is not None:
        check_size_threshold(size_threshold)
    if progress is not None and not callable(progress):
        raise TypeError(f"progress must be a callable or None, got {progress!r}")


def align_external_data_streaming(
    src_onnx_path: str | os.PathLike,
    dst_onnx_path: str | os.PathLike,
    dst_weights_path: str | os.PathLike,
    alignment: int = 4096,
    chunk_size: int = 4 * 1024 * 1024,
    *,
    size_threshold: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> int:
    """Rewrite a model with every external tensor at an aligned offset, streaming its bytes.

    Only the metadata of ``src_onnx_path`` is parsed; each tensor's bytes are
    copied file to file by the kernel (``copy_file_range``, then ``splice``,
    then a ``chunk_size`` buffer) into ONE destination weights file, at offsets
    that are multiples of ``alignment`` (the first at 0, zero padding between).
    Memory does not grow with the model's size.

    Tensors spread over many source files all land in the one destination
    file; tensors sharing a source byte range share one copy; extra
    ``external_data`` keys (e.g. ``checksum``) are kept. Inline tensors stay
    inline unless ``size_threshold`` is given. Destination == source
    (re-aligning in place) works: both files are replaced atomically.

    Args:
        src_onnx_path: the model to re-align.
        dst_onnx_path: the new ``.onnx``.
        dst_weights_path: the new weights file: a name (placed next to
            ``dst_onnx_path``) or a path inside its folder.
        alignment: a power of two >= 1.
        chunk_size: bytes per copy call, and between two progress calls.
        size_threshold: when set, inline tensors with at least this many bytes
            of raw data move into the weights file too, streamed from the
            source ``.onnx``.
        progress: ``progress(done_bytes, total_bytes)``, called at least once
            per ``chunk_size`` copied and last with ``done == total``.

    Returns:
        The number of bytes of the destination weights file, padding included.

    Raises:
        ValueError: bad ``alignment`` (a power of two up to 1 GiB), ``chunk_size``
            (1 byte to 1 GiB) or ``size_threshold``, or a weights path outside
            the destination folder.
        TypeError: ``progress`` is not callable.
        FileNotFoundError: the source model or a data file is missing (the
            message names the tensor and the path).
        ExternalDataError: a reference is malformed, unsafe or out of range.
        OSError: disk full or I/O error; nothing is left under the destination names.

    .. versionadded:: 0.1
    """
    _check_args(alignment, chunk_size, size_threshold, progress)
    src = os.path.abspath(os.fsdecode(src_onnx_path))
    dst = os.path.abspath(os.fsdecode(dst_onnx_path))
    destination_dir(dst)
    weights_path, location = weights_destination(dst, dst_weights_path)
    with SourceFiles() as files:
        model, items, inline = _plan_align(src, files, size_threshold)
        check_targets(
            [weights_path, dst],
            files,
            in_place=_same_entry(src, dst),
            hint="give the new files other names, or pass the source .onnx as the "
            "destination to re-align it in place",
        )
        layout = plan_layout([it.size for it in items], alignment, [it.key for it in items])
        with AtomicFiles() as out:
            fd = out.create(weights_path)
            total = write_weights(fd, items, layout, files, 1, chunk_size, progress)
            for ref, data in read_refs(inline, files):
                set_inline(ref.site.tensor, data)
            for item, offset in zip(items, layout.offsets, strict=False):
                pairs = external_entries(location, offset, item.size, item.entries)
                set_external(item.site.tensor, pairs)
            write_all(out.create(dst), model.SerializeToString())
            out.commit()
    return total


def _plan_align(src: str, files: SourceFiles, size_threshold: int | None):
    """Scan ``src`` and check every reference, under a shared lock on its folder.

    Returns:
        ``(model, items for the weights file, refs of inline bytes that stay inline)``.
    """
    folder = os.path.dirname(src)
    items: list[Item] = []
    inline: list = []
    with folder_lock(folder, shared=True):
        model, spans = scan_model(src, files)
        resolver = Resolver(folder, files, spans, src)
        for site in iter_tensors(model):
            tensor = site.tensor
            if is_external(tensor):
                ref = resolver.resolve(site)
                from_inline = ref.source is spans.source and (ref.offset, ref.length) in spans.spans
                if from_inline and (size_threshold is None or ref.length < size_threshold):
                    inline.append(ref)
                else:
                    items.append(Item(site, ref.length, ref, ref.entries))
            elif size_threshold is not None and tensor.HasField("raw_data"):
                size = tensor_nbytes(tensor)
                size = len(tensor.raw_data) if size is None else size
                if size >= size_threshold:
                    items.append(Item(site, size))
    return model, items, inline


def _same_entry(a: str, b: str) -> bool:
    """True when two paths name the same entry of the same folder (in place)."""
    return os.path.basename(a) == os.path.basename(b) and os.path.realpath(
        os.path.dirname(a)
    ) == os.path.realpath(os.path.dirname(b))


class _SharedPlan(SavePlan):
    overwrite_hint = "give the variant another file name than the model it shares weights with"


def save_model_with_shared_external_data(
    model: onnx.ModelProto,
    dst_onnx_path: str | os.PathLike,
    options: SerializeOptions | None = None,
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
            (``use_external_data_location`` is always True here).

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
    opts = SerializeOptions(
        options.alignment, options.size_threshold, True, options.num_threads, options.base_dir
    )
    path = os.path.abspath(os.fsdecode(dst_onnx_path))
    destination_dir(path)
    with SourceFiles() as files:
        plan = _SharedPlan(model, path, os.path.basename(path) + ".data", opts, files)
        return plan.write(mutate=True)
