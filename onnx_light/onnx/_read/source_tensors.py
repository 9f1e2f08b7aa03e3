"""The source model's external tensors, found again from a tensor of the edited model.

A graph tool run on a model loaded without its weights may retype a tensor
(``save_edited``): its bytes are still what the source's tensor says. The
source's tensors that read the same bytes are the candidates: a reference is
keyed by what it reads, as the resolver finds it (the file's identity, so
``w.data``, ``./w.data`` and a link to it are one file; the offset; the
length, a missing one running to the end of the file), never by its
spelling. When candidates of several dtypes read one range (a deduplicated
model stores equal bytes once), the tensor's place and name say which ones
it may be (:meth:`SourceTensors.candidates`); what the dtypes mean for the
bytes is decided by ``_plan/cast.py``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import onnx

from .._dtypes import dtype_name
from .._errors import ExternalDataError
from .external import Resolver
from .scan import scan_model
from .sources import SourceFiles
from .tensors import Path, TensorSite, is_external, iter_tensors, path_to_str

__all__ = ["Candidates", "Key", "SourceTensor", "SourceTensors", "source_tensors"]

Key = tuple[tuple[int, int], int, int]  # (file identity, offset, length): a range of bytes

BY_PLACE = "its place"
BY_NAME = "its name"
BY_SUFFIX = "the end of its name"


@dataclass(frozen=True, slots=True)
class SourceTensor:
    """An external tensor of the source model: where it is, what it is called, its dtype."""

    path: Path
    name: str
    data_type: int

    def __str__(self) -> str:
        return f"{self.name!r} ({dtype_name(self.data_type)})"

    @property
    def where(self) -> str:
        """Its place in the source, for messages."""
        return path_to_str(self.path)


@dataclass
class Candidates:
    """The source tensors an edited tensor may be.

    Attributes:
        found: every source tensor that reads its bytes, in the source's order.
        pointed: those its place or name points at, with what points at each
            (:data:`BY_PLACE`, :data:`BY_NAME`, :data:`BY_SUFFIX`); empty when
            neither does. One tensor at the same place and of the same name
            is the tensor itself, alone.
        offset: where those bytes begin in their file.
        length: how many they are.
    """

    found: list[SourceTensor] = field(default_factory=list)
    pointed: dict[SourceTensor, list[str]] = field(default_factory=dict)
    offset: int = 0
    length: int = 0


class SourceTensors:
    """The external tensors of the source model, found from an edited tensor.

    A tool keeps a tensor where it was and as it was named (shape inference,
    the version converter, a float16 converter), moves it (the ``Extractor``
    keeps some initializers, in its own order) or renames it
    (``onnx.compose.add_prefix``, ``merge_models``' second model). The
    source's tensors that read its bytes are the candidates; its place and
    its name point at some of them: the one at the same place and of the same
    name is the tensor itself; else those of its name, the one whose name its
    name ends with (a prefix added) and, when a name points at one, the one at
    its place. A place alone says nothing: a tool that moved and renamed
    tensors leaves another tensor there (so an unnamed tensor, a node's
    attribute, is identified by nothing but its bytes).

    Args:
        model: the source model, scanned without its weights.
        resolver: resolves the source's references.
        edited: resolves the edited model's references (from the source's folder).
    """

    def __init__(self, model: onnx.ModelProto, resolver: Resolver, edited: Resolver) -> None:
        self._model = model
        self._resolver = resolver
        self._edited = edited
        self._by_key: dict[Key, list[SourceTensor]] | None = None

    def _at(self, path: Path) -> onnx.TensorProto | None:
        """The source's tensor at ``path``, None when it has none there."""
        proto = self._model
        try:
            for field_name, index in path:
                proto = getattr(proto, field_name)
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

    def candidates(self, site: TensorSite) -> Candidates:
        """The source tensors ``site`` may be.

        Args:
            site: an external tensor of the edited model.

        Returns:
            The source tensors that read its bytes and those its place and name
            point at; none when its reference does not resolve (the resolver
            then says what is wrong) or no source tensor reads those bytes.
        """
        try:
            key = self._edited.span(site)
        except (OSError, ExternalDataError):
            return Candidates()  # the resolver says what is wrong
        if self._by_key is None:
            self._by_key = self._index()
        found = self._by_key.get(key, [])
        result = Candidates(list(found), {}, key[1], key[2])
        if not found:
            return result
        name, path = site.tensor.name, site.path
        here = next((c for c in found if c.path == path), None)
        if here is not None and name and here.name == name:
            result.pointed[here] = [BY_PLACE, BY_NAME]
            return result
        for c in found:
            if name and c.name == name:
                result.pointed.setdefault(c, []).append(BY_NAME)
        suffix = max(
            (len(c.name) for c in found if c.name and c.name != name and name.endswith(c.name)),
            default=0,
        )
        for c in found:
            if suffix and len(c.name) == suffix and c.name != name and name.endswith(c.name):
                result.pointed.setdefault(c, []).append(BY_SUFFIX)
        if result.pointed and here is not None:
            result.pointed.setdefault(here, []).insert(0, BY_PLACE)
        return result

    def _index(self) -> dict[Key, list[SourceTensor]]:
        by_key: dict[Key, list[SourceTensor]] = {}
        for site in iter_tensors(self._model):
            tensor = site.tensor
            if not is_external(tensor):
                continue
            try:
                key = self._resolver.span(site)
            except (OSError, ExternalDataError):
                continue  # a reference no edited tensor can share
            found = SourceTensor(site.path, tensor.name, tensor.data_type)
            by_key.setdefault(key, []).append(found)
        return by_key


def source_tensors(path: str, files: SourceFiles) -> SourceTensors:
    """:class:`SourceTensors` of the model at ``path``, scanned without its weights
    as ``skip_raw_data`` loads it (inline weights are references into the file
    itself), for a model edited from it (its references relative to its folder).

    Args:
        path: the source ``.onnx``.
        files: the call's opened sources (the model file is opened through it).

    Returns:
        Its external tensors, indexed by what they read when first asked.

    Raises:
        FileNotFoundError, ValueError: the model cannot be read.
    """
    model, spans = scan_model(path, files)
    folder = os.path.dirname(path)
    resolver = Resolver(folder, files, spans, spans.source)
    return SourceTensors(model, resolver, Resolver(folder, files, None, spans.source))
