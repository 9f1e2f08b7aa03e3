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

import onnx

from ._atomic import AtomicFiles, folder_lock
from ._errors import shown
from ._external import (
    Resolver,
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
from ._plan import MOVE, Plan, plan_tensors
from ._prune import remove, unreferenced
from ._scan import PROTOBUF_LIMIT, scan_model
from ._serialize import Spliced, piece_size, serialize_pieces, strip_raw_data
from ._shards import WeightsFiles
from ._sources import SourceFiles
from ._targets import (
    check_targets,
    destination_path,
    is_in_place,
    real_entry,
    weights_destination,
)
from ._tensors import is_external, iter_tensors
from ._writer import write_pieces

SINGLE_FILE_THRESHOLD = 1024  # onnx.save's own size_threshold


def _optional(check, value, *args):
    return None if value is None else check(value, *args)


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

    _FIELDS = (
        "size",
        "moved",
        "typed",
        "inline",
        "inlined",
        "threshold",
        "weights_paths",
        "unreferenced",
        "removed",
    )

    def __new__(cls, size: int, **fields) -> AlignResult:
        self = super().__new__(cls, size)
        values = {"size": size, "typed": 0, "inlined": 0, "unreferenced": [], "removed": []}
        values.update(fields)
        for name in cls._FIELDS:  # in one order, for the repr
            setattr(self, name, values.pop(name))
        if values:
            raise TypeError(f"AlignResult has no field {sorted(values)}")
        return self

    __str__ = int.__repr__  # print(result), f"{result}": the number, as before

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"AlignResult({fields})"


def default_weights(dst_onnx_path: str | os.PathLike, shard_naming: str = "onnx-ir") -> str:
    """The weights file when the caller gives none: ``DST.data``, or ``DST_data``
    with transformers.js's naming (the name its loader derives), beside ``DST``
    (an absolute path, so no reading from the current folder applies)."""
    path = os.path.abspath(os.fsdecode(dst_onnx_path))
    return path + ("_data" if shard_naming == TRANSFORMERS_JS else ".data")


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
    durable: bool = False,
    drop_behind: bool | None = None,
) -> AlignResult:
    """Re-align ``src_onnx_path``: see :func:`align_external_data_streaming`.

    Returns:
        An :class:`AlignResult`.
    """
    # each setting through its one check (shared with save and the CLI), as plain ints
    alignment = check_alignment(alignment)  # 0 -> 1: dense
    chunk_size = check_chunk_size(chunk_size)
    size_threshold = _optional(check_size_threshold, size_threshold)
    inline_below = _optional(check_size_threshold, inline_below, "inline_below")
    max_shard_size = check_max_shard_size(max_shard_size)
    check_progress(progress)
    check_shard_naming(shard_naming)
    src = os.path.abspath(os.fsdecode(src_onnx_path))
    dst = destination_path(dst_onnx_path)
    if dst_weights_path is None:
        dst_weights_path = default_weights(dst, shard_naming)
    weights_destination(dst, dst_weights_path)  # a bad name fails before any reading
    in_place = is_in_place(src, dst)
    with paused_gc(), SourceFiles() as files:
        model, plan, threshold = plan_model(src, files, size_threshold, inline_below)
        items = plan.items
        weights = WeightsFiles(
            items, alignment, dst, dst_weights_path, max_shard_size, shard_naming
        )
        check_targets(
            [*weights.paths, dst],
            files,
            model=dst,
            in_place=in_place,
            hint=overwrite_hint(src, dst),
        )
        with AtomicFiles(durable=durable) as out:
            out.reserve([*weights.outputs, dst])
            total = weights.write(out, files, 1, chunk_size, progress, drop_behind)
            for item, (location, offset) in zip(items, weights.placement, strict=True):
                place(item.site.tensor, location, offset, item.size, item.entries)
            subs = {r.site.path: Spliced(strip_raw_data(r.site.tensor), r) for r in plan.inline}
            pieces = serialize_pieces(model, subs)
            if piece_size(pieces) > PROTOBUF_LIMIT:
                raise ValueError(
                    f"{shown(dst)} would hold {piece_size(pieces)} bytes, over protobuf's 2 GiB "
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
        threshold=threshold,
        weights_paths=weights.outputs,
        unreferenced=stale,
        removed=removed,
    )


def overwrite_hint(src: str, dst: str) -> str:
    """What to do when a destination would overwrite a file the re-align reads."""
    if real_entry(src) != real_entry(dst):
        return (
            "give the new files other names, or pass the source .onnx as the destination "
            "to re-align it in place"
        )
    if os.path.islink(dst):  # a Hugging Face cache: links into blobs/ other snapshots share
        return (
            f"{shown(dst)} is a symbolic link (to {shown(os.path.realpath(dst))}), so other "
            "names may read these files: it cannot be re-aligned in place; re-align it into a "
            "folder of your own"
        )
    return (
        f"{shown(dst)} has other hard links, which read these files: it cannot be re-aligned "
        "in place; re-align it into a folder of your own"
    )


def plan_model(
    src: str, files: SourceFiles, size_threshold: int | None, inline_below: int | None = None
) -> tuple[onnx.ModelProto, Plan, int | None]:
    """Scan ``src`` and plan every tensor (:func:`~._plan.plan_tensors`), under a
    shared lock on its folder.

    Returns:
        ``(the model's metadata, the plan, the threshold applied)``.
    """
    folder = os.path.dirname(src)
    with folder_lock(folder, shared=True):
        model, spans = scan_model(src, files)
        sites = list(iter_tensors(model))
        if size_threshold is None and not any(
            is_external(s.tensor) and not spans.holds(read_entries(s)) for s in sites
        ):
            size_threshold = SINGLE_FILE_THRESHOLD  # a single file: give it external data
        resolver = Resolver(folder, files, spans, spans.source)
        plan = plan_tensors(
            sites,
            resolver.resolve,
            external=MOVE,
            threshold=size_threshold,
            inline_below=inline_below,
            spans=spans,
        )
    return model, plan, size_threshold
