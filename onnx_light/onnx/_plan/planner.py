"""The planner: where the bytes of each tensor of a model go.

One function, :func:`plan_tensors`, decides it for every writer (``save``,
the shared save, ``align``): it resolves each external reference (checking
it and opening its file), takes the length of inline bytes (``raw_data``, or
a typed field written as raw bytes), applies the size threshold and
``inline_below``, keeps sparse tensors inline, refuses tensors that cannot
move, and says what becomes of each tensor:

- an :class:`Item` for the weights files (bytes in a file, in ``raw_data``,
  or converted from a typed field);
- a reference whose bytes are spliced into the new ``.onnx`` (an inline
  tensor that stays inline, read from the source ``.onnx``; an external one
  brought back inline);
- a reference kept as it is (``save`` with ``use_external_data_location``);
- nothing, for an inline tensor that stays where it is in the model.

Nothing is written here; the layout planner (``_plan/layout.py``) then places
the items.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from enum import Enum

from .._read.external import InlineSpans, TensorRef, check_length, check_movable
from .._read.sources import SourceFile
from .._read.tensors import Cast, TensorSite, is_external, tensor_nbytes, typed_bytes

__all__ = ["Fate", "Item", "Kind", "Mode", "Plan", "decide", "plan_tensors"]


class Mode(Enum):
    """What a writer does with the tensors that are already external."""

    MOVE = "move"  # into the new weights files (align, dedup, save with a location)
    KEEP = "keep"  # the reference as it is (save with use_external_data_location)
    INLINE = "inline"  # their bytes copied into the .onnx (save without a location)


class Kind(Enum):
    """Where a tensor's bytes are in the model as it was read."""

    EXTERNAL = "a reference into a data file"
    OWN = "inline bytes of the source .onnx, seen as a reference (skip_raw_data)"
    RAW = "raw_data in memory"
    TYPED = "a typed field (float_data...) in memory"
    EMPTY = "no bytes (a string tensor, or no data)"


class Fate(Enum):
    """Where the planner sends a tensor's bytes."""

    WEIGHTS = "the new weights files"
    SPLICE = "spliced into the new .onnx, copied file to file"
    KEEP = "the reference, written as it is"
    STAY = "left in the model as it is"


# An external reference, by the writer's mode and whether it is a sparse tensor's
# (onnx never loads external sparse values: they come back inline).
EXTERNAL_FATE = {
    (Mode.MOVE, False): Fate.WEIGHTS,
    (Mode.MOVE, True): Fate.SPLICE,
    (Mode.KEEP, False): Fate.KEEP,
    (Mode.KEEP, True): Fate.KEEP,
    (Mode.INLINE, False): Fate.SPLICE,
    (Mode.INLINE, True): Fate.SPLICE,
}


def decide(kind: Kind, mode: Mode, moves: bool, small: bool, sparse: bool) -> Fate:
    """The planner's decision for one tensor, as a table a reader can check.

    Args:
        kind: where its bytes are.
        mode: what the writer does with external tensors.
        moves: its size passes the threshold (and ``inline_below``), and it is
            not a sparse tensor's: inline bytes would move out.
        small: it is external and smaller than ``inline_below``.
        sparse: it is a sparse tensor's values or indices.

    Returns:
        Its :class:`Fate`: external tensors by :data:`EXTERNAL_FATE` (a small one
        spliced back inline first); inline bytes to the weights files when they
        move, else the source ``.onnx``'s own spliced, in-memory ones left as they
        are; a tensor without bytes stays.
    """
    if kind is Kind.EXTERNAL:
        return Fate.SPLICE if small else EXTERNAL_FATE[mode, sparse]
    if kind is Kind.EMPTY:
        return Fate.STAY
    if moves:
        return Fate.WEIGHTS
    return Fate.SPLICE if kind is Kind.OWN else Fate.STAY


@dataclass(slots=True)
class Item:
    """A tensor to place in the weights file.

    Attributes:
        site: the tensor and its path.
        size: its byte size.
        ref: where its bytes are when they are in a file; None when they are
            the tensor's ``raw_data``.
        extra: its former ``external_data`` entries other than location,
            offset and length, carried over (None: it had exactly those three,
            see :attr:`~onnx_light.onnx._read.external.TensorRef.extra`).
        data: its bytes when they are neither in a file nor its ``raw_data``
            (a tensor held in ``float_data``... written as raw bytes).
        shared: a sharing key decided by content (``deduplicate``): items
            with the same one hold the same bytes, stored once.
    """

    site: TensorSite
    size: int
    ref: TensorRef | None = None
    extra: dict[str, str] | None = field(default_factory=dict)
    data: bytes | None = None
    shared: Hashable | None = None

    @property
    def cast(self) -> Cast | None:
        """How its bytes are converted on the way, when they change dtype."""
        return self.ref.cast if self.ref is not None else None

    @property
    def key(self):
        """The sharing key of the layout planner: the content key when one was
        decided, else the source span (and the conversion of its bytes), if any."""
        if self.shared is not None:
            return self.shared
        if self.ref is None:
            return None
        cast = self.ref.cast
        return self.ref.span if cast is None else (self.ref.span, cast.conversion)


