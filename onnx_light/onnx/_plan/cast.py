"""Casts: which tensors' bytes change dtype on their way to the new weights file.

A graph tool run on a model loaded without its weights can change an external
tensor's ``data_type`` (a float16 converter does it to every weight) but not
its bytes, which it never saw. :func:`find_casts` compares each external
tensor's dtype with that of the source's tensor it is
(``_read/source_tensors.py``) and records a ``Cast`` (``_read/tensors.py``)
where they differ: what the bytes are in the source and what the edited
tensor says they must become (the conversions, ``_dtypes.py``). The planner
sizes the tensor by the result and the writer converts the bytes while it
streams them (``_write/convert.py``).

The dtypes are compared whatever the widths: float16 read as bfloat16 keeps
the byte length and still changes every value. One range of the source may
be read by tensors of several dtypes (a deduplicated model stores equal bytes
once); then the tensor's place and name say which of them it may be, and its
bytes are converted only when every one it may be gives them one meaning.
An identity that would be refused anyway (no conversion from its dtype, or
dims that do not hold the bytes) is no alternative; two that remain with two
dtypes are refused, never guessed between: a wrong guess writes wrong
weights without a word.
"""

from __future__ import annotations

from collections.abc import Callable

import onnx

from .._dtypes import CONVERSIONS, Conversion, conversion_for, dtype_name
from .._errors import ExternalDataError, shown
from .._read.source_tensors import Candidates, SourceTensor, SourceTensors
from .._read.tensors import Cast, TensorSite, is_external, iter_tensors, tensor_nbytes

__all__ = ["find_casts"]


def find_casts(
    model: onnx.ModelProto,
    source: Callable[[], SourceTensors],
    src: str,
    convert: Callable[[int, int], Conversion | None] = conversion_for,
) -> dict:
    """The external tensors of ``model`` whose bytes must change dtype.

    A tensor qualifies when the source's tensor it is
    (:meth:`SourceTensors.candidates`) has another dtype: a graph tool changed
    the dtype, not the bytes. The dtypes are compared, not the byte lengths,
    so a change that keeps the width (float16 -> bfloat16, int32 -> float32)
    is found too. When the source's tensors that read its bytes have several
    dtypes, those its place and name point at (all of them when neither
    does) are the ones it may be; of those, the ones its dtype and dims can
    follow (its own dtype, or one that converts to it, and dims that hold the
    bytes) must have one dtype.

    Args:
        model: the edited model, its references relative to the source's folder.
        source: gives the source's external tensors (called once, when the
            model has an external tensor that is not as the source has it).
        src: the source ``.onnx``, for messages.
        convert: the conversion for ``(source dtype, new dtype)``, None when
            there is none (default: :func:`conversion_for`).

    Returns:
        ``{tensor path: Cast}``. A cast whose reference's length does not
        hold its source dtype x the edited dims is refused by the resolver,
        which names the tensor and the file.

    Raises:
        ExternalDataError: a tensor's dtype changed to one its bytes cannot be
            converted to; or its bytes are read by source tensors of several
            dtypes and what it may be leaves two of them, or none (naming the
            tensor, the source's tensors, their dtypes and what to do); or an
            inline tensor's raw_data does not hold its dtype x dims.
    """
    casts: dict = {}
    known = None
    for site in iter_tensors(model):
        tensor = site.tensor
        if not is_external(tensor):
            if tensor.HasField("raw_data"):
                _check_inline(site)
            continue
        if known is None:
            known = source()
        if known.unchanged(site):
            continue
        found = known.candidates(site)
        if not found.found:
            continue  # not the source's bytes (the resolver checks them)
        dtype = _source_dtype(site, found, src, convert)
        if tensor.data_type == dtype:
            continue
        conversion = convert(dtype, tensor.data_type)
        if conversion is None:
            raise ExternalDataError(
                f"tensor {site.label}: the edited model reads the {dtype_name(dtype)} "
                f"bytes {_where(site, found, src)} as {dtype_name(tensor.data_type)}; the "
                "bytes can follow a new dtype only for "
                + ", ".join(sorted(str(Conversion(*pair)) for pair in CONVERSIONS))
                + f": give it back its dtype {dtype_name(dtype)}, or load the model "
                "with its weights to change their values"
            )
        casts[site.path] = Cast(conversion, site)
    return casts


