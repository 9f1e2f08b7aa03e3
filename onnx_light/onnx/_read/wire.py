"""A protobuf wire-format scanner that skips the weights of an ``.onnx`` file.

:func:`scan_file` walks a serialized ModelProto (read through small
positional reads, so only the blocks holding metadata are ever read) and returns the same model re-encoded *without*
the inline ``raw_data`` of its tensors: each raw_data of at least
``threshold`` bytes becomes an external reference into the ``.onnx`` file
itself (``location`` = the file's name, ``offset``/``length`` = where its bytes
lie). Sub-messages shorter than the threshold cannot hold such a tensor and are
copied verbatim without being decoded, which keeps the scan fast on graphs with
many nodes.

The scanner reads what protobuf reads: the last ``raw_data`` and
``data_location`` win, repeated occurrences of a singular message field are
merged, unknown fields (groups included) are kept verbatim, and nesting deeper
than :data:`MAX_DEPTH` messages is rejected, as protobuf does. A tensor at
exactly that depth stays inline: its reference would nest one level too deep.
"""

from __future__ import annotations

from array import array

from .._errors import ExternalDataError, shown
from .._system.files import pread_exact
from .skim import RawDataFilter, run_end

__all__ = ["WireError", "encode_varint", "scan_file"]


MAX_DEPTH = 100

# Which length-delimited fields of each message can lead to a TensorProto.
_CHILDREN = {
    "model": {7: "graph", 20: "training", 25: "function"},
    "graph": {1: "node", 5: "tensor", 15: "sparse"},
    "node": {5: "attr"},
    "attr": {5: "tensor", 6: "graph", 10: "tensor", 11: "graph", 22: "sparse", 23: "sparse"},
    "sparse": {1: "tensor", 2: "tensor"},
    "function": {7: "node", 11: "attr"},
    "training": {1: "graph", 2: "graph"},
    "tensor": {},
}
# Singular message fields: protobuf merges repeated occurrences of these into
# one message, so the scanner reads all occurrences together.
_SINGULAR = {
    "model": {7},
    "attr": {5, 6, 22},
    "sparse": {1, 2},
    "training": {1, 2},
}
_RAW_DATA, _NAME, _EXTERNAL_DATA, _DATA_LOCATION = 9, 8, 13, 14
_TENSOR_WATCH = frozenset({_RAW_DATA, _NAME, _EXTERNAL_DATA, _DATA_LOCATION})
_MAX_FIELD = 2**29 - 1


class WireError(ValueError):
    """A file's bytes are not a well-formed protobuf message.

    Raised by the wire scanner that reads a model's metadata without its
    weights (``load(..., skip_raw_data=True)``, the streaming helpers, dedup,
    ``info``); a :class:`ValueError`.
    """


def read_varint(buf, pos: int, end: int, max_bytes: int = 10) -> tuple[int, int]:
    """Decode a varint at ``pos``; return ``(value, next position)``.

    Args:
        buf: the bytes.
        pos: where the varint starts.
        end: where its message ends.
        max_bytes: the longest encoding accepted (protobuf reads tags and
            lengths in at most 5 bytes, values in at most 10).

    Raises:
        WireError: truncated, or longer than ``max_bytes``.
    """
    limit = 7 * max_bytes
    result = shift = 0
    while True:
        if pos >= end:
            raise WireError(f"truncated varint at byte {pos}")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift >= limit:
            raise WireError(f"varint too long at byte {pos}")


def encode_varint(value: int) -> bytes:
    """Encode a non-negative int as a varint."""
    out = bytearray()
    while True:
        b = value & 0x7F
        value >>= 7
        if value:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _len_field(number: int, payload: bytes) -> bytes:
    return encode_varint(number << 3 | 2) + encode_varint(len(payload)) + payload


def _entry(key: str, value: str) -> bytes:
    return _len_field(_EXTERNAL_DATA, _len_field(1, key.encode()) + _len_field(2, value.encode()))


