"""SavePlan: a model held in memory saved, its tensors placed by the one planner.

The engine of :func:`~onnx_light.onnx.save`,
:func:`~onnx_light.onnx.save_model_with_shared_external_data` and
:func:`~onnx_light.onnx.save_edited`: the planner
(:func:`~onnx_light.onnx._plan.planner.plan_tensors`) says where each tensor goes, this lays out the
weights files, checks the destinations (the in-place case included) and
writes. Every check runs before anything is written.
"""

from __future__ import annotations

import os

import onnx

from .._commit.atomic import AtomicFiles
from .._commit.targets import check_targets, target_identities, weights_destination
from .._errors import OUTSIDE, ExternalDataError, shown
from .._options import (
    SerializeOptions,
    check_alignment,
    check_num_threads,
)
from .._plan.planner import Mode, plan_tensors
from .._plan.serialize import Spliced, strip_raw_data
from .._read.external import Resolver, TensorRef, place
from .._read.scan import model_files, ref_key
from .._read.sources import SourceFiles
from .._read.tensors import TensorSite, iter_tensors
from .finish import finish
from .shards import WeightsFiles

__all__ = ["SavePlan"]


class SavePlan:
    """Where every tensor of ``model`` goes when saved to ``path``.

    Args:
        model: the model (not modified).
        path: absolute path of the destination ``.onnx``.
        location: the weights file, or None for a single file.
        options: the :class:`SerializeOptions`.
        files: the call's source files (every reference is opened there).
        casts: ``{tensor path: Cast}``, the references whose bytes are converted
            to the tensor's new dtype while copied (their length checked against
            the source dtype).
        hint: what the refusal of a destination that is a file the call reads
            says to do (None: the class's ``overwrite_hint``).

    Raises:
        TypeError: ``model`` is not a ModelProto.
        ValueError: bad options or weights location.
        FileNotFoundError: a kept reference's file is missing.
        ExternalDataError: a reference is unsafe, out of range, or its file
            would be overwritten by this save.
    """

    overwrite_hint = (
        "save elsewhere, or re-align in place with align_external_data_streaming(src, src, ...)"
    )
    keep_hint = None  # what a kept reference that fails to resolve says to do (None: save's)

    def __init__(
        self,
        model: onnx.ModelProto,
        path: str,
        location: str | os.PathLike | None,
        options: SerializeOptions,
        files: SourceFiles,
        casts: dict | None = None,
        hint: str | None = None,
    ) -> None:
        if not isinstance(model, onnx.ModelProto):
            raise TypeError(f"model must be an onnx.ModelProto, got {type(model).__name__}")
        if hint is not None:  # what to do when a destination is a file the call reads
            self.overwrite_hint = hint
        self.model = model
        self.path = path
        self.files = files
        self.location = location
        self.options = options
        self._own: tuple[set, set] | None = None  # the replaced model's files and ranges
        self.alignment = check_alignment(options.alignment)
        self.threads = check_num_threads(options.num_threads)
        if location is not None:
            weights_destination(path, location)  # a bad name fails before anything else
        folder = os.path.dirname(path)
        if options.use_external_data_location:
            keep = Resolver(folder, files)
            hint = self.keep_hint or _KEEP_HINT
            resolve, external = (lambda site, cast=None: _keep(keep, site, hint, cast)), Mode.KEEP
        else:
            resolve = _base_resolver(options.base_dir, folder, files).resolve
            external = Mode.INLINE if location is None else Mode.MOVE
        self.casts = casts or {}
        if self.casts:
            resolve = _casting(resolve, self.casts)
        self.plan = plan_tensors(
            iter_tensors(model),
            resolve,
            external=external,
            threshold=None if location is None else options.size_threshold,
        )
        self._plan_targets(self.plan.kept)

    def _plan_targets(self, kept: list[TensorRef]) -> None:
        """Lay out the weights files and check the destinations.

        Saving over the files the model was loaded from (``load`` with
        ``load_external_data=False``, edit, ``save`` to the same path) is an
        in-place save: the destinations may replace the files the replaced
        ``.onnx`` itself references, and the references kept into a file
        that is replaced have their bytes copied instead (read from the
        descriptors opened now, before the commit).
        """
        replaced: set[tuple[int, int]] = set()
        while True:
            self.weights = None
            targets = [self.path]
            if self.location is not None:
                self.weights = WeightsFiles(
                    self.plan.items,
                    self.alignment,
                    self.path,
                    self.location,
                    self.options.max_shard_size,
                    self.options.shard_naming,
                )
                targets += self.weights.paths
            for target in targets:
                replaced |= target_identities(target)
            moved = [ref for ref in kept if ref.source.identity in replaced]
            if not moved:
                break
            self._check_own(moved)
            kept = [ref for ref in kept if ref.source.identity not in replaced]
            for ref in moved:
                self.plan.copy(ref, into_weights=self.location is not None)
        self.targets = [*(self.weights.outputs if self.weights else []), self.path]
        check_targets(
            targets,
            self.files,
            model=self.path,
            replaceable=self._own_files,
            hint=self.overwrite_hint,
        )

    def _own_files(self) -> set[tuple[int, int]]:
        """The files the destination ``.onnx`` (which this save replaces) and its
        references are: those an in-place save may replace."""
        if self._own is None:
            self._own = model_files(self.path, self.files)
        return self._own[0]

    def _check_own(self, refs: list[TensorRef]) -> None:
        """References into the files of the model replaced must be ranges it has:
        a model loaded elsewhere would otherwise read the bytes being replaced.

        Raises:
            ExternalDataError: naming the tensor, the file and the range.
        """
        own = self._own_files()
        for ref in refs:
            if ref.source.identity in own and ref_key(ref) not in self._own[1]:
                raise ExternalDataError(
                    f"tensor {ref.site.label}: its bytes [{ref.offset}, {ref.offset + ref.length})"
                    f" of {shown(ref.file)} are not a tensor of {shown(self.path)}, which this save "
                    "replaces: was the model loaded from another file? Save it elsewhere"
                )

    def substitutions(self) -> dict:
        """The tensors to serialize in place of the model's own, by path."""
        subs = {}
        placement = self.weights.placement if self.weights is not None else []
        for item, (location, offset) in zip(self.plan.items, placement, strict=True):
            sub = strip_raw_data(item.site.tensor)
            place(sub, location, offset, item.size, item.extra)
            subs[item.site.path] = sub
        for ref in self.plan.inline:  # copied file to file into the .onnx, never read
            subs[ref.site.path] = Spliced(strip_raw_data(ref.site.tensor), ref)
        return subs

    def _placed(self) -> dict:
        """Each item's tensor turned into its reference, in the model itself; the
        inline references' substitutes (their bytes spliced, never read)."""
        placement = self.weights.placement if self.weights is not None else []
        for item, (location, offset) in zip(self.plan.items, placement, strict=True):
            place(item.site.tensor, location, offset, item.size, item.extra)
        return {r.site.path: Spliced(strip_raw_data(r.site.tensor), r) for r in self.plan.inline}

    def write(
        self,
        *,
        mutate: bool = False,
        progress=None,
        drop_behind: bool | None = None,
        own: bool = False,
    ) -> int:
        """Write the weights file (when any tensor goes there) and the ``.onnx``, atomically.

        Args:
            mutate: also turn the caller's saved tensors into references to
                the new weights file, once everything is written.
            progress: ``progress(done_bytes, total_bytes)`` while the weights
                are written (called once with ``(0, 0)`` when there are none).
            drop_behind: drop the copied ranges from the page cache (None: when
                they exceed the memory available, the source's only when it is
                cold; see
                ``WeightsFiles.write``).
            own: the model is the caller's own copy, to change: its tensors
                become their references in place, instead of substitutes
                serialized in their stead (a copy of each: the cost of a
                model of 200,000 tensors).

        Returns:
            The size of the weights file (0 when none was written).
        """
        size = 0
        with AtomicFiles(durable=self.options.durable) as files:
            files.reserve(self.targets)
            if self.weights is not None:
                size = self.weights.write(
                    files, self.files, self.threads, progress=progress, drop_behind=drop_behind
                )
            elif progress is not None:
                progress(0, 0)
            subs = self._placed() if own else self.substitutions()
            finish(files, [(self.path, self.model, subs)], self.files)
        if mutate and self.weights is not None:
            placement = self.weights.placement
            for item, (location, offset) in zip(self.plan.items, placement, strict=True):
                place(item.site.tensor, location, offset, item.size, item.extra)
        return size


