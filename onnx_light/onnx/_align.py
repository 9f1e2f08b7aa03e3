"""Re-align a model: :func:`align_external_data_streaming` and its body.

Scan the source's metadata, check every reference (opening its file), check
the destinations, plan the layout, copy the bytes file to file, write the new
``.onnx`` (its inline weights spliced from the source, never read into
memory), commit.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable

from ._commit.atomic import AtomicFiles, folder_lock
from ._commit.prune import remove, unreferenced
from ._commit.targets import (
    check_targets,
    destination_path,
    is_in_place,
    overwrite_hint,
    weights_destination,
)
from ._options import (
    ONNX_IR,
    check_alignment,
    check_chunk_size,
    check_max_shard_size,
    check_progress,
    check_shard_naming,
    check_size_threshold,
)
from ._plan.planner import Plan
from ._plan.serialize import Spliced, strip_raw_data
from ._plan.source_plan import plan_model
from ._read.external import PLACED, place
from ._read.sources import SourceFiles, identity, kernel_path
from ._system.files import only_zeros_between
from ._system.gc import paused_gc
from ._write.finish import finish
from ._write.shards import WeightsFiles, default_weights

__all__ = ["AlignResult", "align_external_data_streaming"]


_TOO_LARGE = "lower inline_below (or size_threshold)"


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
        rewritten: False when an in-place call found the files already as it
            would write them, and wrote nothing (see ``rewrite``).
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
    rewritten: bool

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
        "rewritten",
    )

    def __new__(cls, size: int, **fields) -> AlignResult:
        self = super().__new__(cls, size)
        values = {"size": size, "typed": 0, "inlined": 0, "unreferenced": [], "removed": []}
        values.setdefault("rewritten", True)
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
    shard_naming: str | None = None,
    remove_unreferenced: bool = False,
    durable: bool = False,
    drop_behind: bool | None = None,
    rewrite: bool = False,
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
            that folder: a name is placed next to it). None (default): in
            place, the name the model's weights already have (its one
            weights file, or the name its shards derive from: optimum's
            ``model.onnx_data`` stays ``model.onnx_data``); else ``DST.data``
            (``model.onnx.data`` for ``model.onnx``), or ``DST_data`` with
            ``shard_naming="transformers.js"``.
        alignment: offsets are multiples of it: 0 or 1 dense (no padding),
            else a power of two up to 1 GiB.
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
        shard_naming: ``"onnx-ir"`` (``model-00001-of-00003.onnx.data``
            for ``model.onnx.data``) or ``"transformers.js"``
            (``model.onnx_data``, ``model.onnx_data_1``... at most 100
            files: the names its loader derives from ``model.onnx``). None
            (default): ``"onnx-ir"``, or in place the naming the model's
            shards already follow.
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
            leaves the rest of the page cache alone. None (default): when
            the bytes to copy exceed the memory available (the kernel's
            ``MemAvailable``, or the room left in the process's memory
            cgroup), where the page cache could not keep them anyway; the
            source's ranges only when the copy is at least 64 MiB and its
            source is cold (less than half of a few probed ranges in the
            page cache: ``cachestat``, else ``mincore``), the destination
            kept cached for the next step; a warm source keeps the cache.
        rewrite: in place, rewrite the files even when they already are as
            this call would write them (the same names, offsets, lengths
            and file sizes). False (default): then nothing is written, and
            the result says ``rewritten=False``.

    Returns:
        An :class:`AlignResult`: an int, the number of bytes of the
        destination weights files, padding included (0 when no tensor went
        there and no file was written), with what was moved, inlined and
        left behind as attributes.

    Raises:
        ValueError: a setting out of range (``alignment`` neither 0 nor a
            power of two up to 1 GiB, ``chunk_size`` outside 1 byte to 1 GiB,
            a negative ``size_threshold`` or ``inline_below``, a
            ``max_shard_size`` under 1, an unknown ``shard_naming``); a
            weights path outside the destination folder; two destinations
            that are one file on this filesystem (``a.onnx`` and ``A.onnx``
            where case is not told apart).
        TypeError: a setting of the wrong type (``alignment="4096"``, a
            ``shard_naming`` that is not a str), or ``progress`` is not
            callable.
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

        With a progress bar: ``progress`` is any ``progress(done, total)``
        callable; with tqdm::

            from tqdm import tqdm

            with tqdm(unit="B", unit_scale=True, unit_divisor=1024) as bar:

                def progress(done, total):
                    bar.total = total  # the total may be refined as the call learns
                    bar.update(done - bar.n)

                align_external_data_streaming("model.onnx", "aligned.onnx", progress=progress)

    .. versionadded:: 0.1
    """
    # each setting through its one check (shared with save and the CLI), as plain ints
    alignment = check_alignment(alignment)  # 0 -> 1: dense
    chunk_size = check_chunk_size(chunk_size)
    size_threshold = _optional(check_size_threshold, size_threshold)
    inline_below = _optional(check_size_threshold, inline_below, "inline_below")
    max_shard_size = check_max_shard_size(max_shard_size)
    check_progress(progress)
    if shard_naming is not None:
        check_shard_naming(shard_naming)
    src = kernel_path(src_onnx_path)
    dst = destination_path(dst_onnx_path)
    if dst_weights_path is not None:
        weights_destination(dst, dst_weights_path)  # a bad name fails before any reading
    in_place = is_in_place(src, dst)
    with paused_gc(), SourceFiles() as files:
        model, plan, threshold = plan_model(src, files, size_threshold, inline_below)
        if dst_weights_path is None:
            kept = plan.sources if in_place else []
            dst_weights_path, shard_naming = default_weights(
                dst, shard_naming, kept, plan.items, files
            )
        shard_naming = shard_naming or ONNX_IR
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
        if in_place and not rewrite and _as_written(plan, weights, files):
            return _result(weights.total, plan, threshold, weights.paths, rewritten=False)
        with AtomicFiles(durable=durable) as out:
            out.reserve([*weights.outputs, dst])
            total = weights.write(out, files, 1, chunk_size, progress, drop_behind)
            for item, (location, offset) in zip(items, weights.placement, strict=True):
                place(item.site.tensor, location, offset, item.size, item.extra)
            subs = {r.site.path: Spliced(strip_raw_data(r.site.tensor), r) for r in plan.inline}
            finish(out, [(dst, model, subs)], files, chunk_size, _TOO_LARGE)
    stale, removed = [], []
    if in_place:
        with folder_lock(os.path.dirname(dst)):
            stale = unreferenced(dst, plan.sources, weights.outputs)
            if remove_unreferenced:
                removed = remove(stale)
    return _result(total, plan, threshold, weights.outputs, stale, removed)


def _result(total, plan, threshold, paths, stale=(), removed=(), rewritten=True) -> AlignResult:
    return AlignResult(
        total,
        moved=len(plan.items),
        typed=plan.typed,
        inline=plan.kept_inline + len(plan.inline),
        inlined=plan.inlined,
        threshold=threshold,
        weights_paths=list(paths),
        unreferenced=list(stale),
        removed=list(removed),
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
    return all(_padding_is_zero(source, plan, files) for source in plan.sources)


def _padding_is_zero(source, plan: Plan, files: SourceFiles) -> bool:
    """True when the bytes of ``source`` no tensor reads are zero, as a rewrite writes them."""
    ranges = [(it.ref.offset, it.ref.length) for it in plan.items if it.ref.source is source]
    with files.lease(source) as fd:
        return only_zeros_between(fd, source.size, ranges)
