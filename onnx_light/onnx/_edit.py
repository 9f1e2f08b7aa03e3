"""save_edited: write a model edited without its weights, sharing them or as a compact copy.

onnx's graph tools (shape inference, the checker, the version converter,
``onnx.utils.Extractor``, ``onnx.compose``...) run on a model loaded with
``load_external_data=False``: its external tensors are references relative to
the source's folder. :func:`save_edited` is a recipe over the write pipeline
(``_pipeline.py``), the model held in memory, so there is no second pipeline:

- sharing the source's weights: references kept verbatim, as the shared save
  keeps them, new inline tensors into a small file, refused outside the
  source's folder;
- a compact copy: the references read from the source, every referenced byte
  range planned by the one planner, copied file to file by the copy engine and
  committed with the ``.onnx``.

Its own steps: the retyped tensors found (:func:`~onnx_light.onnx._plan.cast.find_casts`:
their bytes follow the dtype), and a sharing save that would share nothing refused.
"""

from __future__ import annotations

import os

import onnx

from ._commit.targets import destination_path, real_entry
from ._errors import shown
from ._options import WriteOptions, check_options
from ._pipeline import Pipeline, WriteResult
from ._plan.cast import find_casts
from ._plan.planner import Plan
from ._read.source_tensors import source_tensors
from ._read.sources import kernel_path

__all__ = ["save_edited"]


_SHARING_HINT = "give the edited model another file name than the source's files"
_SHARING_KEEP_HINT = (
    "; with share_weights=True the edited model reads the source's weights as the "
    "source does: restore the file, or check that the model was loaded from src_onnx_path"
)


def _check_paths(src: str, dst: str, share_weights: bool) -> None:
    """The source exists and is not the destination; a sharing copy lies beside it.

    Raises:
        FileNotFoundError: the source model is missing.
        ValueError: the destination is the source, or (sharing) in another folder.
    """
    if not os.path.isfile(src):
        raise FileNotFoundError(f"source model {shown(src)} does not exist")
    if real_entry(src) == real_entry(dst) or (os.path.exists(dst) and os.path.samefile(src, dst)):
        raise ValueError(
            f"destination {shown(dst)} is the source model: save_edited never modifies "
            "the source's files; write the edited model under another name"
        )
    if share_weights and not os.path.samefile(os.path.dirname(src), os.path.dirname(dst)):
        raise ValueError(
            f"share_weights=True writes {shown(dst)} with the source's references as they "
            f"are, relative to the folder of {shown(src)}: they would not resolve from "
            f"{shown(os.path.dirname(dst))} (onnx and onnxruntime refuse locations that leave "
            "a model's folder); save beside the source, or pass share_weights=False for a "
            "compact copy"
        )


