"""Blockwise weight quantization, the arithmetic of onnxruntime's quantizer.

Two functions, each quantizing a slab of whole blocks (whatever holds for a
slab holds for the tensor: blocks are quantized independently, so a tensor
quantized slab by slab gives the same bytes as quantized whole):

- :func:`quantize_columns`, for ``MatMulNBits``: a ``[K, N]`` weight quantized
  along K in blocks of ``block_size`` rows, written column-major as
  ``B [N, ceil(K / bs), bs * bits / 8]`` (uint8, two 4-bit values per byte,
  the even row in the low nibble), ``scales [N, ceil(K / bs)]`` in the
  weight's dtype, ``zero_points`` (asymmetric only; at 4 bits two per byte,
  an unused high nibble 8). The arithmetic is MLAS's
  ``MlasQuantizeBlockwise`` (``onnxruntime/core/mlas/lib/q4_dq.cpp``), which
  onnxruntime's ``MatMulNBitsQuantizer`` calls through its pybind functions
  ``quantize_matmul_4bits`` / ``quantize_matmul_8bits``: those are used when
  onnxruntime is installed (its own code, and multi-threaded); else
  :func:`mlas_blockwise`, the same arithmetic in numpy (float32 math, the
  scale rounded to the weight's dtype then multiplied by its reciprocal,
  halves rounded away from zero), tested bit for bit against them
  (``tests/test_quantize.py``).
- :func:`quantize_gather_rows`, for ``GatherBlockQuantized``: onnxruntime's
  ``DefaultWeightOnlyQuantizer.quantize_ndarray`` (numpy, in the table's
  dtype, halves rounded to even), vectorized over the blocks of a slab.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "mlas_blockwise",
    "ort_blockwise",
    "quantize_columns",
    "quantize_gather_rows",
    "to_bfloat16",
    "widen_bfloat16",
]

_FLT_MAX = np.float32(np.finfo(np.float32).max)


def _round_clip(x: np.ndarray, top: int) -> np.ndarray:
    """``clamp(roundf(x), 0, top)`` as uint8: C's ``roundf`` rounds halves away from
    zero; below 0 every value clamps to 0, so rounding halves up is the same there."""
    low = np.floor(x)
    low += (x - low) >= np.float32(0.5)
    np.clip(low, 0, top, out=low)
    return low.astype(np.uint8)


def mlas_blockwise(
    values: np.ndarray, bits: int, block_size: int, symmetric: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """``MlasQuantizeBlockwise`` (column-wise, row-major source) in numpy.

    Args:
        values: ``[K, N]`` float32 or float16.
        bits: 4 or 8.
        block_size: rows per block (a power of two, at least 16).
        symmetric: no zero points (the implicit one is the middle value).

    Returns:
        ``(B [N, kb, bs * bits / 8] uint8, scales [N, kb] of values' dtype,
        zero points [N, ceil(kb / (8 / bits))] uint8, or None when symmetric)``.
    """
    rows, cols = values.shape
    blocks = -(-rows // block_size)
    top, mid = (1 << bits) - 1, 1 << (bits - 1)
    padded = blocks * block_size
    v = values.astype(np.float32)
    if padded != rows:  # NaN is skipped by the range scan, as MLAS's comparisons skip it
        v = np.concatenate([v, np.full((padded - rows, cols), np.nan, np.float32)])
    v = v.reshape(blocks, block_size, cols)
    low = np.fmin.reduce(v, axis=1, initial=_FLT_MAX)
    high = np.fmax.reduce(v, axis=1, initial=-_FLT_MAX)
    if symmetric:
        peak = np.where(np.abs(high) > np.abs(low), high, low)
        scale = (-peak / np.float32(mid)).astype(values.dtype)
        zero = np.full((blocks, cols), mid, np.float32)
    else:
        low, high = np.minimum(low, 0), np.maximum(high, 0)
        unit = (high - low) / np.float32(top)
        with np.errstate(divide="ignore", invalid="ignore"):
            point = np.where(unit != 0, np.float32(0) - low / unit, low)
        zero = _round_clip(point, top).astype(np.float32)
        scale = unit.astype(values.dtype)
    stored = scale.astype(np.float32)
    with np.errstate(divide="ignore"):
        reciprocal = np.where(stored != 0, np.float32(1) / stored, np.float32(0))
    with np.errstate(invalid="ignore", over="ignore"):
        q = _round_clip(v * reciprocal[:, None, :] + zero[:, None, :], top)
    q = q.reshape(padded, cols)
    if bits == 4:
        if rows % 2:  # the last pair's high nibble: MLAS keeps the previous pair's
            pairs = 2 * block_size  # (rows of one MLAS thread block)
            q[rows] = q[rows - 2] if (rows - 1) % pairs else 0
            q[rows + 1 :] = 0
        else:
            q[rows:] = 0
        q = q[0::2] | (q[1::2] << 4)
    else:
        q[rows:] = 0
    packed = np.ascontiguousarray(q.reshape(blocks, -1, cols).transpose(2, 0, 1))
    scales = np.ascontiguousarray(scale.T)
    if symmetric:
        return packed, scales, None
    zero_points = zero.astype(np.uint8).T
    if bits == 4:
        if blocks % 2:
            zero_points = np.concatenate([zero_points, np.full((cols, 1), mid, np.uint8)], 1)
        zero_points = zero_points[:, 0::2] | (zero_points[:, 1::2] << 4)
    return packed, scales, np.ascontiguousarray(zero_points)


def ort_blockwise(
    values: np.ndarray, bits: int, block_size: int, symmetric: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None] | None:
    """The same through onnxruntime's pybind function (the one its quantizer
    calls), or None when onnxruntime is not installed."""
    try:
        from onnxruntime.capi import _pybind_state as ort  # noqa: PLC0415
    except ImportError:
        return None
    rows, cols = values.shape
    blocks = -(-rows // block_size)
    kpack = 8 // bits
    if blocks * block_size != rows:  # as onnxruntime's quantizer: padded with zeros
        values = np.pad(values, ((0, blocks * block_size - rows), (0, 0)))
    packed = np.zeros((cols, blocks, block_size * bits // 8), np.uint8)
    zero_points = np.zeros((cols, -(-blocks // kpack)), np.uint8)
    scales = np.zeros((cols, blocks), values.dtype)
    function = ort.quantize_matmul_4bits if bits == 4 else ort.quantize_matmul_8bits
    function(
        packed,
        np.ascontiguousarray(values),
        scales,
        zero_points,
        block_size,
        cols,
        rows,
        symmetric,
    )
    return packed, scales, None if symmetric else zero_points


def quantize_columns(
    values: np.ndarray, bits: int, block_size: int, symmetric: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Quantize ``[K, N]`` along K for ``MatMulNBits``: onnxruntime's own function when
    it is installed, else :func:`mlas_blockwise` (the same bytes)."""
    done = ort_blockwise(values, bits, block_size, symmetric)
    return done if done is not None else mlas_blockwise(values, bits, block_size, symmetric)


