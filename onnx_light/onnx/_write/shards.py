"""The weights files of one save: one file, or shards of at most ``max_shard_size`` bytes.

Sharding follows onnx-ir's naming (``model.onnx.data`` becomes
``model-00001-of-00003.onnx.data``), or transformers.js's (``model.onnx_data``,
``model.onnx_data_1``...): each tensor lies whole in one shard, at an
aligned offset of it, in the walker's order; a tensor larger than the limit is
alone in its shard. Every shard is a temporary file until the commit, which
replaces all of them and the ``.onnx`` together (never a mix of old and new
shards).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

from .._commit.atomic import AtomicFiles
from .._commit.readers import Listings, readers, stored_spelling
from .._commit.targets import weights_destination
from .._errors import shown
from .._options import ONNX_IR, TRANSFORMERS_JS
from .._plan.layout import TRANSFORMERS_JS_MAX_FILES, followed_naming, plan_shards, shard_name
from .._plan.planner import Item
from .._read.sources import SourceFile, SourceFiles
from .._system.files import only_zeros_between
from .._system.memory import drop_by_default
from .writer import write_weights

__all__ = ["WeightsFiles", "kept_weights", "only_padding_left"]


def kept_weights(
    dst_onnx_path: str,
    kept: list[SourceFile],
    others: Sequence[str] = (),
    items: Sequence[Item] = (),
    files: SourceFiles | None = None,
) -> tuple[str, str] | None:
    """In place, the weights name the replaced model's files already follow, and its
    shard naming: a re-layout keeps the exporter's names (optimum's
    ``model.onnx_data``, onnx-ir's shards). None when they follow no single name,
    one of them is another ``.onnx`` or a ``.safetensors`` (never replaced), or
    another model of the folder reads one (it keeps them: new names are needed).

    Args:
        dst_onnx_path: the destination ``.onnx`` (the source itself, in place).
        kept: the data files the replaced model reads.
        others: the call's other models replaced in place (dedup): their
            reading the files does not count.
        items: the tensors the call writes; with ``files``, a kept file holding
            bytes none of them reads (a tensor an edit dropped) keeps them: the
            name is not reused, the old file stays, listed as unreferenced.
        files: the call's source files.
    """
    folder = os.path.dirname(os.path.abspath(dst_onnx_path))
    names = [os.path.relpath(s.path, folder).replace(os.sep, "/") for s in kept]
    if not names or any(n.casefold().endswith((".onnx", ".safetensors")) for n in names):
        return None
    followed = followed_naming(names)
    if followed is None or followed[0].startswith("../"):
        return None
    if followed[1] == TRANSFORMERS_JS and followed[0] != os.path.basename(dst_onnx_path) + "_data":
        return None  # X and X_1, not the names transformers.js derives from the model
    listings = Listings()
    skip = {stored_spelling(m, listings) for m in (dst_onnx_path, *others)}
    read, unreadable = readers([s.path for s in kept], folder, skip, listings)
    if read or unreadable:  # another model reads them (or may): they stay, under their names
        return None
    if files is not None and not all(only_padding_left(s, items, files) for s in kept):
        return None  # replacing it would drop bytes no tensor reads any more
    return os.path.join(folder, followed[0]), followed[1]


def only_padding_left(source: SourceFile, items: Sequence[Item], files: SourceFiles) -> bool:
    """True when every byte of ``source`` the items do not read is zero (padding)."""
    ranges = [(it.ref.offset, it.ref.length) for it in items if it.ref and it.ref.source is source]
    with files.lease(source) as fd:
        return only_zeros_between(fd, source.size, ranges)


class WeightsFiles:
    """Where every item goes: which file, at which offset.

    Args:
        items: the tensors to write, in the walker's order.
        alignment: offsets are multiples of it, in each file.
        onnx_path: the destination ``.onnx``.
        location: the weights file as the caller named it (the name of the
            first shard is derived from it).
        max_shard_size: the limit of one file in bytes; None: one file.
        naming: how shards are named: ``"onnx-ir"`` or ``"transformers.js"``
            (see :func:`~onnx_light.onnx._plan.layout.shard_name`).

    Raises:
        ValueError: a shard's name cannot be written (see ``weights_destination``),
            or transformers.js's loader would not find the files.
    """

    def __init__(
        self,
        items: list[Item],
        alignment: int,
        onnx_path: str,
        location: str | os.PathLike,
        max_shard_size: int | None = None,
        naming: str = ONNX_IR,
    ) -> None:
        self.items = items
        base_path, base = weights_destination(onnx_path, location)
        if naming == TRANSFORMERS_JS:
            _check_transformers_js(onnx_path, base)
        self.shards = plan_shards(
            [it.size for it in items], alignment, [it.key for it in items], max_shard_size
        )
        count = len(self.shards)
        if naming == TRANSFORMERS_JS and count > TRANSFORMERS_JS_MAX_FILES:
            raise ValueError(
                f"{count} weights files for {shown(onnx_path)}: transformers.js loads at most "
                f"{TRANSFORMERS_JS_MAX_FILES}; raise max_shard_size"
            )
        self.locations = [shard_name(base, i, count, naming) for i in range(count)]
        self.paths = [base_path] if count == 1 else []
        if count > 1:
            folder = os.path.dirname(os.path.abspath(onnx_path))  # derived names: no cwd reading
            self.paths = [
                weights_destination(onnx_path, os.path.join(folder, loc))[0]
                for loc in self.locations
            ]
        self.placement: list[tuple[str, int]] = [("", 0)] * len(items)
        for shard, loc in zip(self.shards, self.locations, strict=True):
            for i, offset in zip(shard.items, shard.layout.offsets, strict=True):
                self.placement[i] = (loc, offset)

    @property
    def outputs(self) -> list[str]:
        """The files :meth:`write` creates: none when there is no tensor to write."""
        return self.paths if self.items else []

    @property
    def total(self) -> int:
        """Bytes of every file together, padding included."""
        return sum(shard.layout.total for shard in self.shards)

    def write(
        self,
        out: AtomicFiles,
        files: SourceFiles,
        threads: int,
        chunk_size: int = 4 * 1024 * 1024,
        progress: Callable[[int, int], None] | None = None,
        drop_behind: bool | None = None,
    ) -> int:
        """Write every file (as temporary files of ``out``); none when there is no item.

        ``drop_behind`` None drops the copied ranges from the page cache when
        the bytes to copy exceed the memory available, the source's ranges
        only when it is cold (:func:`~onnx_light.onnx._system.memory.drop_by_default`).

        Returns:
            The bytes written, padding included.
        """
        if not self.items:
            if progress is not None:
                progress(0, 0)
            return 0
        unique = [self.items[s.items[k]].size for s in self.shards for k in s.layout.unique]
        whole, before = sum(unique), 0
        if drop_behind is None:  # on when the copy cannot stay cached, or its source is cold
            drop_behind = drop_by_default(whole, self.items, files)
        size = 0
        for shard, path in zip(self.shards, self.paths, strict=True):
            members = [self.items[i] for i in shard.items]
            part = None
            if progress is not None:
                part = _shifted(progress, before, whole)
            fd = out.create(path)
            size += write_weights(
                fd, members, shard.layout, files, threads, chunk_size, part, drop_behind
            )
            out.finish(fd)  # one descriptor at a time, however many shards
            before += sum(members[k].size for k in shard.layout.unique)
        return size


def _shifted(progress: Callable[[int, int], None], before: int, whole: int):
    """``progress`` of one file, reported as progress of all of them."""

    def report(done: int, total: int) -> None:
        progress(before + done, whole)

    return report


def _check_transformers_js(onnx_path: str, location: str) -> None:
    """transformers.js derives the files' names from the model's: ``model.onnx_data``
    beside ``model.onnx``; any other name is never loaded."""
    expected = os.path.basename(onnx_path) + "_data"
    if location != expected:
        raise ValueError(
            f"weights file {shown(location)}: transformers.js loads the weights of "
            f"{shown(os.path.basename(onnx_path))} from {shown(expected)} (then {expected}_1, ...) "
            "beside it; name the weights file that way, or leave it unset"
        )
