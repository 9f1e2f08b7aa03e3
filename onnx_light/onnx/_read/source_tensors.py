"""The source model's external tensors, found again from a tensor of the edited model.

A graph tool run on a model loaded without its weights may retype a tensor
(``save_edited``): its bytes are still what the source's tensor says. The
source's tensor is found by the reference both carry (location, offset,
length) and, when several tensors of the source read that range with
different dtypes (a deduplicated model stores equal bytes once), by the
tensor's place and name (:meth:`SourceTensors.candidates`). What the dtypes
mean for the bytes is decided by ``_plan/cast.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx

from .._dtypes import dtype_name
from .._errors import ExternalDataError
from .external import read_entries
from .scan import scan_model
from .sources import SourceFiles
from .tensors import Path, TensorSite, is_external, iter_tensors

__all__ = ["Key", "SourceTensor", "SourceTensors", "range_key", "source_tensors"]

Key = tuple[str, int, int]  # (location, offset, length): a range of bytes


def range_key(entries: dict[str, str]) -> Key | None:
    """``(location, offset, length)`` of a tensor's ``external_data`` entries, None
    when its length is missing or not a number (the resolver says what is wrong)."""
    try:
        return entries["location"], int(entries.get("offset") or 0), int(entries["length"])
    except (KeyError, ValueError):
        return None


@dataclass(frozen=True, slots=True)
class SourceTensor:
    """An external tensor of the source model: where it is, what it is called, its dtype."""

    path: Path
    name: str
    data_type: int

    def __str__(self) -> str:
        return f"{self.name!r} ({dtype_name(self.data_type)})"


class SourceTensors:
    """The external tensors of the source model, found from an edited tensor.

    A tool keeps a tensor where it was and as it was named (shape inference,
    the version converter, a float16 converter), moves it (the ``Extractor``
    keeps some initializers, in its own order) or renames it
    (``onnx.compose.add_prefix``, ``merge_models``' second model). Its
    reference (location, offset, length) is the one the source gave it, and
    the source's tensors with that reference are the candidates; when they
    disagree on the dtype (equal bytes stored once), the one the edited tensor
    is comes from, in turn: the same place and name, the same name, the
    longest source name the edited name ends with (a prefix added), the same
    place.
    """

    def __init__(self, model: onnx.ModelProto) -> None:
        self._model = model
        self._by_key: dict[Key, list[SourceTensor]] | None = None

    def _at(self, path: Path) -> onnx.TensorProto | None:
        """The source's tensor at ``path``, None when it has none there."""
        proto = self._model
        try:
            for field, index in path:
                proto = getattr(proto, field)
                if index is not None:
                    proto = proto[index]
        except (AttributeError, IndexError):
            return None
        return proto if isinstance(proto, onnx.TensorProto) else None

    def unchanged(self, site: TensorSite) -> bool:
        """True when the source holds this tensor at the same place, with the same
        name, dtype and reference (the common case, without parsing the entries)."""
        tensor, before = site.tensor, self._at(site.path)
        return (
            before is not None
            and before.data_type == tensor.data_type
            and before.name == tensor.name
            and before.external_data == tensor.external_data
        )

    def candidates(self, site: TensorSite, key: Key) -> list[SourceTensor]:
        """The source tensors ``site`` may be, narrowed by place and name.

        Args:
            site: an external tensor of the edited model.
            key: its reference.

        Returns:
            The source tensors with reference ``key`` that match ``site`` best:
            all of one dtype once the tensor is identified, several dtypes when
            nothing tells them apart, none when the source has no tensor with
            that reference.
        """
        if self._by_key is None:
            self._by_key = self._index()
        found = self._by_key.get(key, [])
        name, path = site.tensor.name, site.path
        suffix = max((len(c.name) for c in found if c.name and name.endswith(c.name)), default=0)
        rules = (
            lambda c: c.path == path and c.name == name,
            lambda c: c.name == name,
            lambda c: suffix and len(c.name) == suffix and name.endswith(c.name),
            lambda c: c.path == path,
        )
        for rule in rules:
            if len({c.data_type for c in found}) <= 1:
                break
            found = [c for c in found if rule(c)] or found
        return found

    def _index(self) -> dict[Key, list[SourceTensor]]:
        by_key: dict[Key, list[SourceTensor]] = {}
        for site in iter_tensors(self._model):
            tensor = site.tensor
            if not is_external(tensor):
                continue
            try:
                key = range_key(read_entries(site))
            except ExternalDataError:
                continue  # a malformed reference no edited tensor can share
            if key is not None:
                found = SourceTensor(site.path, tensor.name, tensor.data_type)
                by_key.setdefault(key, []).append(found)
        return by_key


def source_tensors(path: str, files: SourceFiles) -> SourceTensors:
    """:class:`SourceTensors` of the model at ``path``, scanned without its
    weights as ``skip_raw_data`` loads it (inline weights are references into
    the file itself).

    Args:
        path: the source ``.onnx``.
        files: the call's opened sources (the model file is opened through it).

    Returns:
        Its external tensors, indexed by reference when first asked.

    Raises:
        FileNotFoundError, ValueError: the model cannot be read.
    """
    return SourceTensors(scan_model(path, files)[0])