def save_edited(
    model: onnx.ModelProto,
    src_onnx_path: str | os.PathLike,
    dst_onnx_path: str | os.PathLike,
    dst_weights_path: str | os.PathLike | None = None,
    *,
    share_weights: bool = False,
    options: WriteOptions | None = None,
) -> WriteResult:
    """Save a model edited without its weights: sharing the source's weights, or a compact copy.

    ``model`` was loaded with ``load(src_onnx_path, load_external_data=False,
    skip_raw_data=True)`` (``skip_raw_data`` keeps a single-file export's
    inline weights as references into its ``.onnx``) and edited with onnx's
    tools: its external tensors are references
    relative to the source's folder. The tools may drop tensors
    (``onnx.utils.Extractor``), rename them (``onnx.compose.add_prefix``) or
    add inline ones (a new ``Constant``); the references they keep are
    written as follows.

    - ``share_weights=True``: the new ``.onnx`` keeps the references verbatim,
      so it reads the source's weights files, which must therefore be in its
      folder: the destination must lie in the source's folder (a destination
      elsewhere is refused, since locations may not climb out of a model's
      folder). No byte of the source's weights is read or written; new inline
      tensors of at least ``options.size_threshold`` bytes go to
      ``dst_weights_path``.
      Deleting the source's weights breaks the edited model. When no tensor
      references the source at all and weights would be written, it is
      refused: nothing would be shared.
    - ``share_weights=False`` (default): a self-contained copy holding only
      the bytes the edited model references, anywhere. Each referenced range is
      copied file to file by the kernel into ``dst_weights_path`` at aligned
      offsets, as :func:`~onnx_light.onnx.align_external_data_streaming` does
      (one range shared by several tensors is copied once); inline tensors of
      at least ``options.size_threshold`` bytes join them. Memory does not
      grow with the weights' size.

    **The bytes follow the dtype.** When the edited model gives an external
    tensor another ``data_type`` than the source's tensor it is (a graph tool
    converted the graph to float16, say), its bytes are converted while they
    stream into the new weights file, in chunks, in flat memory. The dtypes
    are compared, not the byte lengths: float16 given bfloat16 keeps the width
    and is still converted. The conversions: float32 -> float16 and float32
    -> bfloat16 (round to nearest even; NaN stays NaN, infinities stay
    infinite, values beyond float16's range become infinite), float16 /
    bfloat16 -> float32 (exact), float64 -> float32, float16 <-> bfloat16
    (widened to float32 exactly, then rounded as from float32: bfloat16's
    large values become infinite in float16). Every other dtype change is
    refused, naming the tensor, both dtypes and the source; so is a
    converted tensor whose dims do not hold the source's values. Converted
    bytes are new bytes: with
    ``share_weights=True`` they go to ``dst_weights_path``, and the rest is
    shared. Tensors the tool converted inline are written as they are; an
    inline tensor whose ``raw_data`` does not hold its dtype x dims (retyped,
    its values not converted) is refused, naming it. A sparse tensor's
    external values retyped are converted too, in memory: a compact copy
    writes sparse tensors inline.

    The source's tensors an edited one may be are those that read its bytes:
    the same file (``w.data``, ``./w.data`` and a link to it are one file),
    offset and length (a reference without a length runs to the end of its
    file). One range of the source may be read by tensors of several dtypes
    (:func:`~onnx_light.onnx.deduplicate_external_data` stores equal bytes
    once, whatever their dtype); then its place and name say which: the one
    at its place with its name is itself; else those of its name (a tool
    that moved it: the ``Extractor``), the one whose name its new name ends
    with (a prefix added: ``onnx.compose.add_prefix``) and, with them, the
    one at its place; every one of them when its name points at none. Those
    its dtype and dims cannot follow (no conversion from their dtype, or dims
    that do not hold the bytes) are left out; the others must have one
    dtype, else the tensor is refused, naming the source's tensors, their
    dtypes and what points at each: save_edited never guesses which dtype
    the bytes have.

    Every reference is checked (file present, inside the folder, in range,
    matching dtype x dims) before anything is written; the source's files are
    never opened for writing, and the outputs are committed together
    (temporary files, then renames). ``model`` is not modified.

    Args:
        model: the edited model, its external references relative to the
            folder of ``src_onnx_path``.
        src_onnx_path: the ``.onnx`` the model was loaded from.
        dst_onnx_path: the new ``.onnx``; never the source itself.
        dst_weights_path: its weights file, inside the folder of
            ``dst_onnx_path``, read as ``save``'s ``location``. None
            (default): ``DST.data``.
            Created only when some tensor goes there.
        share_weights: keep the references to the source's weights (True)
            or write a compact copy (False).
        options: the :class:`~onnx_light.onnx.WriteOptions` of the new
            weights (alignment, size threshold, shards, chunk size, durable,
            drop behind, progress); None: the defaults.

    Returns:
        A :class:`~onnx_light.onnx.WriteResult`: an int, the bytes of the new
        weights files (padding included; the sum of the shards), 0 when no
        tensor went there and no file was written.

    Raises:
        TypeError: ``model`` is not a ModelProto, or ``options`` not a
            :class:`~onnx_light.onnx.WriteOptions`.
        ValueError: the destination is the source, a sharing destination is
            outside the source's folder, a sharing save that would share
            nothing (every weight held in memory), or a weights path outside
            the destination folder.
        FileNotFoundError: the source model or a referenced data file is
            missing (the message names the tensor and the path).
        ExternalDataError: a reference is malformed, unsafe or out of range,
            its length fits neither its new dtype nor its source dtype, its
            dtype changed to one its bytes cannot be converted to (naming
            both dtypes), its bytes are read by source tensors of several
            dtypes and its place and name leave two of them, or a destination
            is a file the model reads (naming the tensor and the file).
        OSError: disk full or I/O error; nothing is left under the
            destination names.

    Examples:
        Keep the first half of a model, as a compact copy, then rename its
        input and write it beside the source, sharing its weights::

            import onnx
            import onnx_light.onnx as onnxl

            model = onnxl.load("model.onnx", load_external_data=False, skip_raw_data=True)
            model = onnx.shape_inference.infer_shapes(model)
            half = onnx.utils.Extractor(model).extract_model(["X"], ["H1"])
            onnxl.save_edited(half, "model.onnx", "out/half.onnx")  # only W0..B1

            model.metadata_props.add(key="edited", value="yes")
            onnxl.save_edited(model, "model.onnx", "tagged.onnx", share_weights=True)

    .. versionadded:: 0.1
    """
    options = check_options(options)
    src, dst = kernel_path(src_onnx_path), destination_path(dst_onnx_path)
    share = bool(share_weights)
    _check_paths(src, dst, share)
    with Pipeline(options, [dst], dst_weights_path) as run:
        run.files.model(src)  # a source, in both modes: no destination may replace it
        casts = find_casts(model, lambda: source_tensors(src, run.files), src)
        if share:  # the references as they are, into the source's files
            edited = run.add_model(
                model, dst, keep=True, casts=casts, hint=_SHARING_HINT, keep_hint=_SHARING_KEEP_HINT
            )
        else:  # a compact copy: every reference read from the source
            edited = run.add_model(model, dst, keep=False, base=src, casts=casts)
        run.lay_out()
        run.check_targets()
        if share:
            _check_shares(edited.plan, src)
        run.write()
    return run.result()


def _check_shares(plan: Plan, src: str) -> None:
    """A sharing save that would share nothing and copy weights is refused.

    Raises:
        ValueError: no tensor references the source, and some would be
            written to the new weights file.
    """
    if plan.kept or not plan.items:
        return
    size = sum(item.size for item in plan.items)
    converted = sum(item.cast is not None for item in plan.items)
    if converted:
        raise ValueError(
            f"share_weights=True would share nothing with {shown(src)}: the {converted} "
            "tensors of the model that reference its files change dtype, so their bytes "
            f"are new ({size} bytes in all would go to the new weights file); pass "
            "share_weights=False for a compact copy"
        )
    raise ValueError(
        f"share_weights=True would share nothing with {shown(src)}: no tensor of the model "
        f"references its files, and {len(plan.items)} tensors ({size} bytes) held in "
        "memory would be copied into a new weights file. A model loaded from a single-file "
        "export with load_external_data=False holds its weights inline: load it with "
        "skip_raw_data=True (its tensors then reference the source .onnx, which the edited "
        "model shares), or pass share_weights=False for a compact copy"
    )
