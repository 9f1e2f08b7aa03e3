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
once), so the source tensor is found by the tensor itself, its place and its
name, not by the range alone.
"""

from __future__ import annotations

from collections.abc import Callable

import onnx

from .._dtypes import CONVERSIONS, Conversion, conversion_for, dtype_name
from .._errors import ExternalDataError, shown
from .._read.external import read_entries
from .._read.source_tensors import SourceTensors, range_key
from .._read.tensors import Cast, is_external, iter_tensors

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
    is found too. When the source's tensors with its reference have several
    dtypes and nothing tells which one it is, a tensor of one of those dtypes
    keeps its bytes as they are, and one that a single of them converts to is
    converted from it.

    Args:
        model: the edited model, its references as the source has them.
        source: gives the source's external tensors (called once, when the
            model has an external tensor).
        src: the source ``.onnx``, for messages.
        convert: the conversion for ``(source dtype, new dtype)``, None when
            there is none (default: :func:`conversion_for`).

    Returns:
        ``{tensor path: Cast}``. A cast whose reference's length does not
        hold its source dtype x the edited dims is refused by the resolver,
        which names the tensor and the file.

    Raises:
        ExternalDataError: a tensor's dtype changed to one its bytes cannot be
            converted to, or its bytes are read by source tensors of several
            dtypes and it is none of them (naming the tensor, the dtypes and
            the source).
    """
    casts: dict = {}
    known = None
    for site in iter_tensors(model):
        tensor = site.tensor
        if not is_external(tensor):
            continue
        if known is None:
            known = source()
        if known.unchanged(site):
            continue
        key = range_key(read_entries(site))
        if key is None:
            continue  # the resolver says what is wrong
        found = known.candidates(site, key)
        dtypes = sorted({c.data_type for c in found})
        if not dtypes or tensor.data_type in dtypes:
            continue  # not the source's bytes (the resolver checks them), or the same dtype
        usable = [c for c in map(convert, dtypes, [tensor.data_type] * len(dtypes)) if c]
        if len(usable) == 1:
            casts[site.path] = Cast(usable[0], site)
            continue
        where = f"{shown(src)} at {key[0]!r}"
        if len(dtypes) == 1:
            raise ExternalDataError(
                f"tensor {site.label}: the edited model reads the {dtype_name(dtypes[0])} "
                f"bytes of {where} as {dtype_name(tensor.data_type)}; the bytes can follow a "
                "new dtype only for "
                + ", ".join(sorted(str(Conversion(*pair)) for pair in CONVERSIONS))
                + f": give it back its dtype {dtype_name(dtypes[0])}, or load the model "
                "with its weights to change their values"
            )
        reason = "more than one of them converts" if usable else "none of them converts"
        raise ExternalDataError(
            f"tensor {site.label}: its bytes in {where} are read by the source's tensors "
            + ", ".join(map(str, found))
            + f", it matches none of them by name or place, and the edited model reads "
            f"them as {dtype_name(tensor.data_type)}, which {reason} to: give the tensor "
            "its name in the source, or one of their dtypes"
        )
    return casts