def skip_field(buf, pos: int, end: int, depth: int = 0) -> tuple[int, int, int, int]:
    """Read one field header and skip its value.

    Groups (wire types 3 and 4, unused by ONNX but legal as unknown fields) are
    skipped whole; like protobuf, their nesting counts towards :data:`MAX_DEPTH`.

    Args:
        buf: the bytes.
        pos: where the field starts.
        end: where its message ends.
        depth: nesting depth of the message holding the field.

    Returns:
        ``(field number, wire type, payload start, field end)``; the payload
        start is only meaningful for length-delimited fields.

    Raises:
        WireError: malformed or truncated field.
    """
    number, wire, pos = _tag(buf, pos, end)
    if wire == 3:
        return number, wire, pos, _skip_group(buf, pos, end, number, depth)
    return number, wire, *_skip_value(buf, pos, end, number, wire)


def _tag(buf, pos: int, end: int) -> tuple[int, int, int]:
    tag, pos = read_varint(buf, pos, end, 5)
    number, wire = tag >> 3, tag & 7
    if number == 0 or number > _MAX_FIELD:
        raise WireError(f"invalid field number {number} at byte {pos}")
    return number, wire, pos


def _skip_value(buf, pos: int, end: int, number: int, wire: int) -> tuple[int, int]:
    """``(payload start, field end)`` of a field whose tag ends at ``pos``."""
    if wire == 0:
        _, stop = read_varint(buf, pos, end)
    elif wire == 1:
        stop = pos + 8
    elif wire == 2:
        length, pos = read_varint(buf, pos, end, 5)
        stop = pos + length
    elif wire == 5:
        stop = pos + 4
    else:
        raise WireError(f"unexpected wire type {wire} at byte {pos}")
    if stop > end:
        raise WireError(f"field {number} runs past the end of its message at byte {pos}")
    return pos, stop


def _skip_group(buf, pos: int, end: int, number: int, depth: int) -> int:
    open_groups = [number]
    while open_groups:
        if depth + len(open_groups) > MAX_DEPTH:
            raise WireError(f"messages nested deeper than {MAX_DEPTH} levels")
        inner, wire, pos = _tag(buf, pos, end)
        if wire == 3:
            open_groups.append(inner)
        elif wire == 4:
            if inner != open_groups.pop():
                raise WireError(f"mismatched end of group {inner} at byte {pos}")
        else:
            pos = _skip_value(buf, pos, end, inner, wire)[1]
    return pos


class _Spans:
    """Byte spans ``(start, stop)`` in a flat array: 16 bytes each, not a tuple."""

    __slots__ = ("flat",)

    def __init__(self) -> None:
        self.flat = array("q")

    def add(self, start: int, stop: int) -> None:
        self.flat.append(start)
        self.flat.append(stop)

    def __iter__(self):
        it = iter(self.flat)
        return zip(it, it)


