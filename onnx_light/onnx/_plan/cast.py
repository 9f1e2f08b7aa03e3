"""Casts: a tensor whose bytes change dtype on their way to the new weights file.

A graph tool run on a model loaded without its weights can change an external
tensor's ``data_type`` (a float16 converter does it to every weight) but not
its bytes, which it never saw. A :class:`Cast` records what the bytes are in
the source (their dtype) and what the edited tensor says they must become;
the planner sizes the tensor by the result and the writer converts the bytes
while it streams them (``_write/cast.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import onnx

from .._errors import ExternalDataError, shown
from .._read.external import read_entries
from .._read.scan import scan_model
from .._read.sources import SourceFiles
from .._read.tensors import TensorSite, is_external, iter_tensors, tensor_nbytes

__all__ = [
    "BFLOAT16",
    "CONVERSIONS",
    "Cast",
    "Conversion",
    "DOUBLE",
    "FLOAT",
    "FLOAT16",
    "ITEMSIZE",
    "conversion_for",
    "dtype_name",
    "dtypes_by_reference",
    "find_casts",
    "source_dtypes",
]

FLOAT = onnx.TensorProto.FLOAT
FLOAT16 = onnx.TensorProto.FLOAT16
BFLOAT16 = onnx.TensorProto.BFLOAT16
DOUBLE = onnx.TensorProto.DOUBLE
ITEMSIZE = {FLOAT: 4, FLOAT16: 2, BFLOAT16: 2, DOUBLE: 8}

# (source dtype, target dtype) the writer converts, each exactly as numpy casts
# (round to nearest even; NaN stays NaN, infinities stay infinite)
CONVERSIONS = frozenset(
    {
        (FLOAT, FLOAT16),
        (FLOAT, BFLOAT16),
        (FLOAT16, FLOAT),
        (BFLOAT16, FLOAT),
        (DOUBLE, FLOAT),
    }
)


def dtype_name(data_type: int) -> str:
    """``FLOAT16`` for onnx's ``TensorProto.FLOAT16``; the number for an unknown one."""
    try:
        return onnx.TensorProto.DataType.Name(data_type)
    except ValueError:
        return str(data_type)


@dataclass(frozen=True, slots=True)
class Conversion:
    """How bytes of one dtype become another's.

    Attributes:
        src: the dtype the bytes have in the source (onnx's ``TensorProto`` code).
        dst: the dtype they are written as.
        min_positive: when set (float32 -> float16 only), values strictly
            between 0 and it (in magnitude) become it, sign kept, before the
            cast: onnxruntime's converter's clipping rule.
        max_finite: when set, finite values beyond it (in magnitude) become
            it, sign kept, before the cast.
    """

    src: int
    dst: int
    min_positive: float | None = None
    max_finite: float | None = None

    @property
    def clips(self) -> bool:
        """True when values are clipped before the cast."""
        return self.min_positive is not None or self.max_finite is not None

    def length(self, length: int) -> int:
        """The byte length ``length`` bytes of ``src`` values take as ``dst``."""
        return length // ITEMSIZE[self.src] * ITEMSIZE[self.dst]

    def source_length(self, length: int) -> int:
        """The byte length of the ``src`` values that become ``length`` bytes of ``dst``."""
        return length // ITEMSIZE[self.dst] * ITEMSIZE[self.src]

    def fits(self, length: int) -> bool:
        """True when ``length`` bytes are a whole number of ``src`` values."""
        return length % ITEMSIZE[self.src] == 0

    def __str__(self) -> str:
        return f"{dtype_name(self.src)} -> {dtype_name(self.dst)}"


def conversion_for(src: int, dst: int) -> Conversion | None:
    """The plain conversion from ``src`` to ``dst``, None when the writer has none."""
    return Conversion(src, dst) if (src, dst) in CONVERSIONS else None


