"""What the ``info`` and ``verify`` commands report about a model, weights unread.

The model is parsed with ``skip_raw_data``: its inline weights are never read
(they show as references into the ``.onnx`` itself, and are reported inline).
Only :func:`transposed_pairs` (``info --twins``) reads tensor bytes.
"""

from __future__ import annotations

import os

import onnx

from onnx_light._loaders import in_subgraph
from onnx_light.onnx._content.twins import find_transposed
from onnx_light.onnx._plan.source_plan import plan_model
from onnx_light.onnx._read.external import (
    InlineSpans,
    Resolver,
    check_location,
    is_decimal,
    read_entries,
)
from onnx_light.onnx._read.scan import scan_model
from onnx_light.onnx._read.sources import SourceFiles
from onnx_light.onnx._read.tensors import (
    TensorSite,
    is_external,
    iter_tensors,
    path_to_str,
    tensor_nbytes,
)

__all__ = ["listed", "model_info", "shared_across", "transposed_pairs", "verify_models"]


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


def _owner_name(model: onnx.ModelProto, path: tuple) -> str | None:
    """``node name.attribute name`` for a tensor held by a named node's attribute."""
    if len(path) < 2 or path[-1][0] not in ("t", "tensors") or path[-2][0] != "attribute":
        return None
    proto: object = model
    for field, index in path[:-2]:
        proto = getattr(proto, field)
        if index is not None:
            proto = proto[index]
    if not isinstance(proto, onnx.NodeProto) or not proto.name:
        return None
    attribute = proto.attribute[path[-2][1]]
    return f"{_text(proto.name)}.{_text(attribute.name)}"


def model_info(path: str) -> dict:
    """Describe every tensor of a model and where its bytes live, weights unread.

    Args:
        path: the ``.onnx`` file.

    Returns:
        A JSON-ready dict: ``model``, ``tensors`` (name (an unnamed attribute
        tensor of a named node is ``node.attribute``), path, dtype, shape,
        location (None when inline), offset, length, offset_pow2), ``files`` (location, tensors, bytes referenced, file_size: the size
        on disk, None when missing or unsafe; missing: True when the file
        does not exist), ``missing_files``, ``tensor_count``,
        ``external_tensors``, ``inline_tensors``, ``inline_bytes``,
        ``alignment`` (the largest power of two dividing every external
        offset, None without any nonzero offset), ``aligned`` ({"4096": bool,
        "65536": bool}) and ``shared_ranges`` (:func:`shared_ranges`).
    """
    base = os.path.dirname(os.path.abspath(path))
    with SourceFiles() as opened:
        model, inline = scan_model(os.path.abspath(path), opened)
    tensors, files = [], {}
    names = dict(onnx.TensorProto.DataType.items())  # name -> code
    dtypes = {code: name for name, code in names.items()}  # looked up once per model
    for site in iter_tensors(model):
        t = site.tensor
        dtype = dtypes.get(t.data_type) or str(t.data_type)
        if is_external(t):
            entries = {_text(e.key): _text(e.value) for e in t.external_data[:]}
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
                "name": _text(t.name) or _owner_name(model, site.path) or site.label,
                "path": path_to_str(site.path),
                "dtype": dtype,
                "shape": t.dims[:],
                "location": location,
                "offset": offset,
                "length": length,
                "offset_pow2": _pow2(offset),
            }
        )
        if location not in files:  # None: inline, in the .onnx itself
            size = None if location is None else _file_size(base, location)
            files[location] = {"location": location, "tensors": 0, "bytes": 0, "file_size": size}
            if location is not None:
                files[location]["missing"] = _missing(base, location)
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
    inline_rows = [t for t in tensors if t["location"] is None]
    return {
        "model": path,
        "tensors": tensors,
        "files": list(files.values()),
        "missing_files": [f["location"] for f in files.values() if f.get("missing")],
        "tensor_count": len(tensors),
        "external_tensors": len(external),
        "inline_tensors": len(inline_rows),
        "inline_bytes": sum(t["length"] for t in inline_rows if isinstance(t["length"], int)),
        "alignment": alignment,
        "aligned": aligned,
        "shared_ranges": shared_ranges(tensors),
    }


def listed(info: dict, external_only: bool = False, min_size: int = 0) -> dict:
    """``info`` with only the tensors a reader asked for (``info --external --min-size``);
    the counts, files and shared ranges still cover every tensor."""
    tensors = [
        t
        for t in info["tensors"]
        if (t["location"] is not None or not external_only)
        and (not min_size or isinstance(t["length"], int) and t["length"] >= min_size)
    ]
    return {
        **info,
        "tensors": tensors,
        "listed": {"external_only": external_only, "min_size": min_size},
    }


def _missing(base: str, location: str) -> bool:
    """True when a location names no file (a location that is unsafe is not 'missing')."""
    try:
        check_location(location, "")
        return not os.path.lexists(os.path.join(base, location))
    except (OSError, ValueError):
        return False


def shared_ranges(tensors: list[dict]) -> list[dict]:
    """The byte ranges read by several tensors of one model: same location, offset and length.

    Sharing is valid (a deduplicated model, tied weights): each such range is
    stored once. Inline tensors, empty ranges and offsets or lengths that are
    not numbers are left out.

    Args:
        tensors: the ``tensors`` of :func:`model_info`.

    Returns:
        ``[{"location", "offset", "length", "tensors": [names]}]``, in file
        and offset order, one entry per range read by two tensors or more.
    """
    readers: dict[tuple, list] = {}
    for t in tensors:
        if _ranged(t):
            where = (t["location"], t["offset"], t["length"])
            _add(readers, where, where, t["name"])
    return _several(readers)


