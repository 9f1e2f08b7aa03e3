"""What the ``info`` and ``verify`` commands report about a model, weights unread.

The model is parsed with ``skip_raw_data``: its inline weights are never read
(they show as references into the ``.onnx`` itself, and are reported inline).
"""

from __future__ import annotations

import os

import onnx

from onnx_light.onnx._external import Resolver, check_location, is_decimal
from onnx_light.onnx._scan import scan_model
from onnx_light.onnx._sources import SourceFiles
from onnx_light.onnx._tensors import is_external, iter_tensors, path_to_str, tensor_nbytes


def _text(value: str | bytes) -> str:
    """A string field as text: protobuf gives bytes when it is not valid UTF-8."""
    return value.decode("utf-8", "backslashreplace") if isinstance(value, bytes) else value


def _int_or_raw(value: str | None) -> int | str | None:
    """An offset or length as an int when it is one (ASCII digits, any sign), else as is."""
    if value is None:
        return None
    digits = value[1:] if value.startswith("-") else value
    if is_decimal(digits) and len(digits) <= 19:
        return int(value)
    return value


def _pow2(offset: object) -> int | None:
    """The largest power of two dividing ``offset`` (None for 0, unknown or inline)."""
    if isinstance(offset, bool) or not isinstance(offset, int) or offset <= 0:
        return None
    return offset & -offset


def _file_size(base: str, location: str) -> int | None:
    """Size of the file behind a safe ``location``, None when missing or unsafe."""
    try:
        check_location(location, "")
        return os.stat(os.path.join(base, location)).st_size
    except (OSError, ValueError):
        return None


def model_info(path: str) -> dict:
    """Describe every tensor of a model and where its bytes live, weights unread.

    Args:
        path: the ``.onnx`` file.

    Returns:
        A JSON-ready dict: ``model``, ``tensors`` (name, path, dtype, shape,
        location (None when inline), offset, length, offset_pow2), ``files``
        (location, tensors, bytes referenced, file_size: the size on disk, None
        when missing or unsafe), ``external_tensors``, ``alignment`` (the
        largest power of two dividing every external offset, None without
        any nonzero offset) and ``aligned`` ({"4096": bool, "65536": bool}).
    """
    base = os.path.dirname(os.path.abspath(path))
    with SourceFiles() as opened:
        model, inline = scan_model(os.path.abspath(path), opened)
    tensors, files = [], {}
    for site in iter_tensors(model):
        t = site.tensor
        try:
            dtype = onnx.TensorProto.DataType.Name(t.data_type)
        except ValueError:
            dtype = str(t.data_type)
        if is_external(t):
            entries = {_text(e.key): _text(e.value) for e in t.external_data}
            location = entries.get("location", "")
            offset = _int_or_raw(entries.get("offset", "0"))
            length = _int_or_raw(entries.get("length"))
            if length is None:
                length = tensor_nbytes(t)
            if inline.holds(entries):  # inline bytes, left in place by skip_raw_data
                location, offset = None, None
        else:
            location, offset = None, None
            length = len(t.raw_data) if t.HasField("raw_data") else tensor_nbytes(t)
        tensors.append(
            {
                "name": _text(t.name) or site.label,
                "path": path_to_str(site.path),
                "dtype": dtype,
                "shape": list(t.dims),
                "location": location,
                "offset": offset,
                "length": length,
                "offset_pow2": _pow2(offset),
            }
        )
        if location not in files:  # None: inline, in the .onnx itself
            size = None if location is None else _file_size(base, location)
            files[location] = {"location": location, "tensors": 0, "bytes": 0, "file_size": size}
        entry = files[location]
        entry["tensors"] += 1
        entry["bytes"] += length if isinstance(length, int) else 0
    external = [t for t in tensors if t["location"] is not None]
    offsets = [t["offset"] for t in external]
    alignment = None
    if all(isinstance(o, int) and o >= 0 for o in offsets) and any(offsets):
        alignment = min(_pow2(o) for o in offsets if o)
    aligned = {
        str(a): all(isinstance(o, int) and o % a == 0 for o in offsets) for a in (4096, 65536)
    }
    return {
        "model": path,
        "tensors": tensors,
        "files": list(files.values()),
        "external_tensors": len(external),
        "alignment": alignment,
        "aligned": aligned,
    }


def verify_model(path: str) -> tuple[int, list[str]]:
    """Check every external reference of a model: resolves, safe, in range, dtype x dims.

    Args:
        path: the ``.onnx`` file.

    Returns:
        ``(number of external tensors, problems)``: one message per cause
        (tensors failing for the same reason, e.g. a missing file, share one).

    Raises:
        FileNotFoundError, ValueError: the model itself cannot be read.
    """
    path = os.path.abspath(path)
    count, problems = 0, []  # (tensor label, message)
    with SourceFiles() as files:
        model, inline = scan_model(path, files)
        resolver = Resolver(os.path.dirname(path), files, inline, inline.source)
        for site in iter_tensors(model):
            if not is_external(site.tensor):
                continue
            try:
                ref = resolver.resolve(site)
            except (OSError, ValueError) as e:
                problems.append((site.label, str(e)))
                count += 1
                continue
            count += ref.source is not inline.source  # inline bytes are not external
    return count, _grouped(problems)


def _grouped(problems: list[tuple[str, str]]) -> list[str]:
    """One line per cause: tensors failing for the same reason share a line."""
    causes: dict[str, list[str]] = {}
    for label, message in problems:
        causes.setdefault(message.replace(f"tensor {label}", "tensor {}", 1), []).append(label)
    lines = []
    for cause, labels in causes.items():
        if len(labels) == 1:
            lines.append(cause.replace("tensor {}", f"tensor {labels[0]}", 1))
            continue
        shown = ", ".join(labels[:3]) + (f" and {len(labels) - 3} more" if len(labels) > 3 else "")
        lines.append(cause.replace("tensor {}", f"{len(labels)} tensors ({shown})", 1))
    return lines