def widen_bfloat16(bits: np.ndarray) -> np.ndarray:
    """bfloat16 values (their uint16 bits) as float32, exactly."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


def to_bfloat16(values: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits (uint16), rounded to nearest even, NaN kept quiet: what
    ``astype(ml_dtypes.bfloat16)`` gives onnxruntime's quantizer for a bfloat16
    weight's scales (computed in float32)."""
    bits = np.ascontiguousarray(values, np.float32).view(np.uint32)
    rounded = ((bits + (((bits >> 16) & 1) + np.uint32(0x7FFF))) >> 16).astype(np.uint16)
    nan = np.isnan(values)
    rounded[nan] = ((bits[nan] >> 16) | 0x40).astype(np.uint16)
    return rounded


def _pack_int4(data: np.ndarray) -> np.ndarray:
    """onnxruntime's ``pack_int8_to_int4``: flattened, the even element in the low
    nibble, a zero appended to an odd count."""
    flat = data.reshape(-1)
    if flat.size % 2:
        flat = np.append(flat, 0).astype(data.dtype)
    return ((flat[::2] & 0xF) | ((flat[1::2] & 0xF) << 4)).astype(np.uint8)


def quantize_gather_rows(
    data: np.ndarray, block_size: int, symmetric: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """onnxruntime's ``quantize_ndarray`` (4 bits) on ``data [m, k, n]``, along k.

    Args:
        data: the slab, float32 or float16 (the arithmetic stays in its dtype).
        block_size: elements of k per block.
        symmetric: signed int4 without zero points.

    Returns:
        ``(packed int4 of the flattened data, scales [m, kb, n] in data's dtype,
        packed uint4 zero points or None)``. Slabs whose element counts are
        even concatenate to the whole tensor's bytes.
    """
    m, k, n = data.shape
    parts, scales, zeros = [], [], []
    with np.errstate(divide="ignore", invalid="ignore"):
        full = k - k % block_size
        segments = ([(0, full, block_size)] if full else []) + (
            [(full, k, k - full)] if full != k else []
        )
        for start, end, size in segments:
            part = data[:, start:end, :].reshape(m, -1, size, n)
            high = part.max(axis=2, keepdims=True)
            low = part.min(axis=2, keepdims=True)
            if symmetric:
                peak = np.where(np.abs(high) > np.abs(low), high, low)
                scale = peak / -8.0
                q = np.where(scale == 0, 0, part / scale).round().clip(-8, 7).astype(np.int8)
            else:
                low = np.minimum(low, 0)
                high = np.maximum(high, 0)
                scale = (high - low) / 15.0
                zero = np.where(scale == 0, 8, -low / scale).round().clip(0, 15).astype(np.uint8)
                q = np.where(scale == 0, 8, part / scale + zero).round().clip(0, 15)
                q = q.astype(np.uint8)
                zeros.append(zero.reshape(m, -1, n))
            parts.append(q.reshape(m, -1, n))
            scales.append(scale.reshape(m, -1, n))
    q = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=1)
    scale = scales[0] if len(scales) == 1 else np.concatenate(scales, axis=1)
    zero_points = None
    if not symmetric:
        zero = zeros[0] if len(zeros) == 1 else np.concatenate(zeros, axis=1)
        zero_points = _pack_int4(zero)
    return _pack_int4(q), scale.astype(data.dtype, copy=False), zero_points
