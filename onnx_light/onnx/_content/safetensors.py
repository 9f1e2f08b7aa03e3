"""Read a ``.safetensors`` file's header, never its data.

A safetensors file is 8 bytes (little-endian u64 ``N``), then ``N`` bytes of
UTF-8 JSON, then the data::

    {"__metadata__": {"key": "value"},
     "name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [start, end]}, ...}

A tensor's bytes are ``[8 + N + start, 8 + N + end)`` of the file. The header
is checked as strictly as the reference implementation
(https://github.com/huggingface/safetensors) checks it: known dtypes, lengths
that match shape x dtype, ranges inside the file that neither overlap nor
leave bytes that belong to no tensor. Only the header is read, with one
bounded positioned read, so a file of any size costs the size of its header.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass

from onnx import TensorProto

from .._errors import ExternalDataError, shown
from .._system.files import pread

__all__ = ["read_safetensors_header"]


MAX_HEADER_SIZE = 100_000_000  # the reference implementation's limit (MAX_HEADER_SIZE)

# Bits per element of every dtype the reference implementation knows.
# F4 and F6_* pack several elements per byte: a tensor of them must fill
# whole bytes.
DTYPE_BITS: dict[str, int] = {
    "BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8,
    "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8, "I16": 16, "U16": 16, "F16": 16, "BF16": 16,
    "I32": 32, "U32": 32, "F32": 32, "F64": 64, "I64": 64, "U64": 64, "C64": 64,
    "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
}  # fmt: skip

# safetensors dtype -> onnx.TensorProto data type, where the bytes mean the
# same thing. F4 and F6_* are left out: safetensors does not say in which
# order it packs their elements in a byte, onnx stores the first in the low bits.
ONNX_DTYPES: dict[str, int] = {
    "BOOL": TensorProto.BOOL,
    "U8": TensorProto.UINT8,
    "I8": TensorProto.INT8,
    "U16": TensorProto.UINT16,
    "I16": TensorProto.INT16,
    "U32": TensorProto.UINT32,
    "I32": TensorProto.INT32,
    "U64": TensorProto.UINT64,
    "I64": TensorProto.INT64,
    "F16": TensorProto.FLOAT16,
    "BF16": TensorProto.BFLOAT16,
    "F32": TensorProto.FLOAT,
    "F64": TensorProto.DOUBLE,
    "C64": TensorProto.COMPLEX64,
    "F8_E4M3": TensorProto.FLOAT8E4M3FN,
    "F8_E5M2": TensorProto.FLOAT8E5M2,
    "F8_E4M3FNUZ": TensorProto.FLOAT8E4M3FNUZ,
    "F8_E5M2FNUZ": TensorProto.FLOAT8E5M2FNUZ,
}
if hasattr(TensorProto, "FLOAT8E8M0"):  # onnx >= 1.18
    ONNX_DTYPES["F8_E8M0"] = TensorProto.FLOAT8E8M0

_RESAVE = "re-save it with safetensors.save_file, or re-download it"


@dataclass(frozen=True)
class SafetensorsTensor:
    """One tensor of a safetensors file, as its header describes it.

    Attributes:
        name: the tensor's name (its key in the header).
        dtype: the safetensors dtype name (``"F32"``, ``"BF16"``...); see
            :data:`ONNX_DTYPES` for the onnx data type.
        shape: its dimensions (``()`` for a scalar).
        offset: where its bytes start in the file (absolute: ``8 + N + start``).
        length: how many bytes it holds.
    """

    name: str
    dtype: str
    shape: tuple[int, ...]
    offset: int
    length: int


def read_safetensors_header(fd: int, path: str) -> list[SafetensorsTensor]:
    """The tensors of a safetensors file, read and checked from its header only.

    The 8-byte length is read, then the JSON header in one positioned read (at
    most :data:`MAX_HEADER_SIZE` bytes); the data is never read.

    Args:
        fd: an open descriptor of the file (read with positioned reads:
            its position is not used, and moved only on Windows, which has
            no ``pread``).
        path: the file's name, for messages only.

    Returns:
        The tensors in the order of their bytes in the file (by offset).
        ``__metadata__`` is checked (strings to strings) but not returned.

    Raises:
        ExternalDataError: the file is not a valid safetensors file: shorter
            than 8 bytes, a header length over 100 MB or past the end of the
            file, a header that is not UTF-8 JSON holding an object, a tensor
            entry malformed or named twice, an unknown dtype, a length that does
            not match shape x dtype, a range past the end of the data, ranges
            that overlap or leave bytes that belong to no tensor. The message
            names the file, and the tensor when one is at fault.
        OSError: reading the file failed.
    """
    where = shown(path)
    size = os.fstat(fd).st_size
    if size < 8:
        raise ExternalDataError(
            f"{where}: not a safetensors file: {size} bytes, fewer than the 8 that hold "
            f"the header's length; {_RESAVE}"
        )
    first = pread(fd, 8, 0)
    if len(first) < 8:  # shrank since fstat
        raise ExternalDataError(f"{where}: the file ended while reading its header's length")
    n = int.from_bytes(first, "little")
    if n > MAX_HEADER_SIZE:
        raise ExternalDataError(
            f"{where}: not a safetensors file: its header length {n} is over the "
            f"{MAX_HEADER_SIZE}-byte limit of the safetensors library; {_RESAVE}"
        )
    if 8 + n > size:
        raise ExternalDataError(
            f"{where}: its header length {n} goes past the end of the file ({size} bytes): "
            f"truncated or not a safetensors file; {_RESAVE}"
        )
    raw = pread(fd, n, 8)
    if len(raw) < n:
        raise ExternalDataError(f"{where}: the file ended while reading its header")
    tensors = _parse(raw, where)
    return _check_ranges(tensors, 8 + n, size - 8 - n, where)


def _parse(raw: bytes, where: str) -> list[tuple[str, str, tuple[int, ...], int, int]]:
    """(name, dtype, shape, start, end) of each entry of the JSON header."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ExternalDataError(
            f"{where}: its header is not UTF-8 (byte {8 + e.start}); {_RESAVE}"
        ) from None
    try:
        header = json.loads(text, object_pairs_hook=_no_duplicates)
    except _Duplicate as e:
        raise ExternalDataError(f"{where}: its header names {shown(e.key)} twice") from None
    except ValueError as e:
        raise ExternalDataError(f"{where}: its header is not valid JSON ({e}); {_RESAVE}") from None
    if not isinstance(header, dict):
        raise ExternalDataError(
            f"{where}: its header is JSON {type(header).__name__}, not an object; {_RESAVE}"
        )
    entries = []
    for name, info in header.items():
        if name == "__metadata__":
            if not isinstance(info, dict) or not all(isinstance(v, str) for v in info.values()):
                raise ExternalDataError(
                    f"{where}: its header's __metadata__ is not an object of strings"
                )
            continue
        entries.append(_entry(name, info, where))
    return entries


