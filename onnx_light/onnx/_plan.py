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

Nothing is written here; the layout planner (``_layout.py``) then places
the items.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field

from ._external import InlineSpans, TensorRef, check_length, check_movable
from ._sources import SourceFile
from ._tensors import TensorSite, is_external, tensor_nbytes, typed_bytes

MOVE, KEEP, INLINE = "move", "keep", "inline"


@dataclass(slots=True)
class Item:
    """A tensor to place in the weights file.

    Attributes:
        site: the tensor and its path.
        size: its byte size.
        ref: where its bytes are when they are in a file; None when they are
            the tensor's ``raw_data``.
        entries: its former ``external_data`` (extra keys are carried over).
        data: its bytes when they are neither in a file nor its ``raw_data``
            (a tensor held in ``float_data``... written as raw bytes).
        shared: a sharing key decided by content (``deduplicate``): items
            with the same one hold the same bytes, stored once.
    """

    site: TensorSite
    size: int
    ref: TensorRef | None = None
    entries: dict[str, str] = field(default_factory=dict)
    data: bytes | None = None
    shared: Hashable | None = None

    @property
    def key(self):
        """The sharing key of the layout planner: the content key when one was
        decided, else the source span, if any."""
        if self.shared is not None:
            return self.shared
        return self.ref.span if self.ref is not None else None


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
        """Copy the bytes of an external tensor: into the weights files, or inline."""
        if into_weights:
            self.items.append(Item(ref.site, ref.length, ref, ref.entries))
        else:
            self.inline.append(ref)
            self.inline_bytes += ref.length


def plan_tensors(
    sites: Iterable[TensorSite],
    resolve: Callable[[TensorSite], TensorRef],
    *,
    external: str,
    threshold: int | None,
    inline_below: int | None = None,
    spans: InlineSpans | None = None,
) -> Plan:
    """Decide where the bytes of every tensor go.

    Args:
        sites: the tensors, in the walker's order.
        resolve: checks an external reference and opens its file.
        external: what becomes of external tensors: ``"move"`` (into the
            weights files), ``"keep"`` (the reference as it is) or
            ``"inline"`` (their bytes copied into the ``.onnx``).
        threshold: inline tensors of at least this many bytes move to the
            weights files; None: they all stay inline.
        inline_below: tensors of fewer bytes never go to the weights files,
            and external ones come back inline.
        spans: the inline bytes of the source ``.onnx`` scanned without its
            weights: references into them are inline tensors.

    Returns:
        A :class:`Plan`.

    Raises:
        FileNotFoundError: a referenced file is missing.
        ExternalDataError: a reference is unsafe or out of range, a length
            does not match dtype x dims, or a tensor cannot move.
    """
    plan = Plan()
    seen: set[SourceFile] = set()

    def moves(site: TensorSite, size: int) -> bool:
        if threshold is None or size < threshold or site.in_sparse:
            return False  # sparse tensors stay inline, as onnx keeps them
        return inline_below is None or size >= inline_below

    for site in sites:
        tensor = site.tensor
        if is_external(tensor):
            ref = resolve(site)
            if spans is not None and ref.source is spans.source and _in(spans, ref):
                if moves(site, ref.length):  # an inline tensor of the source .onnx
                    check_movable(site)
                    check_length(site, ref.length, ref.file)
                    plan.copy(ref, into_weights=True)
                else:
                    plan.copy(ref, into_weights=False)
                continue
            if ref.source not in seen:
                seen.add(ref.source)
                plan.sources.append(ref.source)
            if inline_below is not None and ref.length < inline_below:
                check_length(site, ref.length, ref.file)
                plan.copy(ref, into_weights=False)
                plan.inlined += 1
            elif external == KEEP:
                plan.kept.append(ref)
            else:  # sparse tensors inline: onnx never loads external sparse values
                plan.copy(ref, into_weights=external == MOVE and not site.in_sparse)
            continue
        if tensor.HasField("raw_data"):
            size = tensor_nbytes(tensor)
            size = len(tensor.raw_data) if size is None else size
            if moves(site, size):
                check_movable(site)
                plan.items.append(Item(site, size))
                continue
        else:
            size = tensor_nbytes(tensor)
            if not size:
                continue  # a string, or no data
            if moves(site, size):
                data = typed_bytes(site)  # float_data...: written as raw bytes
                if data is not None:
                    plan.items.append(Item(site, len(data), data=data))
                    plan.typed += 1
                    continue
        plan.kept_inline += 1
        plan.inline_bytes += size
    return plan


def _in(spans: InlineSpans, ref: TensorRef) -> bool:
    """True when ``ref`` reads one of the source ``.onnx``'s inline spans."""
    return (ref.offset, ref.length) in spans.spans