@dataclass(slots=True)
class Cast:
    """One tensor whose bytes are converted while they are copied.

    Attributes:
        conversion: what happens to its bytes.
        site: the edited tensor (its new ``data_type``): the one the new
            ``.onnx`` gets, placed in the new weights file.
        clipped: values the clipping changed, counted by the writer.
    """

    conversion: Conversion
    site: TensorSite
    clipped: int = 0


def _key(entries: dict[str, str]) -> tuple[str, int, int] | None:
    try:
        return entries["location"], int(entries.get("offset") or 0), int(entries["length"])
    except (KeyError, ValueError):
        return None  # no length, or not a number: the resolver says what is wrong


def _length(tensor: onnx.TensorProto) -> int | None:
    """The ``length`` entry of an external tensor when it is a short plain number."""
    for entry in tensor.external_data:
        if entry.key == "length":
            value = entry.value
            return int(value) if len(value) < 20 and value.isascii() and value.isdigit() else None
    return None


def find_casts(
    model: onnx.ModelProto,
    source_dtypes: Callable[[], dict[tuple[str, int, int], int]],
    src: str,
    convert: Callable[[int, int], Conversion | None] = conversion_for,
) -> dict:
    """The external tensors of ``model`` whose bytes must change dtype.

    A tensor qualifies when its reference's length does not match its
    ``data_type`` x dims, the source model has a tensor with the same reference
    (location, offset, length) and another dtype, and the length matches that
    dtype x the edited dims: a graph tool changed the dtype, not the bytes.

    Args:
        model: the edited model, its references as the source has them.
        source_dtypes: gives ``{(location, offset, length): data_type}`` of the
            source's external tensors (called only when some length differs).
        src: the source ``.onnx``, for messages.
        convert: the conversion for ``(source dtype, new dtype)``, None when
            there is none (default: :func:`conversion_for`).

    Returns:
        ``{tensor path: Cast}``.

    Raises:
        ExternalDataError: a tensor's dtype changed to one its bytes cannot be
            converted to (naming the tensor, both dtypes and the source).
    """
    casts: dict = {}
    known = None
    for site in iter_tensors(model):
        tensor = site.tensor
        if not is_external(tensor):
            continue
        expected = tensor_nbytes(tensor)
        if expected is None or _length(tensor) == expected:
            continue  # the common case, without parsing every entry
        key = _key(read_entries(site))
        if key is None or key[2] == expected:
            continue
        if known is None:
            known = source_dtypes()
        before = known.get(key)
        if before is None or before == tensor.data_type:
            continue  # not the source's bytes, or the same dtype: the length check refuses
        conversion = convert(before, tensor.data_type)
        if conversion is None:
            raise ExternalDataError(
                f"tensor {site.label}: the edited model reads the {dtype_name(before)} bytes "
                f"of {shown(src)} at {key[0]!r} as {dtype_name(tensor.data_type)}; the bytes "
                "can follow a new dtype only for "
                + ", ".join(sorted(str(Conversion(*pair)) for pair in CONVERSIONS))
            )
        if conversion.length(key[2]) != expected or not conversion.fits(key[2]):
            continue  # fits neither dtype: the length check names the tensor
        casts[site.path] = Cast(conversion, site)
    return casts


def dtypes_by_reference(model: onnx.ModelProto) -> dict[tuple[str, int, int], int]:
    """``{(location, offset, length): data_type}`` of the external tensors of ``model``."""
    dtypes = {}
    for site in iter_tensors(model):
        if is_external(site.tensor):
            key = _key(read_entries(site))
            if key is not None:
                dtypes.setdefault(key, site.tensor.data_type)
    return dtypes


def source_dtypes(path: str, files: SourceFiles) -> dict[tuple[str, int, int], int]:
    """:func:`dtypes_by_reference` of the model at ``path``, scanned without its
    weights as ``skip_raw_data`` loads it (inline weights are references into
    the file itself)."""
    return dtypes_by_reference(scan_model(path, files)[0])