_KEEP_HINT = (
    "; save keeps external references as they are (options.use_external_data_location "
    "is True), so they must resolve from the destination folder: save next to the files "
    "they name, or set options.use_external_data_location = False and options.base_dir "
    "to the folder (or the .onnx) the model was loaded from, to copy their bytes (a model "
    "loaded with skip_raw_data then becomes one self-contained file)"
)


def _keep(resolver: Resolver, site, hint: str = _KEEP_HINT, cast=None) -> TensorRef:
    """Check a reference the save keeps; a failure says what to do (``hint``)."""
    try:
        return resolver.resolve(site, cast)
    except FileNotFoundError as e:
        raise FileNotFoundError(f"{e}{hint}") from None
    except ExternalDataError as e:
        if e.reason != OUTSIDE:
            raise
        raise ExternalDataError(f"{e}{hint}") from None


def _casting(resolve, casts: dict):
    """``resolve``, but a tensor of ``casts`` is checked against its source dtype and
    its reference carries the conversion."""

    def resolve_cast(site: TensorSite) -> TensorRef:
        cast = casts.get(site.path)
        return resolve(site) if cast is None else resolve(site, cast)

    return resolve_cast


def _base_resolver(base_dir, folder: str, files: SourceFiles) -> Resolver:
    """Where copied references are read from: ``base_dir`` (a folder, or the model file
    it was loaded from), else the destination folder."""
    if base_dir is None:
        return Resolver(folder, files)
    base = os.path.abspath(os.fsdecode(base_dir))
    if os.path.isfile(base):  # the .onnx itself: its real folder is allowed too, as in load
        return Resolver(os.path.dirname(base), files, None, files.model(base))
    return Resolver(base, files)
