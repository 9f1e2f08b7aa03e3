"""save_model_with_shared_external_data: a variant that writes only its new weights.

A recipe over the write pipeline (``_pipeline.py``): the model held in memory,
every external reference kept verbatim (whatever ``use_external_data_location``
says), its new inline tensors written to ``DST.data``, then turned into
references to it in the caller's model.
"""

from __future__ import annotations

import os

import onnx

from ._commit.targets import destination_path
from ._options import SerializeOptions, WriteOptions, check_options
from ._pipeline import Pipeline, WriteResult

__all__ = ["save_model_with_shared_external_data"]


def save_model_with_shared_external_data(
    model: onnx.ModelProto,
    dst_onnx_path: str | os.PathLike,
    *,
    options: SerializeOptions | WriteOptions | None = None,
) -> WriteResult:
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
        options: a :class:`~onnx_light.onnx.SerializeOptions` (None: its
            defaults, **dense** as ``save``) or any
            :class:`~onnx_light.onnx.WriteOptions`
            (``use_external_data_location`` is always True here); keyword-only.

    Returns:
        A :class:`~onnx_light.onnx.WriteResult`: an int, the size of the new
        ``.data`` file, 0 when no tensor was new (the file is then not
        created).

    Raises:
        FileNotFoundError: a reused file is missing.
        ExternalDataError: a reused reference is unsafe, out of range, or
            would be overwritten by this save.
        TypeError: ``model`` is not a ModelProto, or ``options`` not a
            :class:`~onnx_light.onnx.SerializeOptions`.

    .. versionadded:: 0.1
    """
    options = check_options(options, SerializeOptions)
    path = destination_path(dst_onnx_path)
    with Pipeline(options, [path], os.path.basename(path) + ".data") as run:
        hint = "give the variant another file name than the model it shares weights with"
        run.add_model(model, path, keep=True, update=True, hint=hint)
        run.lay_out()
        run.check_targets()
        run.write()
    return run.result()