def shared_across(infos: list[dict]) -> list[dict]:
    """The byte ranges read by several tensors of several models (:func:`model_info` each).

    A range is a file (its path: the location resolved from each model's
    folder), an offset and a length; tensors are named by model and name.

    Returns:
        ``[{"location", "offset", "length", "tensors": [{"model", "name"}]}]``.
    """
    readers: dict[tuple, list] = {}
    for info in infos:
        folder = os.path.dirname(os.path.abspath(info["model"]))
        for t in info["tensors"]:
            if _ranged(t):
                file = os.path.normpath(os.path.join(folder, t["location"]))
                who = {"model": info["model"], "name": t["name"]}
                _add(readers, (file, t["offset"], t["length"]), _where(t), who)
    return _several(readers)


def _ranged(t: dict) -> bool:
    """An external tensor with a nonempty range given by numbers."""
    offset, length = t["offset"], t["length"]
    return t["location"] is not None and _is_int(offset) and _is_int(length) and length > 0


def _add(readers: dict[tuple, list], key: tuple, where: tuple, who: object) -> None:
    """Record that ``who`` reads ``where`` = (location, offset, length), found by ``key``.

    A pair per reader, not a dict: most ranges have one reader, and their
    entries are built only for the ranges several read (:func:`_several`).
    """
    found = readers.get(key)
    if found is None:
        readers[key] = [where, who]
    else:
        found.append(who)


def _several(readers: dict[tuple, list], named=None) -> list[dict]:
    """The ranges read more than once, each ``{"location", "offset", "length",
    "tensors"}`` (a reader turned into its entry by ``named`` when given)."""
    found = []
    for (location, offset, length), *who in readers.values():
        if len(who) > 1:
            tensors = who if named is None else [named(w) for w in who]
            found.append(
                {"location": location, "offset": offset, "length": length, "tensors": tensors}
            )
    return sorted(found, key=lambda r: (r["location"], r["offset"], r["length"]))


def _where(t: dict) -> tuple:
    return (t["location"], t["offset"], t["length"])


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def transposed_pairs(paths: list[str]) -> list[dict]:
    """2-D tensors stored as the transpose of another (``[V, D]`` and ``[D, V]``): reads bytes.

    The search :func:`~onnx_light.onnx.deduplicate_external_data` runs
    (:func:`~onnx_light.onnx._dedup.find_transposed`), within and across the
    models: only non-square matrices of one data type and size are compared,
    a few sampled elements first, then tile by tile; tensors reading one
    range are compared once.

    Args:
        paths: the ``.onnx`` files.

    Returns:
        ``[{"tensors": [{"model", "name"}, {"model", "name"}], "length": bytes of each}]``.

    Raises:
        FileNotFoundError, ValueError: a model or a reference is invalid (as
            ``verify`` would report it).
    """
    items, names = [], []
    with SourceFiles() as files:
        for path in paths:
            _, plan, _ = plan_model(os.path.abspath(path), files, 0)
            items.extend(plan.items)
            names.extend((path, _text(it.site.tensor.name) or it.site.label) for it in plan.items)
        first: dict[object, int] = {}  # a range read by several tensors is compared once
        classes = [
            i if it.ref is None else first.setdefault(it.ref.span, i) for i, it in enumerate(items)
        ]
        found = find_transposed(items, classes, names, files)
    return [
        {"tensors": [{"model": m, "name": n} for m, n in (a, b)], "length": size}
        for a, b, size in found
    ]


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
    count, problems, _ = _verify(path, {})
    return count, problems


def verify_models(
    paths: list[str],
) -> tuple[list[tuple[int, list[str]]], list[dict], list[list[tuple[str, bool]]]]:
    """:func:`verify_model` for each model, and the ranges several valid references read.

    Args:
        paths: the ``.onnx`` files.

    Returns:
        ``([(number of external tensors, problems) per model], shared ranges,
        [its references' (location, in a subgraph) pairs per model])``: a
        shared range is one range of one file (its device and inode, whatever
        the location's spelling) read by several tensors of these models,
        ``{"location", "offset", "length", "tensors": [{"model", "name"}]}``;
        sharing is valid, never a problem. The pairs are what
        :func:`~onnx_light._loaders.loader_verdicts` judges, read in the same pass.

    Raises:
        FileNotFoundError, ValueError: a model itself cannot be read.
    """
    readers: dict[tuple, list] = {}
    checked = [_verify(path, readers) for path in paths]
    results = [(count, problems) for count, problems, _ in checked]
    shared = _several(readers, lambda who: {"model": who[0], "name": who[1]})
    return results, shared, [pairs for _, _, pairs in checked]


def _verify(path: str, readers: dict[tuple, list]) -> tuple[int, list[str], list]:
    """Check one model; record each valid nonempty external range in ``readers``.

    Returns:
        ``(external tensors, problems, its references' (location, in a
        subgraph) pairs, each once)``.
    """
    shown_path, path = path, os.path.abspath(path)
    count, problems = 0, []  # (tensor label, message)
    pairs: dict[tuple[str, bool], None] = {}
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
                _judged(site, inline, pairs)
                continue
            if ref.source is inline.source:  # inline bytes are not external
                continue
            count += 1
            pairs[ref.location, in_subgraph(site.path)] = None
            if ref.length > 0:
                where = (ref.location, ref.offset, ref.length)
                _add(readers, ref.span, where, (shown_path, _text(site.tensor.name) or site.label))
    return count, _grouped(problems), list(pairs)


def _judged(site: TensorSite, inline: InlineSpans, pairs: dict) -> None:
    """Record the location of a reference that failed its check, when it has a
    readable one: the loaders' verdicts judge it too."""
    try:
        entries = read_entries(site)
    except ValueError:
        return  # the entry itself is the problem, reported
    if not inline.holds(entries):
        pairs[entries["location"], in_subgraph(site.path)] = None


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
