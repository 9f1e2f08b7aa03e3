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
from dataclasses import dataclass, field

import onnx

from ._atomic import AtomicFiles, folder_lock
from ._external import (
    Resolver,
    TensorRef,
    check_length,
    check_movable,
    place,
    read_entries,
)
from ._gc import paused_gc
from ._layout import TRANSFORMERS_JS, check_shard_naming
from ._options import (
    check_alignment,
    check_chunk_size,
    check_max_shard_size,
    check_progress,
    check_size_threshold,
)
from ._prune import remove, unreferenced
from ._scan import PROTOBUF_LIMIT, scan_model
from ._serialize import Spliced, piece_size, serialize_pieces, strip_raw_data
from ._shards import WeightsFiles
from ._sources import SourceFile, SourceFiles
from ._targets import check_targets, destination_path, is_in_place, weights_destination
from ._tensors import is_external, iter_tensors, tensor_nbytes, typed_bytes
from ._writer import Item, write_pieces

SINGLE_FILE_THRESHOLD = 1024  # onnx.save's own size_threshold


def _check_args(
    alignment: object, chunk_size: object, size_threshold: object, progress: object
) -> int:
    """The arguments' one validation (shared with save); returns the alignment (0 -> 1)."""
    alignment = check_alignment(alignment)
    check_chunk_size(chunk_size)
    if size_threshold is not None:
        check_size_threshold(size_threshold)
    check_progress(progress)
    return alignment


class AlignResult(int):
    """What a re-align did; as an int, the bytes of the weights files written.

    :func:`~onnx_light.onnx.align_external_data_streaming` returned that
    number before it returned this object, so code that treats the result as
    an int keeps working.

    Attributes:
        size: bytes of the weights files, padding included (0: none written).
        moved: tensors placed in the weights files.
        typed: of those, tensors that held their values in a typed field
            (``float_data``, ``int32_data``...), written as raw bytes.
        inline: tensors whose bytes are inline in the new ``.onnx`` (strings
            and empty tensors left out).
        inlined: of those, external tensors brought back inline (``inline_below``).
        threshold: the size threshold applied to inline tensors (None: they
            all stayed inline).
        weights_paths: the weights files written (several when sharded,
            none when no tensor moved).
        unreferenced: weights files the replaced model read that no ``.onnx``
            of its folder references any more (in place only).
        removed: those deleted (``remove_unreferenced=True``).
    """

    size: int
    moved: int
    typed: int
    inline: int
    inlined: int
    threshold: int | None
    weights_paths: list[str]
    unreferenced: list[str]
    removed: list[str]

    def __new__(cls, size: int, **fields) -> AlignResult:
        self = super().__new__(cls, size)
        self.size = size
        defaults = {"typed": 0, "inlined": 0, "unreferenced": [], "removed": []}
        for name, value in {**defaults, **fields}.items():
            setattr(self, name, value)
        return self

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"AlignResult({fields})"


@dataclass
class _Plan:
    """What :func:`_plan` decided for each tensor of the source."""

    model: onnx.ModelProto
    items: list[Item] = field(default_factory=list)
    inline: list[TensorRef] = field(default_factory=list)  # bytes written into the .onnx
    threshold: int | None = None
    typed: int = 0
    inlined: int = 0
    kept_inline: int = 0  # inline tensors too small to be spans of the source: kept as parsed
    sources: list[SourceFile] = field(default_factory=list)  # data files read


def default_weights(dst_onnx_path: str | os.PathLike, shard_naming: str = "onnx-ir") -> str:
    """The weights file's name when the caller gives none: ``DST.data``, or
    ``DST_data`` with transformers.js's naming (the name its loader derives)."""
    name = os.path.basename(os.fsdecode(dst_onnx_path))
    return name + ("_data" if shard_naming == TRANSFORMERS_JS else ".data")