def _entry(name: str, info: object, where: str) -> tuple[str, str, tuple[int, ...], int, int]:
    """One tensor entry checked: (name, dtype, shape, start, end)."""
    what = f"tensor {shown(name)} in {where}"
    if not isinstance(info, dict):
        raise ExternalDataError(
            f"{what}: its header entry is {type(info).__name__}, not an object "
            "with dtype, shape and data_offsets"
        )
    for key in ("dtype", "shape", "data_offsets"):
        if key not in info:
            raise ExternalDataError(f"{what}: its header entry has no {key!r}")
    dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
    if not isinstance(dtype, str) or dtype not in DTYPE_BITS:
        raise ExternalDataError(
            f"{what}: unknown dtype {dtype!r} (known: {', '.join(DTYPE_BITS)}); "
            "a newer safetensors may have written it"
        )
    if not isinstance(shape, list) or not all(_natural(d) for d in shape):
        raise ExternalDataError(f"{what}: shape {shape!r} is not a list of non-negative integers")
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(map(_natural, offsets)):
        raise ExternalDataError(
            f"{what}: data_offsets {offsets!r} is not a pair [start, end] of non-negative integers"
        )
    start, end = offsets
    if end < start:
        raise ExternalDataError(f"{what}: data_offsets [{start}, {end}] end before they start")
    bits = math.prod(shape) * DTYPE_BITS[dtype]
    if bits % 8:
        raise ExternalDataError(
            f"{what}: {math.prod(shape)} elements of {dtype} do not fill whole bytes"
        )
    if end - start != bits // 8:
        raise ExternalDataError(
            f"{what}: data_offsets [{start}, {end}] hold {end - start} bytes but shape "
            f"{shape} of {dtype} needs {bits // 8}; {_RESAVE}"
        )
    return name, dtype, tuple(shape), start, end


def _check_ranges(entries, base: int, data_size: int, where: str) -> list[SafetensorsTensor]:
    """Tensors sorted by offset, once their ranges are known to tile the data exactly."""
    entries.sort(key=lambda e: (e[3], e[4]))
    previous, reached = None, 0
    for name, _, _, start, end in entries:
        what = f"tensor {shown(name)} in {where}"
        if end > data_size:
            raise ExternalDataError(
                f"{what}: data_offsets [{start}, {end}] go past the end of the data "
                f"({data_size} bytes after the header): the file is truncated; {_RESAVE}"
            )
        if start < reached:
            raise ExternalDataError(
                f"{what}: data_offsets [{start}, {end}] overlap tensor {shown(previous)} "
                f"(which ends at {reached}); {_RESAVE}"
            )
        if start > reached:
            raise ExternalDataError(
                f"{what}: data bytes [{reached}, {start}) before it belong to no tensor; "
                f"the safetensors library refuses such a file; {_RESAVE}"
            )
        previous, reached = name, end
    if reached != data_size:
        raise ExternalDataError(
            f"{where}: its last {data_size - reached} bytes belong to no tensor; "
            f"the safetensors library refuses such a file; {_RESAVE}"
        )
    return [
        SafetensorsTensor(name, dtype, shape, base + start, end - start)
        for name, dtype, shape, start, end in entries
    ]


def _natural(value: object) -> bool:
    return type(value) is int and value >= 0


class _Duplicate(Exception):
    def __init__(self, key: str) -> None:
        self.key = key


def _no_duplicates(pairs: list[tuple[str, object]]) -> dict:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen = set()
        for key, _ in pairs:
            if key in seen:
                raise _Duplicate(key)
            seen.add(key)
    return out
