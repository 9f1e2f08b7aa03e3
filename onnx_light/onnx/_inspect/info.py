"""``inspect_model``: every tensor of a model and where its bytes live, weights unread.

The model is parsed with ``skip_raw_data``: its inline weights are never read
(they show as references into the ``.onnx`` itself, and are reported inline).
Only the search for transposed twins (``inspect_models(..., transposed=True)``,
``info --twins``) reads tensor bytes. What ``onnx-light info`` prints is these
objects, formatted.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

import onnx

from .._content.twins import find_transposed
from .._dtypes import dtype_name
from .._plan.source_plan import plan_model
from .._read.external import check_location, is_decimal
from .._read.scan import scan_model
from .._read.sources import SourceFiles
from .._read.tensors import is_external, iter_tensors, path_to_str, tensor_nbytes
from .ranges import RangeReaders, SharedRange

__all__ = [
    "FileInfo",
    "InspectReport",
    "ModelInfo",
    "TensorInfo",
    "inspect_model",
    "inspect_models",
    "text",
]


@dataclass(frozen=True)
class TensorInfo:
    """One tensor of a model and where its bytes are.

    Attributes:
        name: its name; an unnamed tensor held by a named node's attribute is
            ``node.attribute``, another unnamed one its path.
        path: where it sits in the model, e.g. ``graph.initializer[3]`` or
            ``graph.node[2].attribute[0].t``.
        dtype: its data type's name in onnx (``"FLOAT16"``), or its number
            when onnx has no name for it.
        shape: its dims.
        location: the file its ``external_data`` names, as written there;
            None for an inline tensor (its bytes in the ``.onnx`` itself).
        offset: where its bytes start in that file; the entry's text when it
            is not a number (:func:`verify_model` says what is wrong); None
            when inline.
        length: its bytes (the ``length`` entry, else dtype x dims); the
            entry's text when it is not a number; None when unknown (a string
            tensor without a length).

    .. versionadded:: 0.1
    """

    name: str
    path: str
    dtype: str
    shape: tuple[int, ...]
    location: str | None
    offset: int | str | None
    length: int | str | None

    @property
    def offset_pow2(self) -> int | None:
        """The largest power of two dividing ``offset``; None for 0 (any
        alignment), an inline tensor or an offset that is not a number."""
        return _pow2(self.offset)


@dataclass(frozen=True)
class FileInfo:
    """Where a model's tensor bytes are: one external data file, or the ``.onnx`` itself.

    Attributes:
        location: the file, as the model's references name it (relative to
            the model's folder); None for the inline tensors.
        tensor_count: the tensors whose bytes are there.
        tensor_bytes: the bytes they take (a range several tensors read counts
            once per tensor).
        file_size: the file's size on disk; None for the inline tensors, and
            for a file that is missing or that a reference may not read (an
            absolute or escaping location).
        missing: True when the location names no file (an unsafe location is
            not missing: :func:`verify_model` refuses it).

    .. versionadded:: 0.1
    """

    location: str | None
    tensor_count: int
    tensor_bytes: int
    file_size: int | None
    missing: bool = False


@dataclass(frozen=True)
class ModelInfo:
    """What :func:`inspect_model` found in a model: its tensors and their files.

    Attributes:
        model: the ``.onnx`` file, as its path was given.
        tensors: every tensor, in the order onnx walks them (initializers,
            attributes, subgraphs, functions).
        files: the external data files, in the order the tensors name them,
            and the inline tensors (``location`` None) where the first comes.
        alignment: the largest power of two dividing every nonzero external
            offset; None without one, or when an offset is not a number.
        shared_ranges: the byte ranges read by several of its tensors (same
            location, offset and length; empty ranges left out).

    .. versionadded:: 0.1
    """

    model: str
    tensors: tuple[TensorInfo, ...]
    files: tuple[FileInfo, ...]
    alignment: int | None
    shared_ranges: tuple[SharedRange, ...]

    @property
    def external_tensors(self) -> int:
        """How many tensors have their bytes in an external data file."""
        return sum(t.location is not None for t in self.tensors)

    @property
    def inline_tensors(self) -> int:
        """How many tensors have their bytes in the ``.onnx`` itself."""
        return sum(t.location is None for t in self.tensors)

    @property
    def inline_bytes(self) -> int:
        """The bytes of the inline tensors."""
        return sum(t.length for t in self.tensors if t.location is None and _is_int(t.length))

    @property
    def missing_files(self) -> tuple[str, ...]:
        """The locations that name no file (``FileInfo.missing``)."""
        return tuple(f.location for f in self.files if f.missing and f.location is not None)

    def aligned_to(self, alignment: int) -> bool:
        """True when every external offset is a multiple of ``alignment``.

        Args:
            alignment: a byte count, e.g. 4096 (a page) or 65536.

        Returns:
            True also for a model without external tensors; False when an
            offset is not a number.
        """
        return all(
            isinstance(t.offset, int) and t.offset % alignment == 0
            for t in self.tensors
            if t.location is not None
        )


@dataclass(frozen=True)
class InspectReport:
    """What :func:`inspect_models` found in several models, and what they share.

    Attributes:
        models: one :class:`ModelInfo` per model, in the order given.
        shared_ranges: the byte ranges read by several tensors of these
            models, within one model or across them (a file is the location
            read from its model's folder, so two models naming one file by
            different locations share it).
        transposed: the 2-D tensors stored as the transpose of another
            (``[V, D]`` and ``[D, V]``), within and across the models, as
            ``((model, name), (model, name), bytes of each)``; None when not
            looked for (``transposed=False``).

    .. versionadded:: 0.1
    """

    models: tuple[ModelInfo, ...]
    shared_ranges: tuple[SharedRange, ...]
    transposed: tuple[tuple[tuple[str, str], tuple[str, str], int], ...] | None = None


def text(value: str | bytes) -> str:
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


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _pow2(offset: object) -> int | None:
    """The largest power of two dividing ``offset`` (None for 0, unknown or inline)."""
    if not _is_int(offset) or offset <= 0:
        return None
    return offset & -offset


def _safe_path(base: str, location: str) -> str | None:
    """The file behind ``location``, None when a reference may not name it."""
    try:
        check_location(location, "")
    except ValueError:
        return None
    return os.path.join(base, location)


def _file_size(path: str | None) -> int | None:
    try:
        return None if path is None else os.stat(path).st_size
    except (OSError, ValueError):
        return None


def _missing(path: str | None) -> bool:
    try:
        return path is not None and not os.path.lexists(path)
    except (OSError, ValueError):
        return False


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
    return f"{text(proto.name)}.{text(attribute.name)}"


def inspect_model(path: str | os.PathLike) -> ModelInfo:
    """Describe every tensor of a model and where its bytes live, without reading them.

    What ``onnx-light info`` prints: the model is parsed without its weights
    (``skip_raw_data``), each external reference is read as written, nothing
    is checked (:func:`verify_model` checks). A model of any size takes the
    memory of its metadata.

    Args:
        path: the ``.onnx`` file.

    Returns:
        A :class:`ModelInfo`: its tensors, their files, the common alignment
        of the external offsets and the ranges several tensors read.

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: it is not an ONNX model.

    .. versionadded:: 0.1
    """
    shown = os.fspath(path)
    base = os.path.dirname(os.path.abspath(shown))
    with SourceFiles() as opened:
        model, inline = scan_model(os.path.abspath(shown), opened)
    tensors: list[TensorInfo] = []
    files: dict[str | None, list] = {}  # location -> [tensors, bytes, size, missing]
    readers = RangeReaders()
    for site in iter_tensors(model):
        t = site.tensor
        if is_external(t):
            entries = {text(e.key): text(e.value) for e in t.external_data[:]}
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
        name = text(t.name) or _owner_name(model, site.path) or site.label
        tensors.append(
            TensorInfo(
                name, path_to_str(site.path), dtype_name(t.data_type), tuple(t.dims),
                location, offset, length,
            )
        )  # fmt: skip
        if location not in files:  # None: inline, in the .onnx itself
            file = None if location is None else _safe_path(base, location)
            files[location] = [0, 0, _file_size(file), _missing(file)]
        entry = files[location]
        entry[0] += 1
        entry[1] += length if isinstance(length, int) else 0
        if _ranged(location, offset, length):
            readers.add((location, offset, length), (location, offset, length), (shown, name))
    offsets = [t.offset for t in tensors if t.location is not None]
    alignment = None
    if all(isinstance(o, int) and o >= 0 for o in offsets) and any(offsets):
        alignment = min(_pow2(o) for o in offsets if o)
    return ModelInfo(
        shown,
        tuple(tensors),
        tuple(FileInfo(location, *entry) for location, entry in files.items()),
        alignment,
        readers.shared(),
    )


def _ranged(location: str | None, offset: object, length: object) -> bool:
    """An external tensor with a nonempty range given by numbers."""
    return location is not None and _is_int(offset) and _is_int(length) and length > 0


def inspect_models(paths: Sequence[str | os.PathLike], transposed: bool = False) -> InspectReport:
    """:func:`inspect_model` for each model, and the ranges their tensors share.

    What ``onnx-light info`` prints for several models (``--twins``: with
    ``transposed``).

    Args:
        paths: the ``.onnx`` files.
        transposed: also look for 2-D tensors stored as the transpose of
            another, as :func:`deduplicate_external_data` does: this reads
            their bytes (a few sampled elements first, then tile by tile) and
            checks every reference first.

    Returns:
        An :class:`InspectReport`.

    Raises:
        FileNotFoundError: a model does not exist.
        ValueError: a model is not an ONNX model; with ``transposed``, also a
            reference :func:`verify_model` refuses.

    .. versionadded:: 0.1
    """
    models = tuple(inspect_model(path) for path in paths)
    readers = RangeReaders()
    for info in models:
        folder = os.path.dirname(os.path.abspath(info.model))
        for t in info.tensors:
            if _ranged(t.location, t.offset, t.length):
                file = os.path.normpath(os.path.join(folder, t.location))
                where = (t.location, t.offset, t.length)
                readers.add((file, t.offset, t.length), where, (info.model, t.name))
    twins = _transposed([info.model for info in models]) if transposed else None
    return InspectReport(models, readers.shared(), twins)


def _transposed(paths: list[str]) -> tuple[tuple[tuple[str, str], tuple[str, str], int], ...]:
    """The transposed twins of these models (deduplicate_external_data's search); tensors
    reading one range are compared once."""
    items, names = [], []
    with SourceFiles() as files:
        for path in paths:
            _, plan, _ = plan_model(os.path.abspath(path), files, 0)
            items.extend(plan.items)
            names.extend((path, text(it.site.tensor.name) or it.site.label) for it in plan.items)
        first: dict[object, int] = {}  # a range read by several tensors is compared once
        classes = [
            i if it.ref is None else first.setdefault(it.ref.span, i) for i, it in enumerate(items)
        ]
        return tuple(find_transposed(items, classes, names, files))
