"""A model planned, the two ways a model comes to a writer.

- :func:`plan_model`, a source scanned under its folder's shared lock (what
  re-aligning, deduplicating and ``info --twins`` share): parse the metadata
  without the weights (:func:`~onnx_light.onnx._read.scan.scan_model`),
  resolve and check every reference, and let the one planner
  (:func:`~onnx_light.onnx._plan.planner.plan_tensors`) say where each
  tensor's bytes go (``MOVE``: every external tensor into the new weights
  files);
- :func:`plan_in_memory`, a model held in memory (``save``, the shared save,
  ``save_edited``, the converter): its references kept, or read from where
  the model was loaded, their bytes converted when their dtype changed.
"""

from __future__ import annotations

import os

import onnx

from .._commit.atomic import folder_lock
from .._errors import OUTSIDE, ExternalDataError
from .._read.external import Resolver, TensorRef, read_entries
from .._read.scan import scan_model
from .._read.sources import SourceFiles
from .._read.tensors import TensorSite, is_external, iter_tensors
from .planner import Mode, Plan, plan_tensors

__all__ = ["KEEP_HINT", "SINGLE_FILE_THRESHOLD", "plan_in_memory", "plan_model"]


SINGLE_FILE_THRESHOLD = 1024  # onnx.save's own size_threshold


def plan_model(
    src: str, files: SourceFiles, size_threshold: int | None, inline_below: int | None = None
) -> tuple[onnx.ModelProto, Plan, int | None]:
    """Scan ``src`` and plan every tensor (:func:`~onnx_light.onnx._plan.planner.plan_tensors`), under a
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
            external=Mode.MOVE,
            threshold=size_threshold,
            inline_below=inline_below,
            spans=spans,
        )
    return model, plan, size_threshold


KEEP_HINT = (
    "; save keeps external references as they are (options.use_external_data_location "
    "is True), so they must resolve from the destination folder: save next to the files "
    "they name, or set options.use_external_data_location = False and options.base_dir "
    "to the folder (or the .onnx) the model was loaded from, to copy their bytes (a model "
    "loaded with skip_raw_data then becomes one self-contained file)"
)


def plan_in_memory(
    model: onnx.ModelProto,
    folder: str,
    files: SourceFiles,
    *,
    keep: bool,
    base: str | os.PathLike | None,
    casts: dict | None,
    threshold: int | None,
    keep_hint: str = KEEP_HINT,
    source_size=None,
) -> Plan:
    """Plan a model held in memory, saved into ``folder``.

    Args:
        model: the model.
        folder: the destination's folder.
        files: the call's source files (every reference is opened there).
        keep: keep its external references as they are (checked from
            ``folder``; a failure says ``keep_hint``); else copy their bytes,
            read from ``base`` (a folder, or the ``.onnx`` they were loaded
            from; None: ``folder``).
        casts: ``{tensor path: Cast}``: references whose bytes change dtype on
            the way (into the weights files).
        threshold: inline tensors of at least this many bytes move to the
            weights files; None: a single file, every tensor inline (and the
            external ones brought back inline, unless kept).
        source_size: the byte size an inline tensor had in the source, when
            the writer changed it in memory (None for the others): the
            threshold compares it.

    Raises:
        FileNotFoundError, ExternalDataError: a reference does not resolve.
    """
    if keep:
        keeper = Resolver(folder, files)
        external = Mode.KEEP

        def resolve(site: TensorSite, cast=None) -> TensorRef:
            return _kept(keeper, site, keep_hint, cast)

    else:
        resolve = _base_resolver(base, folder, files).resolve
        external = Mode.INLINE if threshold is None else Mode.MOVE
    if casts:
        resolve = _casting(resolve, casts)
    return plan_tensors(
        iter_tensors(model),
        resolve,
        external=external,
        threshold=threshold,
        source_size=source_size,
    )


def _kept(resolver: Resolver, site: TensorSite, hint: str, cast=None) -> TensorRef:
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
