"""Casts: a tensor whose bytes change dtype on their way to the new weights file.

A graph tool run on a model loaded without its weights can change an external
tensor's ``data_type`` (a float16 converter does it to every weight) but not
its bytes, which it never saw. A :class:`Cast` records what the bytes are in
the source (their dtype) and what the edited tensor says they must become;
the planner sizes the tensor by the result and the writer converts the bytes
while it streams them (``_write/cast.py``).

What the bytes are is the dtype of the source's tensor the edited tensor is
(:class:`SourceTensors`), compared whatever the widths: float16 read as
bfloat16 keeps the byte length and still changes every value. One range of
the source may be read by tensors of several dtypes (a deduplicated model
stores equal bytes once), so the source tensor is found by the tensor itself,
its place and its name, not by the range alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import onnx

from .._errors import ExternalDataError, shown
from .._read.external import read_entries
from .._read.scan import scan_model
from .._read.sources import SourceFiles
from .._read.tensors import Path, TensorSite, is_external, iter_tensors

__all__ = [
    "BFLOAT16",
    "CONVERSIONS",
    "Cast",
    "Conversion",
    "DOUBLE",
    "FLOAT",
    "FLOAT16",
    "ITEMSIZE",
    "SourceTensor",
    "SourceTensors",
    "conversion_for",
    "dtype_name",
    "find_casts",
    "source_tensors",
]

FLOAT = onnx.TensorProto.FLOAT
FLOAT16 = onnx.TensorProto.FLOAT16
BFLOAT16 = onnx.TensorProto.BFLOAT16
DOUBLE = onnx.TensorProto.DOUBLE
ITEMSIZE = {FLOAT: 4, FLOAT16: 2, BFLOAT16: 2, DOUBLE: 8}

# (source dtype, target dtype) the writer converts, each exactly as numpy casts
# (round to nearest even; NaN stays NaN, infinities stay infinite); float16 and
# bfloat16 go through float32, which holds either exactly
CONVERSIONS = frozenset(
    {
        (FLOAT, FLOAT16),
        (FLOAT, BFLOAT16),
        (FLOAT16, FLOAT),
        (BFLOAT16, FLOAT),
        (DOUBLE, FLOAT),
        (FLOAT16, BFLOAT16),
        (BFLOAT16, FLOAT16),
    }
)


def dtype_name(data_type: int) -> str:
    """``FLOAT16`` for onnx's ``TensorProto.FLOAT16``; the number for an unknown one."""
    try:
        return onnx.TensorProto.DataType.Name(data_type)
    except ValueError:
        return str(data_type)


@dataclass(frozen=True, slots=True)
class Conversion:
    """How bytes of one dtype become another's.

    Attributes:
        src: the dtype the bytes have in the source (onnx's ``TensorProto`` code).
        dst: the dtype they are written as.
        min_positive: when set (float32 -> float16 only), values strictly
            between 0 and it (in magnitude) become it, sign kept, before the
            cast: onnxruntime's converter's clipping rule.
        max_finite: when set, finite values beyond it (in magnitude) become
            it, sign kept, before the cast.
    """

    src: int
    dst: int
    min_positive: float | None = None
    max_finite: float | None = None

    @property
    def clips(self) -> bool:
        """True when values are clipped before the cast."""
        return self.min_positive is not None or self.max_finite is not None

    def length(self, length: int) -> int:
        """The byte length ``length`` bytes of ``src`` values take as ``dst``."""
        return length // ITEMSIZE[self.src] * ITEMSIZE[self.dst]

    def source_length(self, length: int) -> int:
        """The byte length of the ``src`` values that become ``length`` bytes of ``dst``."""
        return length // ITEMSIZE[self.dst] * ITEMSIZE[self.src]

    def fits(self, length: int) -> bool:
        """True when ``length`` bytes are a whole number of ``src`` values."""
        return length % ITEMSIZE[self.src] == 0

    def __str__(self) -> str:
        return f"{dtype_name(self.src)} -> {dtype_name(self.dst)}"


def conversion_for(src: int, dst: int) -> Conversion | None:
    """The plain conversion from ``src`` to ``dst``, None when the writer has none."""
    return Conversion(src, dst) if (src, dst) in CONVERSIONS else None


