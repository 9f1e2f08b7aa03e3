"""Weights quantized while they stream into a weights file.

A weight the quantizer's graph pass replaces (``_graph/quantize.py``) becomes
two or three tensors of the new model (the packed values, the scales, the
zero points), each a reference to the weight's bytes in the source with a
:class:`QuantPart` as its cast: the planner sizes each by its part, and
:func:`write_quantized` reads the weight once, in slabs of whole blocks of
rows, quantizes each slab (``_write/blockwise.py``) into the tensor's outputs
and writes every part at its planned offset. Memory holds one weight's
quantized output (an eighth of a float32 weight at 4 bits) and one slab of
at most :data:`SLAB_BYTES`, whatever the model's size.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from math import prod

import numpy as np
import onnx

from .._dtypes import BFLOAT16, FLOAT, FLOAT16, ITEMSIZE, dtype_name
from .._errors import TruncatedFileError, shown
from .._plan.planner import Item
from .._read.sources import SourceFiles
from .._system.files import read_upto
from .blockwise import quantize_columns, quantize_gather_rows, to_bfloat16, widen_bfloat16
from .copy import pwrite_all

__all__ = ["SLAB_BYTES", "QuantPart", "Quantization", "quantize", "write_quantized"]

SLAB_BYTES = 16 * 1024 * 1024  # source bytes read and quantized at once (at least a block row)
_NUMPY = {FLOAT: np.float32, FLOAT16: np.float16, BFLOAT16: np.uint16}  # bfloat16: its bits
UINT8 = onnx.TensorProto.UINT8
_BITS = {
    FLOAT: 32,
    FLOAT16: 16,
    BFLOAT16: 16,
    UINT8: 8,
    onnx.TensorProto.INT4: 4,
    onnx.TensorProto.UINT4: 4,
}


@dataclass(frozen=True, slots=True)
class Quantization:
    """One weight and how it is quantized.

    Attributes:
        target: ``"MatMulNBits"`` (a ``[K, N]`` weight, or ``[N, K]`` when
            ``transposed``: a Gemm's ``transB``) or ``"GatherBlockQuantized"``
            (a table quantized along its axis 1).
        src: the weight's dtype (float32 or float16; bfloat16 for MatMulNBits:
            quantized in float32, its scales rounded to bfloat16 after, as
            onnxruntime's quantizer does).
        shape: its dims.
        bits: 4 or 8.
        block_size: elements per block.
        symmetric: no zero points.
        transposed: the weight is ``[N, K]``.
    """

    target: str
    src: int
    shape: tuple[int, ...]
    bits: int
    block_size: int
    symmetric: bool
    transposed: bool = False

    @property
    def gather(self) -> bool:
        return self.target == "GatherBlockQuantized"

    @property
    def source_bytes(self) -> int:
        return prod(self.shape) * ITEMSIZE[self.src]

    def _kn(self) -> tuple[int, int, int]:
        """``(K or k, N or n, m)``: the quantized axis, the other, the rows before."""
        if self.gather:
            return self.shape[1], prod(self.shape[2:]), self.shape[0]
        k, n = self.shape[::-1] if self.transposed else self.shape
        return k, n, 1

    def outputs(self) -> dict[str, tuple[list[int], int]]:
        """``{part: (dims, onnx dtype)}`` of the new tensors, in the order they are made."""
        k, n, _ = self._kn()
        blocks = -(-k // self.block_size)
        if self.gather:
            dims = [self.shape[0], blocks, *self.shape[2:]]
            packed = onnx.TensorProto.INT4 if self.symmetric else onnx.TensorProto.UINT4
            parts = {"data": (list(self.shape), packed), "scales": (dims, self.src)}
            if not self.symmetric:
                parts["zero_points"] = (dims, onnx.TensorProto.UINT4)
            return parts
        kpack = 8 // self.bits
        parts = {
            "B": ([n, blocks, self.block_size * self.bits // 8], UINT8),
            "scales": ([n, blocks], self.src),
        }
        if not self.symmetric:
            parts["zero_points"] = ([n, -(-blocks // kpack)], UINT8)
        return parts

    def nbytes(self, part: str) -> int:
        """The byte size of ``part``."""
        dims, dtype = self.outputs()[part]
        return (prod(dims) * _BITS[dtype] + 7) // 8

    def slabs(self) -> list[tuple[int, int]]:
        """``(first row, rows)`` of the source read at once: whole blocks of rows (and
        whole pairs of blocks at 4 bits, whose zero points share a byte)."""
        rows = self.shape[0]
        row_bytes = self.source_bytes // max(rows, 1)
        # whole columns, an even count (packed nibbles in whole bytes); or whole blocks
        step = 2 if self.gather or self.transposed else 8 // self.bits * self.block_size
        step *= max(1, SLAB_BYTES // max(step * row_bytes, 1))
        return [(start, min(step, rows - start)) for start in range(0, rows, step)]

    def _empty(self) -> dict[str, np.ndarray]:
        out = {}
        for part, (dims, dtype) in self.outputs().items():
            if dtype in _NUMPY:
                out[part] = np.zeros(dims, _NUMPY[dtype])
            elif self.gather:
                out[part] = np.zeros(self.nbytes(part), np.uint8)
            else:
                out[part] = np.zeros(dims, np.uint8)
        return out

    def _place(self, out: dict[str, np.ndarray], start: int, slab: np.ndarray) -> None:
        """Quantize the source rows ``slab`` (from row ``start``) into ``out``."""
        if self.gather:
            k, n, _ = self._kn()
            data, scales, zeros = quantize_gather_rows(
                slab.reshape(len(slab), k, n), self.block_size, self.symmetric
            )
            at = start * k * n // 2
            out["data"][at : at + len(data)] = data
            blocks = scales.shape[1]
            out["scales"].reshape(-1)[start * blocks * n : (start + len(slab)) * blocks * n] = (
                scales.reshape(-1)
            )
            if zeros is not None:
                at = start * blocks * n // 2
                out["zero_points"][at : at + len(zeros)] = zeros
            return
        if self.src == BFLOAT16:
            slab = widen_bfloat16(slab)
        if self.transposed:  # [N, K] rows: whole columns of B
            packed, scales, zeros = quantize_columns(
                np.ascontiguousarray(slab.T), self.bits, self.block_size, self.symmetric
            )
            if self.src == BFLOAT16:
                scales = to_bfloat16(scales)
            out["B"][start : start + len(slab)] = packed
            out["scales"][start : start + len(slab)] = scales
            if zeros is not None:
                out["zero_points"][start : start + len(slab)] = zeros
            return
        packed, scales, zeros = quantize_columns(slab, self.bits, self.block_size, self.symmetric)
        if self.src == BFLOAT16:
            scales = to_bfloat16(scales)
        first = start // self.block_size
        out["B"][:, first : first + packed.shape[1]] = packed
        out["scales"][:, first : first + scales.shape[1]] = scales
        if zeros is not None:
            first //= 8 // self.bits
            out["zero_points"][:, first : first + zeros.shape[1]] = zeros


def quantize(q: Quantization, rows: Callable[[int, int], np.ndarray]) -> dict[str, np.ndarray]:
    """Every part of a weight, its source read by ``rows(first, count)`` slab by slab.

    Returns:
        ``{part: array}`` whose bytes are the part's (``tobytes()``).
    """
    out = q._empty()
    width = prod(q.shape[1:])
    for start, count in q.slabs():
        q._place(out, start, rows(start, count).reshape(count, width))
    return out


@dataclass(frozen=True, slots=True)
class QuantPart:
    """The cast of one new tensor: a part of a quantized weight (the conversion the
    planner and the resolver ask: its size, the source's)."""

    quantization: Quantization
    part: str
    clips = False

    @property
    def src(self) -> int:
        return self.quantization.src

    @property
    def dst(self) -> int:
        return self.quantization.outputs()[self.part][1]

    def length(self, _length: int) -> int:
        """The part's byte size."""
        return self.quantization.nbytes(self.part)

    def source_length(self, _length: int) -> int:
        """The byte size of the source weight it is made from."""
        return self.quantization.source_bytes

    def __str__(self) -> str:
        q = self.quantization
        return f"{dtype_name(q.src)} -> {q.bits}-bit {q.target} {self.part}"


def write_quantized(
    fd: int,
    jobs: list[tuple[int, Item, int]],
    files: SourceFiles,
    advance: Callable[[int], None],
) -> None:
    """Read each quantized weight once, quantize it slab by slab, write its parts.

    Args:
        fd: the destination weights file, open for writing.
        jobs: ``(position in the layout, item, destination offset)`` of the
            tensors whose cast is a :class:`QuantPart`.
        files: the call's source files.
        advance: called with the bytes written after each part (progress).

    Raises:
        TruncatedFileError: a source ended before a weight's last byte.
        OSError: disk full, I/O error.
    """
    groups: dict = {}
    for _, item, offset in jobs:
        cast = item.cast.conversion
        groups.setdefault((item.ref.span, cast.quantization), []).append((item, cast, offset))
    for (_, q), parts in groups.items():
        ref = parts[0][0].ref
        dtype = np.dtype(_NUMPY[q.src]).newbyteorder("<")
        row_bytes = q.source_bytes // max(q.shape[0], 1)

        def rows(first: int, count: int, ref=ref, dtype=dtype, row_bytes=row_bytes) -> np.ndarray:
            buf = bytearray(count * row_bytes)
            with files.lease(ref.source) as src:
                got = read_upto(src, memoryview(buf), ref.offset + first * row_bytes)
            if got != len(buf):
                raise TruncatedFileError(
                    f"tensor {ref.site.label} in {shown(ref.file)}: the file ends before byte "
                    f"{ref.offset + first * row_bytes + len(buf)} (truncated while reading?)"
                )
            return np.frombuffer(buf, dtype)

        out = quantize(q, rows)
        for _, cast, offset in parts:
            data = memoryview(np.ascontiguousarray(out[cast.part])).cast("B")
            pwrite_all(fd, data, offset)
            advance(len(data))
