"""Re-align a model: the body of :func:`align_external_data_streaming`.

Scan the source's metadata, check every reference (opening its file), check
the destinations, plan the layout, copy the bytes file to file, write the new
``.onnx`` (its inline weights spliced from the source, never read into
memory), commit. The command line calls :func:`align_model` directly, for the
counts it reports.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from ._atomic import AtomicFiles, folder_lock
from ._external import (
    Resolver,
    check_length,
    check_movable,
    place,
    read_entries,
)
from ._gc import paused_gc
from ._io import scan_model
from ._options import check_alignment, check_max_shard_size, check_size_threshold
from ._serialize import Spliced, serialize_pieces, strip_raw_data
from ._shards import WeightsFiles
from ._sources import SourceFiles
from ._targets import check_targets, destination_path, is_in_place, weights_destination
from ._tensors import is_external, iter_tensors, tensor_nbytes
from ._writer import Item, write_pieces

SINGLE_FILE_THRESHOLD = 1024  # onnx.save's own size_threshold
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


@dataclass(frozen=True)
class AlignResult:
    """What a re-align did.

    Attributes:
        size: bytes of the weights file, padding included (0: not written).
        moved: tensors placed in the weights file.
        inline: tensors left inline in the ``.onnx``.
        threshold: the size threshold applied to inline tensors (None: they
            all stayed inline).
        weights_paths: the weights files written (several when sharded,
            none when no tensor moved).
    """

    size: int
    moved: int
    inline: int
    threshold: int | None
    weights_paths: list[str]


def align_model(
    src_onnx_path: str | os.PathLike,
    dst_onnx_path: str | os.PathLike,
    dst_weights_path: str | os.PathLike,
    alignment: int,
    chunk_size: int,
    *,
    size_threshold: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    max_shard_size: int | None = None,
) -> AlignResult:
    """Re-align ``src_onnx_path``: see :func:`align_external_data_streaming`.

    Returns:
        An :class:`AlignResult`.
    """
    _check_args(alignment, chunk_size, size_threshold, progress)
    check_max_shard_size(max_shard_size)
    src = os.path.abspath(os.fsdecode(src_onnx_path))
    dst = destination_path(dst_onnx_path)
    weights_destination(dst, dst_weights_path)  # a bad name fails before any reading
    with paused_gc(), SourceFiles() as files:
        model, items, inline, threshold = _plan(src, files, size_threshold)
        weights = WeightsFiles(items, alignment, dst, dst_weights_path, max_shard_size)
        check_targets(
            [*weights.paths, dst],
            files,
            in_place=is_in_place(src, dst),
            hint="give the new files other names, or pass the source .onnx as the "
            "destination to re-align it in place",
        )
        with AtomicFiles() as out:
            total = weights.write(out, files, 1, chunk_size, progress)
            for item, (location, offset) in zip(items, weights.placement, strict=True):
                place(item.site.tensor, location, offset, item.size, item.entries)
            subs = {ref.site.path: Spliced(strip_raw_data(ref.site.tensor), ref) for ref in inline}
            write_pieces(out.create(dst), serialize_pieces(model, subs), files, chunk_size)
            out.commit()
    paths = weights.paths if items else []
    return AlignResult(total, len(items), len(inline), threshold, paths)


def _plan(src: str, files: SourceFiles, size_threshold: int | None):
    """Scan ``src`` and check every reference, under a shared lock on its folder.

    Returns:
        ``(model, items for the weights file, refs of inline bytes that stay
        inline, the threshold applied)``.
    """
    folder = os.path.dirname(src)
    items: list[Item] = []
    inline: list = []
    with folder_lock(folder, shared=True):
        model, spans = scan_model(src, files)
        sites = list(iter_tensors(model))
        if size_threshold is None and not any(
            is_external(s.tensor) and not spans.holds(read_entries(s)) for s in sites
        ):
            size_threshold = SINGLE_FILE_THRESHOLD  # a single file: give it external data
        resolver = Resolver(folder, files, spans, spans.source)
        for site in sites:
            tensor = site.tensor
            if is_external(tensor):
                ref = resolver.resolve(site)
                from_inline = ref.source is spans.source and (ref.offset, ref.length) in spans.spans
                if from_inline and not _moves(site, ref.length, size_threshold):
                    inline.append(ref)  # stays as it was, whatever its length
                else:
                    if from_inline:
                        check_length(site, ref.length, ref.file)
                    items.append(Item(site, ref.length, ref, ref.entries))
            elif tensor.HasField("raw_data"):
                size = tensor_nbytes(tensor)
                size = len(tensor.raw_data) if size is None else size
                if _moves(site, size, size_threshold):
                    items.append(Item(site, size))
    return model, items, inline, size_threshold


def _moves(site, size: int, threshold: int | None) -> bool:
    """Whether an inline tensor moves to the weights file (sparse tensors stay inline,
    as onnx keeps them: its checker cannot read external sparse tensors)."""
    if threshold is None or size < threshold or site.in_sparse:
        return False
    check_movable(site)
    return True