@dataclass(slots=True)
class Cast:
    """One tensor whose bytes are converted while they are copied.

    Attributes:
        conversion: what happens to its bytes.
        site: the edited tensor (its new ``data_type``): the one the new
            ``.onnx`` gets, placed in the new weights file.
        clipped: values the clipping changed, counted by the writer.
    """

    conversion: Conversion
    site: TensorSite
    clipped: int = 0


Key = tuple[str, int, int]  # (location, offset, length): a range of bytes


def _key(entries: dict[str, str]) -> Key | None:
    try:
        return entries["location"], int(entries.get("offset") or 0), int(entries["length"])
    except (KeyError, ValueError):
        return None  # no length, or not a number: the resolver says what is wrong


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
                key = _key(read_entries(site))
            except ExternalDataError:
                continue  # a malformed reference no edited tensor can share
            if key is not None:
                found = SourceTensor(site.path, tensor.name, tensor.data_type)
                by_key.setdefault(key, []).append(found)
        return by_key


def find_casts(
    model: onnx.ModelProto,
    source: Callable[[], SourceTensors],
    src: str,
    convert: Callable[[int, int], Conversion | None] = conversion_for,
) -> dict:
    """The external tensors of ``model`` whose bytes must change dtype.

    A tensor qualifies when the source's tensor it is
    (:meth:`SourceTensors.candidates`) has another dtype: a graph tool changed
    the dtype, not the bytes. The dtypes are compared, not the byte lengths,
    so a change that keeps the width (float16 -> bfloat16, int32 -> float32)
    is found too. When the source's tensors with its reference have several
    dtypes and nothing tells which one it is, a tensor of one of those dtypes
    keeps its bytes as they are, and one that a single of them converts to is
    converted from it.

    Args:
        model: the edited model, its references as the source has them.
        source: gives the source's external tensors (called once, when the
            model has an external tensor).
        src: the source ``.onnx``, for messages.
        convert: the conversion for ``(source dtype, new dtype)``, None when
            there is none (default: :func:`conversion_for`).

    Returns:
        ``{tensor path: Cast}``. A cast whose reference's length does not
        hold its source dtype x the edited dims is refused by the resolver,
        which names the tensor and the file.

    Raises:
        ExternalDataError: a tensor's dtype changed to one its bytes cannot be
            converted to, or its bytes are read by source tensors of several
            dtypes and it is none of them (naming the tensor, the dtypes and
            the source).
    """
    casts: dict = {}
    known = None
    for site in iter_tensors(model):
        tensor = site.tensor
        if not is_external(tensor):
            continue
        if known is None:
            known = source()
        if known.unchanged(site):
            continue
        key = _key(read_entries(site))
        if key is None:
            continue  # the resolver says what is wrong
        found = known.candidates(site, key)
        dtypes = sorted({c.data_type for c in found})
        if not dtypes or tensor.data_type in dtypes:
            continue  # not the source's bytes (the resolver checks them), or the same dtype
        usable = [c for c in map(convert, dtypes, [tensor.data_type] * len(dtypes)) if c]
        if len(usable) == 1:
            casts[site.path] = Cast(usable[0], site)
            continue
        where = f"{shown(src)} at {key[0]!r}"
        if len(dtypes) == 1:
            raise ExternalDataError(
                f"tensor {site.label}: the edited model reads the {dtype_name(dtypes[0])} "
                f"bytes of {where} as {dtype_name(tensor.data_type)}; the bytes can follow a "
                "new dtype only for "
                + ", ".join(sorted(str(Conversion(*pair)) for pair in CONVERSIONS))
                + f": give it back its dtype {dtype_name(dtypes[0])}, or load the model "
                "with its weights to change their values"
            )
        reason = "more than one of them converts" if usable else "none of them converts"
        raise ExternalDataError(
            f"tensor {site.label}: its bytes in {where} are read by the source's tensors "
            + ", ".join(map(str, found))
            + f", it matches none of them by name or place, and the edited model reads "
            f"them as {dtype_name(tensor.data_type)}, which {reason} to: give the tensor "
            "its name in the source, or one of their dtypes"
        )
    return casts


def source_tensors(path: str, files: SourceFiles) -> SourceTensors:
    """:class:`SourceTensors` of the model at ``path``, scanned without its
    weights as ``skip_raw_data`` loads it (inline weights are references into
    the file itself)."""
    return SourceTensors(scan_model(path, files)[0])
