"""The dtypes whose bytes a writer converts, and how: plain values every stage may hold.

A graph tool may retype a tensor it never read (a float16 converter run on a
model loaded without its weights); its bytes then change form on their way to
the new weights file. This module says which changes the writer makes
(:data:`CONVERSIONS`), each value's size, and what one change is
(:class:`Conversion`). It reads nothing and imports no stage: the reader
checks a reference's length by it, the planner sizes a tensor by it, the copy
engine converts by it (``_write/convert.py``), and which tensors change is
decided from the graph (``_plan/cast.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx

__all__ = [
    "BFLOAT16",
    "CONVERSIONS",
    "Conversion",
    "DOUBLE",
    "FLOAT",
    "FLOAT16",
    "ITEMSIZE",
    "conversion_for",
    "dtype_name",
]

FLOAT = onnx.TensorProto.FLOAT
FLOAT16 = onnx.TensorProto.FLOAT16
BFLOAT16 = onnx.TensorProto.BFLOAT16
DOUBLE = onnx.TensorProto.DOUBLE
ITEMSIZE = {FLOAT: 4, FLOAT16: 2, BFLOAT16: 2, DOUBLE: 8}

# (source dtype, target dtype) the writer converts, each exactly as numpy casts
# (round to nearest even; NaN stays NaN, infinities stay infinite); float16 and
# bfloat16 go through float32, which holds either exactly
CONVERSIONS = frozenset(
    {
        (FLOAT, FLOAT16),
        (FLOAT, BFLOAT16),
        (FLOAT16, FLOAT),
        (BFLOAT16, FLOAT),
        (DOUBLE, FLOAT),
        (FLOAT16, BFLOAT16),
        (BFLOAT16, FLOAT16),
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

    def __str__(self) -> str:
        return f"{dtype_name(self.src)} -> {dtype_name(self.dst)}"


def conversion_for(src: int, dst: int) -> Conversion | None:
    """The plain conversion from ``src`` to ``dst``, None when the writer has none."""
    return Conversion(src, dst) if (src, dst) in CONVERSIONS else None
