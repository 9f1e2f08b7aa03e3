"""TensorRef: read, resolve and check a tensor's ``external_data`` entries.

A reference is accepted only when it is safe and in range (the rules of
onnx >= 1.22, and a few more):

- ``location`` is present, valid UTF-8, relative (no ``/x``, ``\\x`` or
  ``C:x``), without ``..`` components, not ending in ``/``, and once symlinks
  are resolved the file lies inside the model's folder, or inside the folder
  of the model file's real path (onnxruntime's rule: a Hugging Face cache
  snapshot links the model and its data into one ``blobs/`` folder);
- the file exists, is a regular file (no FIFO, device or folder) and has a
  single hard link (a hard link can make any file of the disk appear inside
  the folder; onnx refuses them too), checked on the open descriptor
  (:mod:`_read.sources`);
- ``offset`` and ``length`` are plain decimal integers (ASCII digits only, as
  onnxruntime parses them, at most 100 digits), ``offset + length`` fits in
  the file, and ``length`` equals dtype x dims when both are known;
- no dim is negative (onnxruntime refuses such a tensor, "Out of bounds
  dimensions", whatever its length);
- no key is repeated; an EXTERNAL tensor carries no data of its own
  (``raw_data``, ``float_data``, ...); string tensors are never external.

The inline bytes of the ``.onnx`` the caller names (references the scanner
made, see :class:`InlineSpans`) are not external references: they are read
from the model file itself, whatever its name or links.

Every error names the tensor and the file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from sys import intern

import onnx

from .._dtypes import dtype_name
from .._errors import ExternalDataError, Lazy, shown
from .sources import SourceFile, SourceFiles
from .tensors import Cast, TensorSite, tensor_nbytes

__all__ = [
    "InlineSpans",
    "PLACED",
    "Resolver",
    "TensorRef",
    "check_dims",
    "check_length",
    "check_location",
    "check_movable",
    "is_decimal",
    "place",
    "read_entries",
    "set_inline",
]

MAX_DIGITS = 100  # longer integers are not parsed (int() refuses over 4300 digits)
_TYPED_FIELDS = (
    "float_data",
    "int32_data",
    "string_data",
    "int64_data",
    "double_data",
    "uint64_data",
)


@dataclass(slots=True)
class TensorRef:
    """A validated external reference.

    Attributes:
        site: the tensor and its path in the model.
        source: the opened, checked file holding the bytes.
        offset: first byte of the tensor in the file.
        length: number of bytes.
        location: its ``location`` entry.
        extra: its other entries (``checksum``...), carried along when it is
            placed again; None when it has exactly ``location``, ``offset``
            and ``length``, in this order (the common case, kept without a
            dict per tensor).
        cast: when the tensor gives these bytes another dtype than they have
            in the source, how they are converted.
    """

    site: TensorSite
    source: SourceFile
    offset: int
    length: int
    location: str
    extra: dict[str, str] | None
    cast: Cast | None = None

    @property
    def file(self) -> str:
        """The path of the file holding the bytes, for messages."""
        return self.source.path

    @property
    def span(self) -> tuple[tuple[int, int], int, int]:
        """The source byte range, the key two tensors share a copy by."""
        return (self.source.identity, self.offset, self.length)


@dataclass(frozen=True)
class InlineSpans:
    """The inline raw_data the scanner turned into references into the model file.

    Attributes:
        location: the ``location`` the scanner recorded for them.
        spans: their ``(offset, length)`` in the model file.
        source: the model file, opened by the scan.
    """

    location: str
    spans: frozenset
    source: SourceFile

    def holds(self, entries: dict[str, str]) -> bool:
        """True when ``entries`` point at one of these spans."""
        if entries.get("location") != self.location:
            return False
        offset, length = entries.get("offset", "0"), entries.get("length", "")
        if not (is_decimal(offset) and is_decimal(length)):
            return False
        if len(offset) > MAX_DIGITS or len(length) > MAX_DIGITS:
            return False
        return (int(offset), int(length)) in self.spans


def check_location(location: str, what: object) -> None:
    """Reject an empty, absolute or ``..``-climbing location.

    Args:
        location: the location as recorded in a model.
        what: who carries it, for the message (e.g. "tensor 'W'", or a
            :class:`~._errors.Lazy` label formatted only when needed).

    Raises:
        ExternalDataError: when the location is unsafe.
    """
    if not location:
        raise ExternalDataError(f"{what}: external_data has an empty 'location'")
    if "\x00" in location:
        raise ExternalDataError(f"{what}: location {shown(location)} contains a NUL byte")
    parts = location.replace("\\", "/").split("/")
    drive = (
        len(parts[0]) >= 2
        and parts[0][1] == ":"
        and parts[0][0].isascii()
        and parts[0][0].isalpha()
    )
    if os.path.isabs(location) or location.startswith(("/", "\\")) or drive:
        raise ExternalDataError(
            f"{what}: location {shown(location)} is absolute; "
            "external data must be relative to the model's folder"
        )
    if ".." in parts:
        raise ExternalDataError(
            f"{what}: location {shown(location)} contains '..'; "
            "external data must stay inside the model's folder"
        )
    if location.endswith("/"):
        # os.path.realpath drops the slash, open() refuses it: two readers
        # would see two things
        raise ExternalDataError(
            f"{what}: location {shown(location)} ends with '/': not a file name"
        )


def _label(site: TensorSite, prefix: str = "") -> str:
    return prefix + site.label


def is_decimal(text: str) -> bool:
    """True for ASCII decimal digits only: ``str.isdigit`` takes "²" and "٤", ``int``
    takes " 1", "+1" and "1_0", which onnxruntime refuses."""
    return text.isascii() and text.isdigit()


def _int_entry(entries: dict[str, str], key: str, site: TensorSite, file: str) -> int | None:
    raw = entries.get(key)
    if raw is None:
        return None
    if len(raw) < 19 and is_decimal(raw):
        return int(raw)  # the common case: plain decimal digits, below 2**63
    label = site.label
    digits = raw[1:] if raw.startswith("-") else raw
    if is_decimal(digits) and len(digits.lstrip("0")) > MAX_DIGITS:
        raise ExternalDataError(
            f"tensor {label} in {shown(file)}: external_data {key} has {len(digits)} digits, "
            "more than any file offset (2**63 - 1)"
        )
    if not is_decimal(digits):  # two readers must never see different offsets
        raise ExternalDataError(
            f"tensor {label} in {shown(file)}: external_data {key}={raw!r} is not an integer "
            "(decimal digits only)"
        )
    value = int(raw)
    if value < 0:
        raise ExternalDataError(f"tensor {label} in {shown(file)}: external_data {key}={value} < 0")
    return value


def _carried_data(tensor: onnx.TensorProto) -> str | None:
    """The name of a data field the tensor carries itself, if any."""
    if tensor.HasField("raw_data"):
        return "raw_data"
    if (
        tensor.float_data
        or tensor.int32_data
        or tensor.string_data
        or tensor.int64_data
        or tensor.double_data
        or tensor.uint64_data
    ):  # one test for the common case, a field looked up by name only for the message
        return next(field for field in _TYPED_FIELDS if len(getattr(tensor, field)))
    return None


def read_entries(site: TensorSite) -> dict[str, str]:
    """The ``external_data`` entries of a tensor as a dict, checked for duplicates.

    The location itself is checked by :meth:`Resolver.resolve` (the model's
    own inline bytes are not an external location). Keys and the location
    are interned: 200,000 tensors then hold one copy of ``"location"`` and of
    their file's name, not 200,000.

    Raises:
        ExternalDataError: on a key or value that is not UTF-8, a repeated
            key, or a missing location.
    """
    entries: dict[str, str] = {}
    for entry in site.tensor.external_data[:]:  # a list: faster than protobuf's iterator
        key, value = entry.key, entry.value
        if type(key) is not str or type(value) is not str:  # bytes: not valid UTF-8
            bad = value if type(key) is str else key
            raise ExternalDataError(
                f"tensor {site.label}: external_data holds {bad!r}, which is not valid "
                "UTF-8 (protobuf strings must be)"
            )
        if key in entries:
            raise ExternalDataError(f"tensor {site.label}: external_data key {key!r} appears twice")
        entries[intern(key)] = value
    location = entries.get("location")
    if location is None:
        raise ExternalDataError(f"tensor {site.label}: external_data has no 'location'")
    entries["location"] = intern(location)
    return entries


def _check_external_tensor(site: TensorSite, location: str) -> None:
    """An EXTERNAL tensor holds no data of its own and is not a string tensor."""
    tensor = site.tensor
    carried = _carried_data(tensor)
    if carried is not None:
        raise ExternalDataError(
            f"tensor {site.label} in {shown(location)}: is EXTERNAL but also carries {carried}"
        )
    if tensor.data_type == onnx.TensorProto.STRING:
        raise ExternalDataError(
            f"tensor {site.label} in {shown(location)}: string tensors cannot be stored externally"
        )


def check_dims(site: TensorSite, file: str | None) -> None:
    """Refuse a tensor with a negative dim: no reader can size its bytes.

    Args:
        site: the tensor.
        file: the file its bytes are in, for the message; None for bytes in memory.

    Raises:
        ExternalDataError: naming the tensor and the file.
    """
    dims = site.tensor.dims[:]  # a list: protobuf's container is slow to walk
    if dims and min(dims) < 0:
        where = "" if file is None else f" in {shown(file)}"
        raise ExternalDataError(
            f"tensor {site.label}{where}: dims {dims} has a negative dimension: no byte "
            "length matches it and onnxruntime refuses the tensor; give it its real dims"
        )


def check_length(site: TensorSite, length: int, file: str, cast: Cast | None = None) -> None:
    """Refuse bytes that do not match the tensor's dtype x dims (when both are known).

    Args:
        site: the tensor.
        length: the bytes its reference holds.
        file: where they are, for the message.
        cast: when its bytes change dtype, the bytes are checked against the
            source dtype x dims.

    Raises:
        ExternalDataError: naming the tensor and the file; a negative dim is
            refused (:func:`check_dims`) whatever the length.
    """
    expected = tensor_nbytes(site.tensor)
    if expected is None:  # a string or unknown type, or a negative dim
        check_dims(site, file)
    meant = ""
    if cast is not None and expected is not None:
        expected = cast.conversion.source_length(expected)
        meant = (
            f" of {dtype_name(cast.conversion.src)}, the dtype the bytes have in the source, "
            f"converted to {dtype_name(cast.conversion.dst)}: the dims must hold the values "
            "the bytes do"
        )
    if expected is not None and expected != length:
        raise ExternalDataError(
            f"tensor {site.label} in {shown(file)}: length {length} does not match "
            f"dtype x dims ({expected} bytes{meant})"
        )


def check_movable(site: TensorSite) -> None:
    """Refuse to move an inline tensor to external data when the result would be invalid.

    Raises:
        ExternalDataError: the tensor holds raw_data and a typed field
            (``float_data``...) too: onnx reads raw_data, its checker (and
            ``verify``) refuse an EXTERNAL tensor that keeps the other; or
            it has a negative dim (:func:`check_dims`).
    """
    check_dims(site, None)
    for field in _TYPED_FIELDS:
        if len(getattr(site.tensor, field)):
            raise ExternalDataError(
                f"tensor {site.label}: holds both raw_data and {field}; moved to external "
                f"data it would keep {field}, which onnx's checker refuses: clear one of them"
            )


class Resolver:
    """Resolves references relative to one folder, opening each file once.

    Args:
        base_dir: the folder locations are relative to (the model's folder).
        files: the call's :class:`SourceFiles`, which opens and checks each
            file and keeps its descriptor.
        inline: the spans of the model file's own inline bytes, when the
            model was scanned with ``skip_raw_data`` (read from the model
            file the caller named, without the rules for external files).
        model: the opened model file the references come from, when it is
            on disk: a file may then also lie in the folder of its real path
            (a Hugging Face cache snapshot links both files into ``blobs/``),
            the real path taken when it was opened and checked against it.
    """

    def __init__(
        self,
        base_dir: str | os.PathLike,
        files: SourceFiles,
        inline: InlineSpans | None = None,
        model: SourceFile | None = None,
    ) -> None:
        self.base_dir = os.path.abspath(os.fsdecode(base_dir))
        roots = [os.path.realpath(self.base_dir)]
        if model is not None and model.real:
            roots.append(os.path.dirname(model.real))
        self.roots = tuple(roots)
        self.files = files
        self.inline = inline
        self._sources: dict[str, SourceFile] = {}  # location -> its checked, open file
        self._inline_source = inline.source if inline is not None else None

    def resolve(self, site: TensorSite, cast: Cast | None = None) -> TensorRef:
        """Validate the reference of an EXTERNAL tensor.

        Args:
            site: the tensor (its ``data_location`` must be EXTERNAL).
            cast: when its bytes change dtype on the way, how: the length is
                then checked against the source dtype, and the reference
                carries it.

        Returns:
            The validated :class:`TensorRef`.

        Raises:
            FileNotFoundError: the file is missing.
            ExternalDataError: the reference is malformed, unsafe or out of range.
        """
        entries = read_entries(site)
        source, offset, length = self._locate(site, entries)
        if source is not self._inline_source:  # inline bytes are checked if they move
            check_length(site, length, source.path, cast)
        return TensorRef(site, source, offset, length, entries["location"], _extra(entries), cast)

    def span(self, site: TensorSite) -> tuple[tuple[int, int], int, int]:
        """What the reference of ``site`` reads, as :meth:`resolve` finds it: ``(the
        file's identity, offset, length)``, a missing length running to the end of the
        file. Two spellings of one file (``w.data``, ``./w.data``, a link to it) give
        one identity; the length is not checked against dtype x dims.

        Raises:
            FileNotFoundError, ExternalDataError: as :meth:`resolve`.
        """
        source, offset, length = self._locate(site, read_entries(site))
        return source.identity, offset, length

    def _locate(self, site: TensorSite, entries: dict[str, str]) -> tuple[SourceFile, int, int]:
        """The file (opened and checked), offset and length of a reference, in range."""
        if self.inline is not None and self.inline.holds(entries):
            source = self.inline.source  # the model's own inline bytes
        else:
            location = entries["location"]
            source = self._sources.get(location)
            if source is None:
                check_location(location, Lazy(_label, site, "tensor "))
            _check_external_tensor(site, location)
            if source is None:
                source = self.files.data(self.base_dir, self.roots, location, Lazy(_label, site))
                self._sources[location] = source
        file, size = source.path, source.size
        offset = _int_entry(entries, "offset", site, file) or 0
        length = _int_entry(entries, "length", site, file)
        if offset > size:
            raise ExternalDataError(
                f"tensor {site.label} in {shown(file)}: offset {offset} is past the end "
                f"of the file ({size} bytes)"
            )
        if length is None:
            length = size - offset
        if offset + length > size:
            raise ExternalDataError(
                f"tensor {site.label} in {shown(file)}: bytes [{offset}, {offset + length}) "
                f"run past the end of the file ({size} bytes)"
            )
        return source, offset, length


def _extra(entries: dict[str, str]) -> dict[str, str] | None:
    """The entries other than the three a reference is placed by (None: none, in order)."""
    if len(entries) == 3 and tuple(entries) == _PLACED_ORDER:
        return None
    return {key: value for key, value in entries.items() if key not in PLACED}


PLACED = frozenset(("location", "offset", "length"))
_PLACED_ORDER = ("location", "offset", "length")


def place(
    tensor: onnx.TensorProto,
    location: str,
    offset: int,
    length: int,
    extra: dict[str, str] | None,
) -> None:
    """Make ``tensor`` EXTERNAL at ``location``, ``offset``, ``length`` (its data cleared).

    Args:
        tensor: the tensor to change, in place.
        location: the new location, relative to the model's folder.
        offset: the new offset.
        length: the length in bytes.
        extra: its former entries other than location/offset/length
            (``checksum``...), kept after the three; None (a reference's
            :attr:`TensorRef.extra`): it has exactly those three, in order.
    """
    entries = tensor.external_data
    if (
        extra is None
        and len(entries) == 3
        and tensor.data_location == onnx.TensorProto.EXTERNAL
        and not tensor.HasField("raw_data")
    ):
        # the common case, a reference moved: its three entries rewritten where they
        # are (an EXTERNAL tensor that reached the planner carries no typed field:
        # Resolver.resolve and check_movable refuse one)
        first, second, third = entries[:]  # a list: faster than protobuf's iterator
        first.value, second.value, third.value = location, str(offset), str(length)
        return
    tensor.ClearField("raw_data")
    for field in _TYPED_FIELDS:  # a tensor that held its values in float_data...
        tensor.ClearField(field)
    del entries[:]
    add = entries.add
    add(key="location", value=location)
    add(key="offset", value=str(offset))
    add(key="length", value=str(length))
    for key, value in (extra or {}).items():
        if key not in PLACED:
            add(key=key, value=value)
    tensor.data_location = onnx.TensorProto.EXTERNAL


def set_inline(tensor: onnx.TensorProto, data: bytes) -> None:
    """Make ``tensor`` hold ``data`` in ``raw_data`` (its external entries are cleared)."""
    del tensor.external_data[:]
    tensor.data_location = onnx.TensorProto.DEFAULT
    tensor.raw_data = data