@dataclass
class Plan:
    """What :func:`plan_tensors` decided.

    Attributes:
        items: the tensors for the weights files, in the walker's order.
        inline: references whose bytes are spliced into the new ``.onnx``.
        kept: references written as they are.
        typed: items converted from a typed field.
        inlined: external tensors brought back inline (``inline_below``).
        kept_inline: inline tensors left as they are in the model.
        inline_bytes: bytes of tensor data in the new ``.onnx``.
        sources: the data files read (the source ``.onnx`` left out).
    """

    items: list[Item] = field(default_factory=list)
    inline: list[TensorRef] = field(default_factory=list)
    kept: list[TensorRef] = field(default_factory=list)
    typed: int = 0
    inlined: int = 0
    kept_inline: int = 0
    inline_bytes: int = 0
    sources: list[SourceFile] = field(default_factory=list)

    def copy(self, ref: TensorRef, into_weights: bool) -> None:
        """Copy the bytes of an external tensor: into the weights files, or inline.

        Bytes that change dtype are converted on the way either way: streamed
        into the weights files, or read and converted in memory for the
        ``.onnx`` (a sparse tensor's values, which stay inline).
        """
        if ref.cast is not None:
            size = ref.cast.conversion.length(ref.length)
            if into_weights:
                self.items.append(Item(ref.site, size, ref, ref.extra))
            else:
                self.inline.append(ref)
                self.inline_bytes += size
        elif into_weights:
            self.items.append(Item(ref.site, ref.length, ref, ref.extra))
        else:
            self.inline.append(ref)
            self.inline_bytes += ref.length


def plan_tensors(
    sites: Iterable[TensorSite],
    resolve: Callable[[TensorSite], TensorRef],
    *,
    external: Mode,
    threshold: int | None,
    inline_below: int | None = None,
    spans: InlineSpans | None = None,
    source_size: Callable[[TensorSite], int | None] | None = None,
) -> Plan:
    """Decide where the bytes of every tensor go (:func:`decide`, tensor by tensor).

    Args:
        sites: the tensors, in the walker's order.
        resolve: checks an external reference and opens its file.
        external: what becomes of external tensors (:class:`Mode`).
        threshold: inline tensors of at least this many bytes move to the
            weights files; None: they all stay inline.
        inline_below: tensors of fewer bytes never go to the weights files,
            and external ones come back inline.
        spans: the inline bytes of the source ``.onnx`` scanned without its
            weights: references into them are inline tensors.
        source_size: the byte size an inline tensor had in the source, when
            the writer changed it in memory (the converter's float_data
            tensors, converted to float16 before they are planned); None for
            the others. The threshold and ``inline_below`` compare it.

    Returns:
        A :class:`Plan`.

    Raises:
        FileNotFoundError: a referenced file is missing.
        ExternalDataError: a reference is unsafe or out of range, a length
            does not match dtype x dims, or a tensor cannot move.
    """
    plan = Plan()
    seen: set[SourceFile] = set()
    for site in sites:
        kind, ref, size = _read(site, resolve, spans)
        sparse = site.in_sparse
        measured = size
        if source_size is not None and kind in (Kind.RAW, Kind.TYPED):
            before = source_size(site)
            measured = size if before is None else before
        moves = not (threshold is None or measured < threshold or sparse) and (
            inline_below is None or measured >= inline_below
        )
        small = kind is Kind.EXTERNAL and inline_below is not None and size < inline_below
        fate = decide(kind, external, moves, small, sparse)
        if kind is Kind.EXTERNAL and ref.source not in seen:
            seen.add(ref.source)
            plan.sources.append(ref.source)
        data = typed_bytes(site) if fate is Fate.WEIGHTS and kind is Kind.TYPED else None
        if fate is Fate.KEEP and ref.cast is not None:
            plan.copy(ref, into_weights=True)  # new bytes: never the source's, kept
        elif fate is Fate.KEEP:
            plan.kept.append(ref)
        elif fate is Fate.WEIGHTS and kind is Kind.RAW:
            check_movable(site)
            plan.items.append(Item(site, size))
        elif data is not None:  # float_data...: written as raw bytes
            plan.items.append(Item(site, len(data), data=data))
            plan.typed += 1
        elif ref is not None:  # into the weights files, or spliced into the .onnx
            if kind is Kind.OWN and fate is Fate.WEIGHTS:  # inline bytes moving out
                check_length(site, ref.length, ref.file, ref.cast)  # names the .onnx
                check_movable(site)
            elif small:  # an external tensor coming back inline
                check_length(site, ref.length, ref.file, ref.cast)
            plan.copy(ref, into_weights=fate is Fate.WEIGHTS)
            plan.inlined += small
        elif kind is not Kind.EMPTY:  # stays in the model (a typed field that cannot convert too)
            plan.kept_inline += 1
            plan.inline_bytes += size
    return plan


def _read(
    site: TensorSite, resolve: Callable[[TensorSite], TensorRef], spans: InlineSpans | None
) -> tuple[Kind, TensorRef | None, int]:
    """``(kind, its reference when it has one, its byte size)``; a reference is checked."""
    tensor = site.tensor
    if is_external(tensor):
        ref = resolve(site)
        if spans is not None and ref.source is spans.source and _in(spans, ref):
            return Kind.OWN, ref, ref.length
        return Kind.EXTERNAL, ref, ref.length
    size = tensor_nbytes(tensor)
    if tensor.HasField("raw_data"):
        return Kind.RAW, None, len(tensor.raw_data) if size is None else size
    return (Kind.TYPED, None, size) if size else (Kind.EMPTY, None, 0)


def _in(spans: InlineSpans, ref: TensorRef) -> bool:
    """True when ``ref`` reads one of the source ``.onnx``'s inline spans."""
    return (ref.offset, ref.length) in spans.spans