def align_model(
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
) -> AlignResult:
    """Re-align ``src_onnx_path``: see :func:`align_external_data_streaming`.

    Returns:
        An :class:`AlignResult`.
    """
    alignment = _check_args(alignment, chunk_size, size_threshold, progress)
    check_max_shard_size(max_shard_size)
    check_shard_naming(shard_naming)
    if inline_below is not None:
        check_size_threshold(inline_below, "inline_below")
    src = os.path.abspath(os.fsdecode(src_onnx_path))
    dst = destination_path(dst_onnx_path)
    if dst_weights_path is None:
        dst_weights_path = default_weights(dst, shard_naming)
    weights_destination(dst, dst_weights_path)  # a bad name fails before any reading
    in_place = is_in_place(src, dst)
    with paused_gc(), SourceFiles() as files:
        plan = _plan(src, files, size_threshold, inline_below)
        items = plan.items
        weights = WeightsFiles(
            items, alignment, dst, dst_weights_path, max_shard_size, shard_naming
        )
        check_targets(
            [*weights.paths, dst],
            files,
            model=dst,
            in_place=in_place,
            hint="give the new files other names, or pass the source .onnx as the "
            "destination to re-align it in place",
        )
        with AtomicFiles() as out:
            out.reserve([*weights.outputs, dst])
            total = weights.write(out, files, 1, chunk_size, progress)
            for item, (location, offset) in zip(items, weights.placement, strict=True):
                place(item.site.tensor, location, offset, item.size, item.entries)
            subs = {r.site.path: Spliced(strip_raw_data(r.site.tensor), r) for r in plan.inline}
            pieces = serialize_pieces(plan.model, subs)
            if piece_size(pieces) > PROTOBUF_LIMIT:
                raise ValueError(
                    f"{dst!r} would hold {piece_size(pieces)} bytes, over protobuf's 2 GiB "
                    "limit: lower inline_below (or size_threshold)"
                )
            write_pieces(out.create(dst), pieces, files, chunk_size)
            out.commit()
    stale, removed = [], []
    if in_place:
        with folder_lock(os.path.dirname(dst)):
            stale = unreferenced(dst, plan.sources, weights.outputs)
            if remove_unreferenced:
                removed = remove(stale)
    return AlignResult(
        total,
        moved=len(items),
        typed=plan.typed,
        inline=plan.kept_inline + len(plan.inline),
        inlined=plan.inlined,
        threshold=plan.threshold,
        weights_paths=weights.outputs,
        unreferenced=stale,
        removed=removed,
    )


def _plan(
    src: str, files: SourceFiles, size_threshold: int | None, inline_below: int | None = None
) -> _Plan:
    """Scan ``src`` and check every reference, under a shared lock on its folder.

    Returns:
        A :class:`_Plan`: the tensors for the weights files, the bytes
        written into the ``.onnx`` (inline tensors that stay inline, external
        ones under ``inline_below``), the threshold applied.
    """
    folder = os.path.dirname(src)
    with folder_lock(folder, shared=True):
        model, spans = scan_model(src, files)
        plan = _Plan(model, threshold=size_threshold)
        sites = list(iter_tensors(model))
        if size_threshold is None and not any(
            is_external(s.tensor) and not spans.holds(read_entries(s)) for s in sites
        ):
            plan.threshold = SINGLE_FILE_THRESHOLD  # a single file: give it external data
        resolver = Resolver(folder, files, spans, spans.source)
        seen: set[SourceFile] = set()
        for site in sites:
            _place_one(plan, site, resolver, spans, inline_below, seen)
    return plan


def _place_one(plan: _Plan, site, resolver, spans, inline_below, seen) -> None:
    """Decide where the bytes of one tensor go (see :func:`_plan`)."""
    tensor = site.tensor
    threshold = plan.threshold
    if is_external(tensor):
        ref = resolver.resolve(site)
        from_inline = ref.source is spans.source and (ref.offset, ref.length) in spans.spans
        if not from_inline and ref.source not in seen:
            seen.add(ref.source)
            plan.sources.append(ref.source)
        if from_inline and not _moves(site, ref.length, threshold, inline_below):
            plan.inline.append(ref)  # stays as it was, whatever its length
        elif not from_inline and inline_below is not None and ref.length < inline_below:
            check_length(site, ref.length, ref.file)
            plan.inline.append(ref)  # back inline: runtimes refuse some small external inputs
            plan.inlined += 1
        else:
            if from_inline:
                check_length(site, ref.length, ref.file)
            plan.items.append(Item(site, ref.length, ref, ref.entries))
        return
    if tensor.HasField("raw_data"):
        size = tensor_nbytes(tensor)
        size = len(tensor.raw_data) if size is None else size
        if _moves(site, size, threshold, inline_below):
            plan.items.append(Item(site, size))
        else:
            plan.kept_inline += 1
        return
    size = tensor_nbytes(tensor)
    if not size:
        return  # a string, or nothing to write
    if _moves(site, size, threshold, inline_below, typed=True):
        data = typed_bytes(site)
        if data is not None:
            plan.items.append(Item(site, len(data), data=data))
            plan.typed += 1
            return
    plan.kept_inline += 1


def _moves(
    site, size: int, threshold: int | None, inline_below: int | None, typed: bool = False
) -> bool:
    """Whether an inline tensor moves to the weights file (sparse tensors stay inline,
    as onnx keeps them: its checker cannot read external sparse tensors; a tensor
    under ``inline_below`` bytes stays inline, whatever the threshold)."""
    if threshold is None or size < threshold or site.in_sparse:
        return False
    if inline_below is not None and size < inline_below:
        return False
    if not typed:
        check_movable(site)
    return True
