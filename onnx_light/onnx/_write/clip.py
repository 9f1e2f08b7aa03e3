"""float32 -> float16 as onnxruntime's float16 converter converts values, fast.

onnxruntime's ``convert_np_to_float16`` clips, then casts with numpy: values
strictly between 0 and ``min_positive_val`` in magnitude become
``min_positive_val``, finite values beyond ``max_finite_val`` become
``max_finite_val``, the sign kept; 0, NaN and infinities are unchanged. It
builds eight masks and four arrays to do so. :func:`clip_to_float16` gives the
same bits, and counts the values the clip changed, in one pass over the data:
the cast is monotonic, so only the values it sends to the edges of float16
(magnitudes up to ``min_positive_val``'s, from ``max_finite_val``'s: zeros,
the smallest subnormals, the largest finite values, infinities, NaN) can be
clipped. The values are cast a block at a time (256 KiB of float32, whose
float16 stays in a core's cache), and four integer reductions over the block's
float16 bits (the largest and smallest, signed and unsigned) tell whether any
of its values sits at an edge; only such a block is looked at again (one
comparison finds its few values at an edge; many, zeros mostly, are found on
the source's bits instead). On the benchmarks' float32 weights (a few values
in a million at an edge) it costs about 1.1x numpy's ``astype(float16)``, the
cast dominating; onnxruntime's function 6x to 7x.

It is what a streaming writer applies to each chunk of an external tensor
(the graph rules of ``_graph/float16.py`` only retype such tensors, and use it
for the inline ones).
"""

from __future__ import annotations

import numpy as np

__all__ = ["clip_to_float16"]


def _ort_clip(values: np.ndarray, low, high) -> np.ndarray:
    """onnxruntime's four rules in its order, with its scalars (numpy promotes alike)."""

    def between(a, b, c):
        return np.logical_and(a < b, b < c)

    values = np.where(between(0, values, low), low, values)
    values = np.where(between(-low, values, 0), -low, values)
    values = np.where(between(high, values, float("inf")), high, values)
    return np.where(between(float("-inf"), values, -high), -high, values)


BLOCK = 1 << 16  # values cast and checked at a time: 256 KiB of float32, 128 KiB of float16


def clip_to_float16(
    values: np.ndarray,
    min_positive_val: float = 5.96e-08,
    max_finite_val: float = 65504.0,
    *,
    out: np.ndarray | None = None,
) -> tuple[np.ndarray, int]:
    """Clip and cast to float16 as onnxruntime's converter does; count what the clip changed.

    The bits are those of onnxruntime's ``convert_np_to_float16`` on the same
    array and limits, NaN payloads included (its comparisons run in the dtype
    numpy promotes to: float32 for a float32 array and Python floats; a
    float64 limit promotes, as there). ``values`` is never modified. A
    float32 array is cast once into the result, a block of :data:`BLOCK` values
    at a time; only a block whose float16 bits reach an edge is looked at
    again (:func:`_clip_block`). Nothing is allocated beyond the result (none
    with ``out``) but for such blocks.

    Args:
        values: a float array (a chunk of a tensor's float32 bytes, or the
            float64 array onnxruntime makes of ``float_data``).
        min_positive_val: the smallest magnitude kept.
        max_finite_val: the largest finite magnitude kept.
        out: a C-contiguous float16 array of ``values``' shape to write into
            (None: a new one).

    Returns:
        ``(the float16 array, the number of values the clip changed)``.

    Raises:
        TypeError: ``values`` is not a float array.
        ValueError: ``out`` is not a C-contiguous float16 array of that shape.
    """
    values = np.asarray(values)
    if values.dtype.kind != "f":
        raise TypeError(f"clip_to_float16 takes a float array, not {values.dtype}")
    if out is not None and (
        out.dtype != np.float16 or out.shape != values.shape or not out.flags.c_contiguous
    ):
        raise ValueError(
            f"out must be a C-contiguous float16 array of shape {values.shape}, "
            f"not {out.dtype} {out.shape}"
        )
    low, high = min_positive_val, max_finite_val
    with np.errstate(over="ignore", invalid="ignore"):  # beyond float16: inf, as numpy casts
        simple = np.result_type(values.dtype, low, high) == np.float32 == values.dtype
        if not (simple and 0 < np.float32(low) <= np.float32(high)):
            clipped = _ort_clip(values, low, high)  # onnxruntime casts the promoted array
            count = int(np.count_nonzero((clipped != values) & ~np.isnan(values)))
            if out is None:
                return clipped.astype(np.float16), count
            np.copyto(out, clipped, casting="unsafe")
            return out, count
        if out is None:
            out = np.empty(values.shape, np.float16)
        limits = _Limits(np.float32(low), np.float32(high))
        source, result = values.reshape(-1), out.reshape(-1)
        bits, signed = result.view(np.uint16), result.view(np.int16)
        count = 0
        for start in range(0, source.size, BLOCK):
            end = start + BLOCK
            np.copyto(result[start:end], source[start:end], casting="unsafe")
            count += _clip_block(source[start:end], bits[start:end], signed[start:end], limits)
        return out, count