def _check_inline(site: TensorSite) -> None:
    """An inline tensor's bytes hold its dtype x dims: a tool that retyped a tensor
    held in the model (a small one ``skip_raw_data`` keeps inline) without converting
    its values would otherwise be written with bytes of the old dtype.

    Raises:
        ExternalDataError: naming the tensor, its dtype, dims and byte counts.
    """
    tensor = site.tensor
    expected = tensor_nbytes(tensor)
    if expected is None:
        return
    held = len(tensor.raw_data)
    if held != expected:
        raise ExternalDataError(
            f"tensor {site.label}: its raw_data holds {held} bytes, but "
            f"{dtype_name(tensor.data_type)} x {list(tensor.dims)} is {expected} bytes: its "
            "dtype or dims changed and its bytes, held in the model, did not (save_edited "
            "converts only the bytes of references); convert its values in the model too "
            "(onnx.numpy_helper.to_array, astype, from_array), or give it back its dtype "
            "and dims"
        )


def _source_dtype(
    site: TensorSite, found: Candidates, src: str, convert: Callable[[int, int], object]
) -> int:
    """The dtype the bytes of ``site`` have in the source.

    Raises:
        ExternalDataError: the source tensors it may be leave several dtypes, or none.
    """
    dtypes = {c.data_type for c in found.found}
    if len(dtypes) == 1:
        return dtypes.pop()
    may_be = list(found.pointed) or found.found
    fitting = [c for c in may_be if _fits(c.data_type, site, found.length, convert)]
    left = {c.data_type for c in fitting}
    if len(left) == 1:
        return left.pop()
    if not fitting and len({c.data_type for c in may_be}) == 1:
        return may_be[0].data_type  # one tensor it is: its own refusal says why
    raise ExternalDataError(_ambiguous(site, found, fitting, src))


def _fits(dtype: int, site: TensorSite, length: int, convert) -> bool:
    """True when the tensor can be ``length`` bytes of ``dtype``: its own dtype, or one
    that converts to it, with dims that hold that many bytes."""
    tensor = site.tensor
    nbytes = tensor_nbytes(tensor)
    if dtype == tensor.data_type:
        return nbytes is None or nbytes == length
    conversion = convert(dtype, tensor.data_type)
    if conversion is None:
        return False
    return nbytes is None or conversion.source_length(nbytes) == length


def _where(site: TensorSite, found: Candidates, src: str) -> str:
    """The bytes an edited tensor reads, for messages."""
    location = next(
        (e.value for e in site.tensor.external_data if e.key == "location"), "its location"
    )
    end = found.offset + found.length
    return f"[{found.offset}, {end}) of {location!r} beside {shown(src)}"


def _ambiguous(site: TensorSite, found: Candidates, fitting: list[SourceTensor], src: str) -> str:
    """The refusal of a tensor whose bytes have no one dtype among what it may be."""
    tensor = site.tensor
    target = dtype_name(tensor.data_type)
    readers = [f"{c} at {c.where}" for c in found.found]
    readers = ", ".join(readers[:-1]) + " and " + readers[-1]
    head = (
        f"tensor {site.label}: its bytes {_where(site, found, src)} are read in the source "
        f"by {readers}"
    )
    if found.pointed:
        pointers = "; ".join(
            f"{' and '.join(why)} point{'s' if len(why) == 1 else ''} at {c}"
            for c, why in found.pointed.items()
        )
    else:
        pointers = "neither its name nor its place points at one of them"
    if not fitting:
        return (
            f"{head}; {pointers}, and none of their dtypes is {target} or converts to it "
            f"with its dims {list(tensor.dims)}: give the tensor its dtype in the source"
        )
    meanings = "; ".join(
        f"as {c.name!r} they are "
        + (
            "kept"
            if c.data_type == tensor.data_type
            else f"converted from {dtype_name(c.data_type)}"
        )
        for c in fitting
    )
    fix = (
        "save the dtype changes and the renames or moves apart: save_edited the model with "
        "its tensors at their places and under their names in the source, then rename or "
        "move them in that copy (its converted tensors have bytes of their own)"
    )
    if not found.pointed:
        fix = "give the tensor its name in the source, or " + fix
    return (
        f"{head}; {pointers}. Read as {target}, those bytes mean two things ({meanings}), "
        f"and save_edited does not guess which: {fix}"
    )
