"""Serialize a model with some tensors replaced, without copying the others.

``save`` must not modify the caller's model, yet the ``.onnx`` it writes holds
references instead of the big tensors' raw data. Copying the model would copy
every weight; instead :func:`serialize_pieces` encodes the messages on the way to
a replaced tensor field by field and lets protobuf serialize everything else
in C. A protobuf message is the concatenation of its fields, so the result
parses to the model with the substitutions applied. Unknown fields (written
by a newer ONNX) of the messages on the way are kept, as ``onnx.save`` keeps
them.

The result is a list of pieces: bytes, and spans of source files (a
:class:`Spliced` tensor's raw_data), which the writer copies file to file, so
inline weights that stay inline are never read into memory.
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx

from .._read.wire import encode_varint

__all__ = ["Spliced", "piece_size", "serialize_pieces", "strip_raw_data"]


_LEAF = object()
_RAW_DATA_TAG = encode_varint(9 << 3 | 2)


@dataclass(frozen=True)
class Span:
    """Bytes of a source file that go into the output as they are.

    Attributes:
        ref: the :class:`TensorRef` whose bytes these are (source, offset, length).
    """

    ref: object

    @property
    def length(self) -> int:
        return self.ref.length


@dataclass(frozen=True)
class Spliced:
    """A tensor to write inline, its raw_data copied from a file, never read into memory.

    Attributes:
        tensor: the tensor without raw_data, external_data and data_location.
        ref: where its raw_data lies.
    """

    tensor: onnx.TensorProto
    ref: object


def strip_raw_data(tensor: onnx.TensorProto) -> onnx.TensorProto:
    """A copy of ``tensor`` without ``raw_data``, ``external_data`` and ``data_location``.

    ``raw_data`` is never read, so this costs nothing for a big tensor.
    """
    out = onnx.TensorProto()
    for fd in tensor.DESCRIPTOR.fields:
        if fd.name not in ("raw_data", "external_data", "data_location"):
            _copy_field(tensor, out, fd)
    _copy_unknown(tensor, out)
    return out


def _copy_unknown(src, dst) -> None:
    """Give ``dst`` the unknown fields of ``src`` (fields of a newer schema)."""
    from google.protobuf.unknown_fields import UnknownFieldSet

    data = _encode_unknown(UnknownFieldSet(src))
    if data:
        dst.MergeFromString(data)


def _encode_unknown(fields) -> bytes:
    parts = []
    for field in fields:
        number, wire, data = field.field_number, field.wire_type, field.data
        parts.append(encode_varint(number << 3 | wire))
        if wire == 0:
            parts.append(encode_varint(data))
        elif wire == 1:
            parts.append(data.to_bytes(8, "little"))
        elif wire == 2:
            parts.append(encode_varint(len(data)) + data)
        elif wire == 5:
            parts.append(data.to_bytes(4, "little"))
        else:  # a group: its fields, then its end tag
            parts.append(_encode_unknown(data) + encode_varint(number << 3 | 4))
    return b"".join(parts)


def _copy_field(src, dst, fd) -> None:
    """Copy one field of ``src`` into ``dst`` (C-level copies, no raw_data read elsewhere).

    A string that is not valid UTF-8 (protobuf hands it over as bytes) is
    copied through the wire format, as protobuf itself reads it.
    """
    name = fd.name
    if _is_repeated(fd):
        values = getattr(src, name)
        if not len(values):
            return
        if fd.type == fd.TYPE_STRING and any(isinstance(v, bytes) for v in values):
            tag = encode_varint(fd.number << 3 | 2)
            dst.MergeFromString(b"".join(tag + _string_payload(v) for v in values))
        else:
            getattr(dst, name).extend(values)
    elif src.HasField(name):
        value = getattr(src, name)
        if fd.message_type is not None:
            getattr(dst, name).CopyFrom(value)
        elif isinstance(value, bytes) and fd.type == fd.TYPE_STRING:
            dst.MergeFromString(encode_varint(fd.number << 3 | 2) + _string_payload(value))
        else:
            setattr(dst, name, value)


def _string_payload(value: str | bytes) -> bytes:
    data = value if isinstance(value, bytes) else value.encode("utf-8")
    return encode_varint(len(data)) + data


def _is_repeated(fd) -> bool:
    repeated = getattr(fd, "is_repeated", None)
    if repeated is not None:
        return repeated
    return fd.label == fd.LABEL_REPEATED


def _trie(subs: dict) -> dict:
    root: dict = {}
    for path, tensor in subs.items():
        node = root
        for step in path[:-1]:
            node = node.setdefault(step, {})
        node[path[-1]] = (_LEAF, tensor)
    return root


def piece_size(pieces: list) -> int:
    """Bytes the pieces make once written."""
    return sum(len(p) if isinstance(p, bytes) else p.length for p in pieces)


def _leaf(sub) -> list:
    if isinstance(sub, Spliced):
        head = sub.tensor.SerializeToString() + _RAW_DATA_TAG + encode_varint(sub.ref.length)
        return [head, Span(sub.ref)]
    return [sub.SerializeToString()]


def _encode(msg, trie: dict) -> list:
    fields = {name for name, _ in trie}
    rest = type(msg)()
    parts: list = []
    for fd in msg.DESCRIPTOR.fields:
        name = fd.name
        if name not in fields:
            _copy_field(msg, rest, fd)
            continue
        tag = encode_varint(fd.number << 3 | 2)
        items = enumerate(getattr(msg, name)) if _is_repeated(fd) else [(None, getattr(msg, name))]
        for index, child in items:
            sub = trie.get((name, index))
            if sub is None:
                data = [child.SerializeToString()]
            elif isinstance(sub, tuple):
                data = _leaf(sub[1])
            else:
                data = _encode(child, sub)
            parts.append(tag + encode_varint(piece_size(data)))
            parts.extend(data)
    _copy_unknown(msg, rest)
    return _merge([rest.SerializeToString(), *parts])


def _merge(pieces: list) -> list:
    """Adjacent bytes pieces joined: fewer, longer writes (each run joined once:
    ``+=`` on bytes copies, which made 40,000 tensors take 10 s)."""
    out: list = []
    run: list[bytes] = []
    for piece in pieces:
        if isinstance(piece, bytes):
            run.append(piece)
            continue
        if run:
            out.append(b"".join(run))
            run = []
        out.append(piece)
    if run:
        out.append(b"".join(run))
    return out


def serialize_pieces(model: onnx.ModelProto, subs: dict) -> list:
    """Serialize ``model`` with the tensor at each path replaced, as pieces.

    Args:
        model: the model, left unchanged.
        subs: replacement tensors keyed by their walker path: a TensorProto,
            or a :class:`Spliced` tensor whose raw_data stays in its file.

    Returns:
        A list of ``bytes`` and :class:`Span` (bytes to copy from a file)
        whose concatenation is the serialized model.
    """
    if not subs:
        return [model.SerializeToString()]
    return _encode(model, _trie(subs))