class _Limits:
    """The clipping limits as float32 (onnxruntime's comparisons promote them so), and
    their float16 bits: the cast is monotonic, so a magnitude below ``low``'s casts
    to bits at most ``small``, one above ``high``'s to bits at least ``large``."""

    __slots__ = ("high", "large", "low", "low_bits", "small")

    def __init__(self, low: np.float32, high: np.float32) -> None:
        self.low, self.high = low, high
        self.small = int(low.astype(np.float16).view(np.uint16))
        self.large = int(high.astype(np.float16).view(np.uint16))
        self.low_bits = int(low.view(np.uint32))


_MIN, _MAX = np.minimum.reduce, np.maximum.reduce
FEW = 1024  # candidates of a block looked at one by one; beyond, the source is scanned


def _clip_block(block: np.ndarray, bits: np.ndarray, signed: np.ndarray, limits: _Limits) -> int:
    """Clip the values of ``block`` (float32, not empty) in their cast (``bits`` and
    ``signed``: its bits as uint16 and int16, overwritten where clipped) by
    onnxruntime's rules; the number of values the clip changed.

    As uint16, a positive value is its magnitude and a negative one 0x8000 plus its
    magnitude; as int16, a negative one is its magnitude minus 0x8000. So the
    unsigned smallest is the smallest positive magnitude (when there is a positive
    value), the signed smallest the smallest negative one, the signed largest the
    largest positive one, the unsigned largest the largest negative one: four
    reductions, no array made, tell whether any value sits at an edge, and which
    (the usual answer: none).
    """
    small, large = limits.small, limits.large
    low_pos, low_neg = _MIN(bits) <= small, _MIN(signed) <= small - 0x8000
    high_pos, high_neg = _MAX(signed) >= large, _MAX(bits) >= 0x8000 + large
    count = 0
    if low_pos or low_neg:
        if low_pos and low_neg:
            near = np.bitwise_and(bits, 0x7FFF) <= small
        else:
            near = bits <= small if low_pos else signed <= small - 0x8000
        count += _clip_low(block, bits, near, limits)
    if high_pos or high_neg:
        if high_pos and high_neg:
            near = np.bitwise_and(bits, 0x7FFF) >= large
        else:
            near = signed >= large if high_pos else bits >= 0x8000 + large
        count += _clip_high(block, bits, near, limits)
    return count


def _clip_low(block: np.ndarray, bits: np.ndarray, near: np.ndarray, limits: _Limits) -> int:
    """Magnitudes strictly between 0 and ``low`` become ``low``'s bits, the sign kept
    (the cast keeps it, a tiny value's cast to 0 too); ``near`` marks the values
    whose cast is at most ``small``: these and zeros. A few are looked at one by
    one; many (zeros, mostly) are found exactly on the source's bits instead, its
    magnitudes minus one in uint32 (0 wraps to the top) below ``low``'s minus one.
    """
    if np.count_nonzero(near) <= FEW:
        edges = np.flatnonzero(near)
        picked = np.abs(block[edges])
        edges = edges[(picked < limits.low) & (picked > 0)]
    else:
        magnitude = np.bitwise_and(block.view(np.uint32), 0x7FFFFFFF)
        magnitude -= 1
        edges = np.flatnonzero(magnitude < limits.low_bits - 1)
    bits[edges] = (bits[edges] & 0x8000) | limits.small
    return int(edges.size)


def _clip_high(block: np.ndarray, bits: np.ndarray, near: np.ndarray, limits: _Limits) -> int:
    """Finite magnitudes above ``high`` become ``high``'s bits, the sign kept; ``near``
    marks the values whose cast is at least ``large`` (infinities and NaN among
    them: they compare false and stay)."""
    edges = np.flatnonzero(near)
    picked = np.abs(block[edges])
    edges = edges[(picked > limits.high) & (picked < np.inf)]
    bits[edges] = (bits[edges] & 0x8000) | limits.large
    return int(edges.size)
