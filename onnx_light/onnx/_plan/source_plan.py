"""A source model scanned and planned, under its folder's shared lock.

What re-aligning, deduplicating and ``info --twins`` share: parse the
metadata without the weights (:func:`~onnx_light.onnx._read.scan.scan_model`), resolve and check
every reference, and let the one planner (:func:`~onnx_light.onnx._plan.planner.plan_tensors`) say
where each tensor's bytes go (``MOVE``: every external tensor into the new
weights files).
"""

from __future__ import annotations

import os

import onnx

from .._commit.atomic import folder_lock
from .._read.external import Resolver, read_entries
from .._read.scan import scan_model
from .._read.sources import SourceFiles
from .._read.tensors import is_external, iter_tensors
from .planner import Mode, Plan, plan_tensors

__all__ = ["SINGLE_FILE_THRESHOLD", "plan_model"]


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
