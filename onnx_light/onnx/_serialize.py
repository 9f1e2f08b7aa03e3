"""Serialize a model with some tensors replaced, without copying the others.

``save`` must not modify the caller's model, yet the ``.onnx`` it writes holds
references instead of the big tensors' raw data. Copying the model would copy
every weight; instead :func:`serialize_with` encodes the messages on the way to
a replaced tensor field by field and lets protobuf serialize everything else
in C. A protobuf message is the concatenation of its fields, so the result
parses to the model with the substitutions applied. Unknown fields (written
by a newer ONNX) of the messages on the way are kept, as ``onnx.save`` keeps
them.
"""

from __future__ import annotations

import onnx

from ._tensors import Path
from ._wire import encode_varint

_LEAF = object()


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
    """Copy one field of ``src`` into ``dst`` (C-level copies, no raw_data read elsewhere)."""
    name = fd.name
    if _is_repeated(fd):
        values = getattr(src, name)
        if len(values):
            getattr(dst, name).extend(values)
    elif src.HasField(name):
        if fd.message_type is not None:
            getattr(dst, name).CopyFrom(getattr(src, name))
        else:
            setattr(dst, name, getattr(src, name))


def _is_repeated(fd) -> bool:
    repeated = getattr(fd, "is_repeated", None)
    if repeated is not None:
        return repeated
    return fd.label == fd.LABEL_REPEATED


def _trie(subs: dict[Path, onnx.TensorProto]) -> dict:
    root: dict = {}
    for path, tensor in subs.items():
        node = root
        for step in path[:-1]:
            node = node.setdefault(step, {})
        node[path[-1]] = (_LEAF, tensor)
    return root


def _encode(msg, trie: dict) -> bytes:
    fields = {name for name, _ in trie}
    rest = type(msg)()
    parts = []
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
                data = child.SerializeToString()
            elif isinstance(sub, tuple):
                data = sub[1].SerializeToString()
            else:
                data = _encode(child, sub)
            parts.append(tag + encode_varint(len(data)) + data)
    _copy_unknown(msg, rest)
    return rest.SerializeToString() + b"".join(parts)


def serialize_with(model: onnx.ModelProto, subs: dict[Path, onnx.TensorProto]) -> bytes:
    """Serialize ``model`` with the tensor at each path replaced.

    Args:
        model: the model, left unchanged.
        subs: replacement tensors keyed by their walker path.

    Returns:
        The serialized model.
    """
    if not subs:
        return model.SerializeToString()
    return _encode(model, _trie(subs))
