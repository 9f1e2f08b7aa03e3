"""Weights stored once: models that reference one weights file, each distinct byte string once.

:func:`deduplicate_external_data` is a recipe over the write pipeline
(``_pipeline.py``), with content keys: each source model is added (scanned and
planned as ``align`` plans it); its own step, the content of every tensor to
move decides its key (:func:`~onnx_light.onnx._content.keys.content_classes`:
lengths, samples, then bytes compared), and tensors whose bytes a reused
``.safetensors`` file holds point into it; the pipeline lays out one range per
key into one weights file (or one set of shards), checks the targets, streams
the bytes and commits every destination model, the weights and the companion
files copied beside them (``with_files``,
:mod:`~onnx_light.onnx._write.companions`) together.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from ._commit.targets import destination_path, overwrite_hint, real_entry
from ._content.keys import blob_of, comparison_bound, comparison_estimate, content_classes
from ._content.reuse import Reused, open_reused
from ._content.twins import find_transposed
from ._errors import ExternalDataError, shown
from ._options import WriteOptions, check_options
from ._pipeline import Model, Pipeline, WriteResult
from ._plan.planner import Item
from ._read.external import place
from ._read.sources import kernel_path
from ._system.memory import drop_by_default

__all__ = ["DedupResult", "deduplicate_external_data"]


TensorName = tuple[str, str]  # (destination model, tensor label)


@dataclass(frozen=True, eq=False, repr=False, kw_only=True)
class DedupResult(WriteResult):
    """What :func:`~onnx_light.onnx.deduplicate_external_data` did: a
    :class:`WriteResult` (as an int, the bytes of the weights files written), and

    Attributes:
        bytes_before: the bytes of tensor data the source models stored (in
            their data files, or inline) for the tensors that moved; a range
            several tensors already shared counts once.
        bytes_reused: bytes now read from the reused files instead of being
            written, each reused range counted once (however many tensors
            read it).
        groups: the tensors that now share one range, as ``(destination
            model, tensor)`` tuples, one tuple per range read by several.
        transposed: tensors whose bytes are the transpose of another's
            (``(first, second, bytes)``): a graph change would be needed to
            share them, so each keeps its bytes.
        files_copied: the files of ``with_files`` copied beside the models
            (their destinations).
        files_left: the files of ``with_files`` left out, as ``(file, the
            file copied under its name)``: another file of that name came
            first, with other bytes.
        files_rewritten: ``{copied config: {old model name: new name}}``:
            the ``genai_config.json`` copies made to name the models written
            under new names.

    .. versionadded:: 0.1
    """

    bytes_before: int = 0
    bytes_reused: int = 0
    groups: list[tuple[tuple[str, str], ...]] = field(default_factory=list)
    transposed: list[tuple[tuple[str, str], tuple[str, str], int]] = field(default_factory=list)
    files_copied: list[str] = field(default_factory=list)
    files_left: list[tuple[str, str]] = field(default_factory=list)
    files_rewritten: dict[str, dict[str, str]] = field(default_factory=dict)

    @property
    def bytes_saved(self) -> int:
        """``bytes_before`` minus the bytes written (padding counts): what sharing and
        reuse avoid writing (a reused range is already on disk, in the reused file)."""
        return self.bytes_before - self.bytes_written


def _paths(srcs, dsts) -> tuple[list[str], list[str]]:
    if isinstance(srcs, (str, bytes, os.PathLike)) or isinstance(dsts, (str, bytes, os.PathLike)):
        raise TypeError("src_onnx_paths and dst_onnx_paths are lists of paths, one per model")
    srcs = [kernel_path(p) for p in srcs]
    dsts = [destination_path(p) for p in dsts]
    if not srcs:
        raise ValueError("deduplicate_external_data needs at least one model")
    if len(srcs) != len(dsts):
        raise ValueError(
            f"{len(srcs)} source models but {len(dsts)} destinations: give one destination per source"
        )
    folders = {os.path.dirname(d) for d in dsts}
    if len(folders) > 1:
        raise ValueError(
            "every destination model must be in one folder, where the weights file they share "
            f"is: got {', '.join(shown(f) for f in sorted(folders))}"
        )
    same = [real_entry(s) == real_entry(d) for s, d in zip(srcs, dsts, strict=True)]
    if any(same) and not all(same):
        raise ValueError(
            "either every destination is its own source (deduplicating in place) or none is: "
            f"{shown(dsts[same.index(True)])} is its source, {shown(dsts[same.index(False)])} is not"
        )
    seen: dict[str, str] = {}
    for src, dst in zip(srcs, dsts, strict=True):
        if dst in seen:
            raise ValueError(
                f"destination {shown(dst)} is given twice ({shown(seen[dst])}, {shown(src)})"
            )
        seen[dst] = src
    return srcs, dsts


def deduplicate_external_data(
    src_onnx_paths: Sequence[str | os.PathLike],
    dst_onnx_paths: Sequence[str | os.PathLike],
    dst_weights_path: str | os.PathLike | None = None,
    *,
    options: WriteOptions | None = None,
    reuse: Sequence[str | os.PathLike] = (),
    with_files: Sequence[str | os.PathLike] = (),
) -> DedupResult:
    """Write models that all reference one weights file, each distinct byte string stored once.

    Only the metadata of each source model is read. Every tensor that moves
    (external ones, and inline ones of at least ``options.size_threshold``
    bytes) is compared with the others by content, within and across the
    models: candidates are grouped by length, then by a digest of three 4 KiB
    samples, and two tensors share one range only when their bytes compare
    equal, chunk by chunk, read from the source files (memory holds two
    chunks, whatever the sizes). Their names, dtypes and shapes do not
    matter: equal bytes are stored once. Each distinct byte string is copied
    once, file to file, into ``dst_weights_path`` (or its shards) at an
    aligned offset, and every destination model points at it. All the
    destination models and the weights files are committed together: an
    error or an interrupt leaves every old file byte-identical.

    2-D tensors whose bytes are the transpose of another's (an exporter's
    copy of a tied embedding) cannot share bytes without a graph change: they
    keep their own and are listed in ``DedupResult.transposed``.

    Args:
        src_onnx_paths: the source models, a list.
        dst_onnx_paths: one destination per source, all in one folder. The
            sources themselves (every one) deduplicate in place.
        dst_weights_path: the weights file they share, inside that folder,
            read as ``save``'s ``location`` (a path from the current folder
            into it, or a path from it). None (default): in place, the name
            the models' weights already have when they all read one file
            (optimum's ``model.onnx_data`` stays ``model.onnx_data``); else
            ``DST.data`` for one model, ``weights.data`` for several.
        options: the :class:`~onnx_light.onnx.WriteOptions` (alignment, size
            threshold: the inline tensors that move and take part, shards,
            chunk size, durable, drop behind: decided once for the comparison
            and the copy, pruning of the old files in place, progress: over
            the comparison, then the writing); None: the defaults.
        reuse: ``.safetensors`` files of the destination folder that already
            hold weights: a tensor whose bytes are a whole tensor of one of
            them points into it (never modified) instead of being written.
        with_files: other files of the sources' folders to copy beside the
            destination models, each under its own name (an exporter's
            ``config.json``, ``genai_config.json``, tokenizer files), in the
            same commit: an error leaves none of them under its final name.
            A folder, a source model or a weights file one of them reads is
            refused. Each must follow the rule for the models' data files: once links
            are resolved it lies inside its model's folder, or inside the
            folder of the model file's real path (a Hugging Face snapshot's
            ``blobs/``), and it is a regular file with a single hard link;
            it is refused otherwise, before anything is written. A file of
            that name already in the destination folder is replaced,
            whatever it holds. Of several files with one name, the first is
            copied (the others, when their bytes differ, are listed in
            ``DedupResult.files_left``); a file already at its destination
            (the destination folder is its own) is left as it is. A
            ``genai_config.json`` whose folder's models are written under
            other names (``fp32/model.onnx`` as ``fp32_model.onnx``) is
            copied naming the new files (every ``filename`` entry that names
            one; the rest as it was), one per folder: the first as
            ``genai_config.json``, the others as
            ``FOLDER_genai_config.json`` (listed in
            ``DedupResult.files_rewritten``).

    Returns:
        A :class:`DedupResult`: bytes before and written, the groups of
        tensors sharing a range, the transposed twins, the files copied.

    Raises:
        TypeError: the paths are not lists, or ``options`` is not a
            :class:`~onnx_light.onnx.WriteOptions`.
        ValueError: not one destination per source, destinations in several
            folders, some destinations in place and others not, a bad
            weights name, a file of ``with_files`` that is a folder, a
            source model or one of its weights files, is not in a source
            model's folder or would be copied over a model or a weights file
            the call writes.
        FileNotFoundError: a model, a data file, a reused file or a file of
            ``with_files`` is missing.
        ExternalDataError: a reference is unsafe or out of range (naming the
            tensor and the file), a file of ``with_files`` resolves outside
            its model's folders or has several hard links (naming it and
            where it points), a destination would replace a file the call
            reads or another model reads, or a reused file is outside the
            folder or not a valid ``.safetensors`` file.

    Examples:
        An exporter's decoder and decoder-with-past pair, each with its own
        copy of every weight, rewritten in place to share one file, the old
        weights files deleted::

            from onnx_light.onnx import WriteOptions, deduplicate_external_data

            models = ["decoder_model.onnx", "decoder_with_past_model.onnx"]
            opts = WriteOptions(remove_unreferenced=True)
            result = deduplicate_external_data(models, models, "model.onnx_data", options=opts)
            print(result.bytes_before, result.bytes_written)

    .. versionadded:: 0.1
    """
    options = check_options(options)
    srcs, dsts = _paths(src_onnx_paths, dst_onnx_paths)
    folder = os.path.dirname(dsts[0])
    with Pipeline(options, dsts, dst_weights_path, too_large="lower size_threshold") as run:
        for src, dst in zip(srcs, dsts, strict=True):
            run.add_source(src, dst, threshold=run.threshold, hint=_hint(src, dst))
        items = run.items
        run.copy_files(with_files)  # checked before any read
        reused = open_reused(reuse, folder, run.files)
        blobs = [blob_of(it) for it in items] + [r.blob for r in reused]
        report = _Phases(options.progress, comparison_estimate(blobs), sum(it.size for it in items))
        if run.drop_behind is None:  # decided once, for the comparison and the copy
            whole = comparison_bound(blobs) + sum(it.size for it in items)
            run.drop_behind = drop_by_default(whole, items, run.files)
        found = _Contents.compare(
            items, reused, blobs, run.files, report.comparing, run.drop_behind
        )
        weights = run.lay_out(found.to_write(items))
        _refuse_reused_targets(weights.paths, reused)
        run.check_targets()
        names = _names(run.models)
        transposed = find_transposed(items, found.item_class, names, run.files)
        for it, r in found.in_reused(items):  # their bytes stay where a reused file has them
            place(it.site.tensor, r.location, r.offset, it.size, it.extra)
        run.progress = report.writing()
        run.write()
    return run.result(
        DedupResult,
        bytes_before=_stored_before(items),
        bytes_reused=found.bytes_reused(items),
        groups=_groups(found.item_class, names),
        transposed=transposed,
    )


def _hint(src: str, dst: str) -> str:
    """What to do when a destination is a file the call reads."""
    if real_entry(src) == real_entry(dst):
        return overwrite_hint(src, dst)
    return (
        "give the new files other names, or pass each source .onnx as its own destination "
        "to deduplicate in place"
    )


@dataclass
class _Contents:
    """What the comparison decided, named.

    Attributes:
        item_class: per planned tensor (in the call's order), its content
            class: the index of the first tensor holding the same bytes.
        home: per class whose bytes a reused file already holds, that range
            (the first reused tensor of the class).
    """

    item_class: list[int]
    home: dict[int, Reused]

    @classmethod
    def compare(cls, items, reused, blobs, files, progress, drop_behind) -> _Contents:
        """Compare the tensors' bytes (``blobs``: the items', then the reused tensors')."""
        classes = content_classes(blobs, files, progress, drop_behind)
        item_class, reused_class = classes[: len(items)], classes[len(items) :]
        home: dict[int, Reused] = {}
        for c, r in zip(reused_class, reused, strict=True):
            home.setdefault(c, r)
        return cls(item_class, home)

    def to_write(self, items: list[Item]) -> list[Item]:
        """The tensors whose bytes go to the new weights file, each keyed by its class
        (the layout planner stores one range per key)."""
        return [
            replace(it, shared=("content", c))
            for it, c in zip(items, self.item_class, strict=True)
            if c not in self.home
        ]

    def in_reused(self, items: list[Item]) -> list[tuple[Item, Reused]]:
        """The tensors whose bytes a reused file holds, with that range."""
        return [
            (it, self.home[c])
            for it, c in zip(items, self.item_class, strict=True)
            if c in self.home
        ]

    def bytes_reused(self, items: list[Item]) -> int:
        """Bytes read from reused files instead of written, each class counted once."""
        return sum(items[c].size for c in set(self.item_class) & self.home.keys())


def _refuse_reused_targets(paths: list[str], reused: list) -> None:
    """A reused file is only read: no weights file (or shard) of the call may replace it,
    not even in place, where the other checks let sources be replaced.

    Raises:
        ExternalDataError: naming the destination and the reused file.
    """
    kept = {r.blob.source.identity: r.blob.source.path for r in reused}
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            continue
        if (st.st_dev, st.st_ino) in kept:
            raise ExternalDataError(
                f"destination {shown(path)} is the reused file {shown(kept[st.st_dev, st.st_ino])}, "
                "which is only read: name the weights file otherwise (--weights)"
            )


class _Phases:
    """One ``progress(done, total)`` over two phases: comparing, then writing.

    The total is the bytes the call reads and writes, refined as it learns:
    the comparison is announced as reading each look-alike once
    (:func:`~onnx_light.onnx._content.keys.comparison_estimate`), and grows only if it reads more
    (equal or alike tensors compared again); the writing as every tensor's
    bytes until the comparison has decided what is unique, then what it
    writes. ``done`` never goes back.
    """

    def __init__(self, progress, estimate: int, upper: int) -> None:
        self.progress, self.estimate, self.upper = progress, estimate, upper
        self.compared = 0

    def comparing(self, done: int) -> None:
        self.compared = max(self.compared, done)
        if self.progress is not None:
            self.progress(self.compared, max(self.estimate, self.compared) + self.upper)

    def writing(self):
        if self.progress is None:
            return None
        compared, progress = self.compared, self.progress
        return lambda done, total: progress(compared + done, compared + total)


def _stored_before(items: list[Item]) -> int:
    """The tensor bytes the sources stored: a range several tensors read counted once."""
    spans = {it.ref.span: it.size for it in items if it.ref is not None}
    return sum(spans.values()) + sum(it.size for it in items if it.ref is None)


def _names(models: list[Model]) -> list[TensorName]:
    return [(m.dst, it.site.tensor.name or it.site.label) for m in models for it in m.plan.items]


def _groups(classes: list[int], names: list[TensorName]) -> list[tuple[TensorName, ...]]:
    members: dict[int, list[TensorName]] = {}
    for c, name in zip(classes, names, strict=True):
        members.setdefault(c, []).append(name)
    return [tuple(m) for m in members.values() if len(m) > 1]
