"""TensorRef: read, resolve and check a tensor's ``external_data`` entries.

A reference is accepted only when it is safe and in range (the rules of
onnx >= 1.22, and a few more):

- ``location`` is present, relative, without ``..`` components, and once
  symlinks are resolved it still lies inside the model's folder;
- the file exists, is a regular file (no FIFO, device or folder) and has a
  single hard link (a hard link can make any file of the disk appear inside
  the folder; onnx refuses them too);
- ``offset`` and ``length`` are plain decimal integers (ASCII digits only, as
  onnxruntime parses them), ``offset + length`` fits in the file, and
  ``length`` equals dtype x dims when both are known;
- no key is repeated; an EXTERNAL tensor carries no data of its own
  (``raw_data``, ``float_data``, ...); string tensors are never external.

Every error names the tensor and the file.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass

import onnx

from ._errors import ExternalDataError
from ._tensors import TensorSite, tensor_nbytes

KNOWN_KEYS = ("location", "offset", "length", "checksum", "basepath")
_TYPED_FIELDS = (
    "float_data",
    "int32_data",
    "string_data",
    "int64_data",
    "double_data",
    "uint64_data",
)


@dataclass(frozen=True)
class TensorRef:
    """A validated external reference.

    Attributes:
        site: the tensor and its path in the model.
        file: absolute path of the file holding the bytes.
        offset: first byte of the tensor in ``file``.
        length: number of bytes.
        entries: the tensor's ``external_data`` as an ordered dict (other keys
            such as ``checksum`` are carried along).
    """

    site: TensorSite
    file: str
    offset: int
    length: int
    entries: dict[str, str]

    @property
    def span(self) -> tuple[str, int, int]:
        """The source byte range, the key two tensors share a copy by."""
        return (self.file, self.offset, self.length)


def check_location(location: str, what: str) -> None:
    """Reject an empty, absolute or ``..``-climbing location.

    Args:
        location: the location as recorded in a model.
        what: who carries it, for the message (e.g. "tensor 'W'").

    Raises:
        ExternalDataError: when the location is unsafe.
    """
    if not location:
        raise ExternalDataError(f"{what}: external_data has an empty 'location'")
    if "\x00" in location:
        raise ExternalDataError(f"{what}: location {location!r} contains a NUL byte")
    parts = location.replace("\\", "/").split("/")
    if os.path.isabs(location) or location.startswith(("/", "\\")) or ":" in parts[0]:
        raise ExternalDataError(
            f"{what}: location {location!r} is absolute; "
            "external data must be relative to the model's folder"
        )
    if ".." in parts:
        raise ExternalDataError(
            f"{what}: location {location!r} contains '..'; "
            "external data must stay inside the model's folder"
        )


def _int_entry(entries: dict[str, str], key: str, label: str, file: str) -> int | None:
    if key not in entries:
        return None
    raw = entries[key]
    digits = raw[1:] if raw.startswith("-") else raw
    if not (digits.isascii() and digits.isdigit()):
        # int() would also take " 1", "+1", "1_0" or non-ASCII digits, which
        # onnxruntime refuses: two readers must never see different offsets.
        raise ExternalDataError(
            f"tensor {label} in {file!r}: external_data {key}={raw!r} is not an integer "
            "(decimal digits only)"
        )
    value = int(raw)
    if value < 0:
        raise ExternalDataError(f"tensor {label} in {file!r}: external_data {key}={value} < 0")
    return value


def _carried_data(tensor: onnx.TensorProto) -> str | None:
    """The name of a data field the tensor carries itself, if any."""
    if tensor.HasField("raw_data"):
        return "raw_data"
    for field in _TYPED_FIELDS:
        if len(getattr(tensor, field)):
            return field
    return None


def read_entries(site: TensorSite) -> dict[str, str]:
    """The ``external_data`` entries of a tensor as a dict, checked for duplicates.

    Raises:
        ExternalDataError: on a repeated key, a missing location, data of its own
            (raw_data, float_data, ...) on an external tensor, or an external
            string tensor.
    """
    tensor = site.tensor
    entries: dict[str, str] = {}
    for entry in tensor.external_data:
        if entry.key in entries:
            raise ExternalDataError(
                f"tensor {site.label}: external_data key {entry.key!r} appears twice"
            )
        entries[entry.key] = entry.value
    location = entries.get("location", "")
    if "location" not in entries:
        raise ExternalDataError(f"tensor {site.label}: external_data has no 'location'")
    check_location(location, f"tensor {site.label}")
    carried = _carried_data(tensor)
    if carried is not None:
        raise ExternalDataError(
            f"tensor {site.label} in {location!r}: is EXTERNAL but also carries {carried}"
        )
    if tensor.data_type == onnx.TensorProto.STRING:
        raise ExternalDataError(
            f"tensor {site.label} in {location!r}: string tensors cannot be stored externally"
        )
    return entries


class Resolver:
    """Resolves references relative to one folder, one ``stat`` per file.

    Args:
        base_dir: the folder locations are relative to (the model's folder).
    """

    def __init__(self, base_dir: str | os.PathLike) -> None:
        self.base_dir = os.path.abspath(os.fsdecode(base_dir))
        self._real_base = os.path.realpath(self.base_dir)
        self._files: dict[str, tuple[str, int]] = {}

    def file_of(self, location: str, label: str) -> tuple[str, int]:
        """Absolute path and size of the file behind ``location``.

        Raises:
            FileNotFoundError: when the file does not exist.
            ExternalDataError: when it escapes the folder or is not a regular file.
        """
        cached = self._files.get(location)
        if cached is not None:
            return cached
        path = os.path.join(self.base_dir, location)
        real = os.path.realpath(path)
        if os.path.commonpath([real, self._real_base]) != self._real_base:
            raise ExternalDataError(
                f"tensor {label}: location {location!r} resolves to {real!r}, "
                f"outside the model folder {self.base_dir!r} (symlink?)"
            )
        try:
            st = os.stat(real)
        except FileNotFoundError:
            raise FileNotFoundError(
                f"tensor {label}: external data file {path!r} does not exist"
            ) from None
        except OSError as e:  # a loop of symlinks, a name too long, a file as a folder...
            raise type(e)(
                e.errno, f"tensor {label}: cannot reach external data file {path!r}: {e.strerror}"
            ) from None
        if not stat.S_ISREG(st.st_mode):
            raise ExternalDataError(
                f"tensor {label}: external data file {path!r} is not a regular file"
            )
        if st.st_nlink > 1:
            raise ExternalDataError(
                f"tensor {label}: external data file {path!r} has {st.st_nlink} hard links; "
                "a hard link can bring any file of the disk into the model folder, so it "
                "is refused (as onnx does): copy the file to give it a single link"
            )
        self._files[location] = (real, st.st_size)
        return real, st.st_size

    def resolve(self, site: TensorSite) -> TensorRef:
        """Validate the reference of an EXTERNAL tensor.

        Args:
            site: the tensor (its ``data_location`` must be EXTERNAL).

        Returns:
            The validated :class:`TensorRef`.

        Raises:
            FileNotFoundError: the file is missing.
            ExternalDataError: the reference is malformed, unsafe or out of range.
        """
        entries = read_entries(site)
        location = entries["location"]
        file, size = self.file_of(location, site.label)
        offset = _int_entry(entries, "offset", site.label, file) or 0
        length = _int_entry(entries, "length", site.label, file)
        if offset > size:
            raise ExternalDataError(
                f"tensor {site.label} in {file!r}: offset {offset} is past the end "
                f"of the file ({size} bytes)"
            )
        if length is None:
            length = size - offset
        if offset + length > size:
            raise ExternalDataError(
                f"tensor {site.label} in {file!r}: bytes [{offset}, {offset + length}) "
                f"run past the end of the file ({size} bytes)"
            )
        expected = tensor_nbytes(site.tensor)
        if expected is not None and expected != length:
            raise ExternalDataError(
                f"tensor {site.label} in {file!r}: length {length} does not match "
                f"dtype x dims ({expected} bytes)"
            )
        return TensorRef(site, file, offset, length, entries)


def external_entries(location: str, offset: int, length: int, extra: dict[str, str]) -> list:
    """The ``external_data`` entries to record for a tensor, extra keys kept.

    Args:
        location: the new location, relative to the model's folder.
        offset: the new offset.
        length: the length in bytes.
        extra: former entries; keys other than location/offset/length are kept.

    Returns:
        A list of ``(key, value)`` pairs.
    """
    pairs = [("location", location), ("offset", str(offset)), ("length", str(length))]
    pairs += [(k, v) for k, v in extra.items() if k not in ("location", "offset", "length")]
    return pairs


def set_external(tensor: onnx.TensorProto, pairs: list) -> None:
    """Make ``tensor`` EXTERNAL with the given entries (raw_data is cleared)."""
    tensor.ClearField("raw_data")
    del tensor.external_data[:]
    for key, value in pairs:
        entry = tensor.external_data.add()
        entry.key = key
        entry.value = value
    tensor.data_location = onnx.TensorProto.EXTERNAL


def set_inline(tensor: onnx.TensorProto, data: bytes) -> None:
    """Make ``tensor`` hold ``data`` in ``raw_data`` (its external entries are cleared)."""
    del tensor.external_data[:]
    tensor.data_location = onnx.TensorProto.DEFAULT
    tensor.raw_data = data