class _Scanner:
    """Rewrites one serialized model.

    A message is a sequence of byte spans: one, or several when protobuf would
    merge repeated occurrences of a singular field into one message. Fields
    are visited as they are read, never stored one object each: memory stays
    a small multiple of the metadata, whatever the number of fields.
    """

    def __init__(self, buf, location: str, threshold: int) -> None:
        self.buf = buf
        self.location = location
        self.threshold = threshold
        self.filter = RawDataFilter(buf, threshold)
        self.converted: list[tuple[int, int]] = []

    @staticmethod
    def _size(pieces) -> int:
        return sum(p[1] - p[0] if isinstance(p, tuple) else len(p) for p in pieces)

    @staticmethod
    def _keep(pieces: list, start: int, stop: int) -> None:
        if pieces and isinstance(pieces[-1], tuple) and pieces[-1][1] == start:
            pieces[-1] = (pieces[-1][0], stop)
        else:
            pieces.append((start, stop))

    def fields(self, spans, depth: int, watch=()):
        """Yield ``(start, number, wire, payload, stop)`` for every field of the spans.

        A field whose number is not in ``watch`` may stand for a whole run of
        fields with its tag (``stop`` is then the end of the run).
        """
        buf = self.buf
        for start, end in spans:
            pos = start
            while pos < end:
                number, wire, payload, stop = skip_field(buf, pos, end, depth)
                if number not in watch and wire != 3:
                    stop = run_end(buf, pos, stop, end)
                yield pos, number, wire, payload, stop
                pos = stop

    def _merged(self, spans, depth: int, singular) -> dict[int, _Spans]:
        """Every occurrence of each singular message field (a first pass)."""
        merged: dict[int, _Spans] = {}
        for _, number, wire, payload, stop in self.fields(spans, depth, singular):
            if number in singular and wire == 2:
                merged.setdefault(number, _Spans()).add(payload, stop)
        return merged

    def message(self, kind: str, spans, depth: int) -> list | None:
        """Pieces of the rewritten message, or None when it is unchanged."""
        if depth > MAX_DEPTH:
            raise WireError(f"messages nested deeper than {MAX_DEPTH} levels")
        if kind == "tensor":
            return self.tensor(spans, depth)
        children = _CHILDREN[kind]
        singular = _SINGULAR.get(kind, ())
        merged = self._merged(spans, depth, singular) if singular else {}
        pieces: list = []
        changed = False
        seen: dict[int, bool] = {}  # singular field -> rewritten
        for pos, number, wire, payload, stop in self.fields(spans, depth, children):
            child = children.get(number) if wire == 2 else None
            if child is not None and number in seen:
                if not seen[number]:
                    self._keep(pieces, pos, stop)
                continue
            if child is not None:
                group = merged.get(number, [(payload, stop)])
                sub = None
                if sum(b - a for a, b in group) >= self.threshold and self.filter.may_hold(group):
                    sub = self.message(child, group, depth + 1)
                if number in merged:
                    seen[number] = sub is not None
                if sub is not None:
                    changed = True
                    pieces.append(encode_varint(number << 3 | 2))
                    pieces.append(encode_varint(self._size(sub)))
                    pieces.extend(sub)
                    continue
            self._keep(pieces, pos, stop)
        return pieces if changed else None

    def tensor(self, spans, depth: int) -> list | None:
        pieces: list = []
        raw = None
        name = ""
        external = False
        dropped = []  # external_data entries, dropped if the tensor is converted
        for pos, number, wire, payload, stop in self.fields(spans, depth, _TENSOR_WATCH):
            if number == _RAW_DATA and wire == 2:
                raw = (payload, stop)  # the last one wins, as in protobuf
                continue
            if number == _EXTERNAL_DATA and wire == 2:
                dropped.append((payload, stop))
                continue
            if number == _NAME and wire == 2:
                name = bytes(self.buf[payload:stop]).decode("utf-8", "replace")
            elif number == _DATA_LOCATION and wire == 0:
                # a closed enum: the last known value wins, unknown values are ignored
                value = read_varint(self.buf, payload, stop)[0] & 0xFFFFFFFF
                if value in (0, 1):
                    external = value == 1
            self._keep(pieces, pos, stop)
        if raw is None:
            return None
        payload, stop = raw
        if stop - payload < self.threshold:
            return None  # tiny raw_data stays inline: the message is unchanged
        if external:
            raise ExternalDataError(
                f"tensor {name!r} in {shown(self.location)}: is EXTERNAL but also carries raw_data"
            )
        if depth >= MAX_DEPTH:
            return None  # a reference would nest its entries deeper than protobuf allows
        for a, b in dropped:  # not written again: protobuf must still have accepted them
            _check_entry(bytes(self.buf[a:b]), a)
        pieces.append(_entry("location", self.location))
        pieces.append(_entry("offset", str(payload)))
        pieces.append(_entry("length", str(stop - payload)))
        pieces.append(encode_varint(_DATA_LOCATION << 3) + b"\x01")
        self.converted.append((payload, stop - payload))
        return pieces

    def join(self, pieces: list) -> bytes:
        return b"".join(bytes(self.buf[p[0] : p[1]]) if isinstance(p, tuple) else p for p in pieces)


