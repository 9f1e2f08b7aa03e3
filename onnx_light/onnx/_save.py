"""save_model_with_shared_external_data: a variant that writes only its new weights.

Beside its body: a :class:`~onnx_light.onnx._write.save_plan.SavePlan` that keeps every external
reference verbatim (``use_external_data_location`` forced on a copy of the
caller's options) and writes the new inline tensors to ``DST.data``.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import onnx

from ._commit.targets import destination_path
from ._options import SerializeOptions, check_options, check_progress, derived
from ._read.sources import SourceFiles
from ._write.save_plan import SavePlan

__all__ = ["save_model_with_shared_external_data"]


class _SharedPlan(SavePlan):
    overwrite_hint = "give the variant another file name than the model it shares weights with"


def save_model_with_shared_external_data(
    model: onnx.ModelProto,
    dst_onnx_path: str | os.PathLike,
    *,
    options: SerializeOptions | None = None,
    progress: Callable[[int, int], None] | None = None,
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
            (``use_external_data_location`` is always True here); keyword-only.
        progress: ``progress(done_bytes, total_bytes)`` while the new
            weights are written, as in :func:`align_external_data_streaming` (whose
            docstring shows a tqdm bar).

    Returns:
        The size of the new ``.data`` file, 0 when no tensor was new (the file
        is then not created).

    Raises:
        FileNotFoundError: a reused file is missing.
        ExternalDataError: a reused reference is unsafe, out of range, or
            would be overwritten by this save.
        TypeError: ``model`` is not a ModelProto, ``options`` not a
            :class:`SerializeOptions`, or ``progress`` not callable.

    .. versionadded:: 0.1
    """
    options = check_options(options)
    check_progress(progress)
    opts = derived(options, use_external_data_location=True)
    path = destination_path(dst_onnx_path)
    with SourceFiles() as files:
        plan = _SharedPlan(model, path, os.path.basename(path) + ".data", opts, files)
        return plan.write(mutate=True, progress=progress)