def _check_entry(data: bytes, at: int) -> None:
    """Parse one ``external_data`` entry as protobuf would.

    Raises:
        WireError: it is not a well-formed StringStringEntryProto.
    """
    from google.protobuf.message import DecodeError
    from onnx import StringStringEntryProto

    try:
        StringStringEntryProto().ParseFromString(data)
    except DecodeError as e:
        raise WireError(f"malformed external_data entry at byte {at}: {e}") from None


def scan_buffer(buf, location: str, threshold: int = 1024) -> tuple[bytes, list[tuple[int, int]]]:
    """Rewrite a serialized ModelProto, turning big inline raw_data into references.

    Args:
        buf: the serialized model (bytes, or a memory map).
        location: the name to record as ``location`` (the file's own name).
        threshold: raw_data shorter than this stays inline (at least 1).

    Returns:
        ``(metadata bytes, [(offset, length) of every converted raw_data])``.

    Raises:
        WireError: the bytes are not a well-formed protobuf message.
        ExternalDataError: a tensor is EXTERNAL and carries raw_data too.
    """
    scanner = _Scanner(buf, location, max(1, threshold))
    pieces = None
    if scanner.filter.may_hold([(0, len(buf))]):
        pieces = scanner.message("model", [(0, len(buf))], 0)
    if pieces is None:
        return bytes(buf[:]), []
    return scanner.join(pieces), scanner.converted


class FileBuffer:
    """Read-only, indexable view of a file, read in small blocks with ``pread``.

    The scanner indexes it like bytes (``buf[i]``, ``buf[a:b]``). Only the blocks
    it touches are read, one or two kept at a time. (A memory map would do, but
    the kernel maps whole large folios on a fault, so touching one byte per
    tensor header would count megabytes of weights in the resident set.)
    """

    BLOCK = 64 * 1024

    def __init__(self, fd: int, size: int, name: str = "the model file") -> None:
        self.fd = fd
        self.size = size
        self.name = name
        self._blocks: dict[int, bytes] = {}

    def _read(self, length: int, offset: int) -> bytes:
        return pread_exact(self.fd, length, offset, self.name)

    def __len__(self) -> int:
        return self.size

    def _block(self, index: int) -> bytes:
        block = self._blocks.get(index)
        if block is None:
            if len(self._blocks) >= 2:
                self._blocks.pop(next(iter(self._blocks)))
            start = index * self.BLOCK
            block = self._read(max(0, min(self.BLOCK, self.size - start)), start)
            self._blocks[index] = block
        return block

    def __getitem__(self, key):
        if isinstance(key, slice):
            start, stop, _ = key.indices(self.size)
            if stop - start > self.BLOCK:
                return self._read(stop - start, start)
            return (
                b"".join(
                    self._block(i)[
                        max(start, i * self.BLOCK) - i * self.BLOCK : stop - i * self.BLOCK
                    ]
                    for i in range(start // self.BLOCK, (stop - 1) // self.BLOCK + 1)
                )
                if stop > start
                else b""
            )
        if key < 0 or key >= self.size:
            raise IndexError(key)
        return self._block(key // self.BLOCK)[key % self.BLOCK]


def scan_file(
    fd: int, size: int, location: str, threshold: int = 1024, name: str = "the model file"
) -> tuple[bytes, list[tuple[int, int]]]:
    """:func:`scan_buffer` over an open file, its weights never read.

    Args:
        fd: the ``.onnx`` file, open for reading.
        size: its size.
        location: the name to record as ``location`` of its inline bytes.
        threshold: raw_data shorter than this stays inline.
        name: the file, for messages.

    Returns:
        ``(metadata bytes, converted spans)`` as :func:`scan_buffer`.

    Raises:
        WireError: the file is not a well-formed ONNX model (the message names it).
    """
    try:
        return scan_buffer(FileBuffer(fd, size, name), location, threshold)
    except WireError as e:
        raise WireError(f"{name} is not a valid ONNX file: {e}") from None
