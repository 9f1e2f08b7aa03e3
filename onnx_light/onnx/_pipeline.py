"""The write pipeline: the stages every writer goes through, written once.

A writer (``save``, the shared save, align, dedup, ``save_edited``, the
converter) is a short recipe over one :class:`Pipeline`, whose settings are one
:class:`~onnx_light.onnx._options.WriteOptions`, checked when it was built:

1. **add the models**: a source scanned without its weights and planned
   (:meth:`Pipeline.add_source`), or a model held in memory
   (:meth:`Pipeline.add_model`); the one planner says where each tensor's
   bytes go;
2. **lay out** (:meth:`Pipeline.lay_out`): the weights files named (the
   caller's name; in place, the one a source's weights already have; else
   ``DST.data``), one file or shards, an offset for each tensor;
3. **check the targets** (:meth:`Pipeline.check_targets`): which files the
   call may replace (``_commit/targets.py``);
4. **write** (:meth:`Pipeline.write`): the weights files, each tensor placed,
   every ``.onnx`` serialized, and one commit of every file (the one ending,
   ``_write/finish.py``); then, for a source replaced in place, the **prune**
   of the files no model reads any more;
5. the **result** (:meth:`Pipeline.result`): a :class:`WriteResult`, the
   verb's own fields beside the common ones.

A writer adds only its own step between them: dedup's content comparison,
the converter's graph pass and casts, align's "already as written" shortcut,
``save_edited``'s retype detection.

A writer whose destination may be another folder brings the exporter's other
files (``with_files``) in one line, once its models are added:
``run.copy_files(with_files)`` (:meth:`Pipeline.copy_files`); the pipeline
checks them before anything is read, commits them with the models, and its
result fills the verb's ``files_copied``, ``files_left`` and
``files_rewritten``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from dataclasses import dataclass, field, fields

import onnx

from ._commit.atomic import AtomicFiles, folder_lock
from ._commit.prune import remove, unreferenced
from ._commit.targets import check_targets, is_in_place, target_identities, weights_destination
from ._errors import ExternalDataError, shown
from ._options import ONNX_IR, TRANSFORMERS_JS, WriteOptions, check_alignment, check_num_threads
from ._plan.planner import Item, Plan
from ._plan.serialize import Spliced, strip_raw_data
from ._plan.source_plan import KEEP_HINT, plan_in_memory, plan_model
from ._read.external import InlineSpans, TensorRef, place
from ._read.scan import PROTOBUF_LIMIT, model_files, ref_key, scan_model
from ._read.sources import SourceFiles, identity
from ._system.gc import paused_gc
from ._write.companions import Companions
from ._write.convert import converted_bytes
from ._write.finish import finish
from ._write.shards import WeightsFiles, kept_weights

__all__ = ["ONNX_SAVE_THRESHOLD", "Model", "Pipeline", "WriteResult"]


ONNX_SAVE_THRESHOLD = 1024  # the size threshold when the settings leave it to the writer
SHARED_WEIGHTS = "weights.data"  # the default name of the file several models share
SAVE_HINT = "save elsewhere, or re-align in place with align_external_data_streaming(src, src, ...)"
FILES_HINT = "leave it out of the files to copy, or write the models to another folder"


@dataclass(frozen=True, eq=False, repr=False, kw_only=True)
class WriteResult(int):
    """What a writer wrote; as an int, ``bytes_written``.

    Every writer returns one: :func:`~onnx_light.onnx.save`,
    :func:`~onnx_light.onnx.save_model_with_shared_external_data` and
    :func:`~onnx_light.onnx.save_edited` this class,
    :func:`~onnx_light.onnx.align_external_data_streaming`,
    :func:`~onnx_light.onnx.deduplicate_external_data` and
    :func:`~onnx_light.onnx.convert_float_to_float16` a subclass with their own
    fields beside these. It is an int so that code written for the original
    API keeps working: ``align_external_data_streaming`` and the shared save
    returned that number (``print(result)`` prints it, ``result == n``
    compares it).

    Attributes:
        bytes_written: the bytes of the weights files the call wrote, padding
            included (0 when it wrote none).
        weights_paths: the weights files the new models read that the call
            wrote (several when sharded, none when no tensor went there).
        unreferenced: weights files the replaced models read that no
            ``.onnx`` of their folder references any more (a call that
            replaces its source in place; else empty).
        removed: those of them deleted (``remove_unreferenced``).

    .. versionadded:: 0.1
    """

    bytes_written: int = 0
    weights_paths: list[str] = field(default_factory=list)
    unreferenced: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)

    def __new__(cls, *args, **values):
        # the int's value: the keyword at construction; the number itself when copied
        return super().__new__(cls, values.get("bytes_written", args[0] if args else 0))

    __str__ = int.__repr__  # print(result), f"{result}": the number

    def __repr__(self) -> str:
        shown_fields = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in fields(self))
        return f"{type(self).__name__}({shown_fields})"


@dataclass
class Model:
    """One model a call writes.

    Attributes:
        dst: its destination ``.onnx``.
        proto: the model (the call's own when scanned, else the caller's).
        plan: where its tensors' bytes go.
        src: the source it was scanned from, or read from (the converter).
        in_place: ``dst`` replaces ``src`` itself: its old files may be
            replaced, and those it no longer reads are listed after the commit.
        scanned: scanned by the call (its references are all checked, their
            files the only ones replaced in place); else held in memory (a
            reference into a file the call replaces is copied instead).
        own: the call may place its tensors in ``proto`` itself; else each is
            serialized from a placed copy (the caller's model is not modified).
        update: once committed, the caller's tensors written to the weights
            files become references to them (the shared save).
        hint: what to do when a destination is a file the call reads.
        threshold: the size threshold applied (align's result says it).
    """

    dst: str
    proto: onnx.ModelProto
    plan: Plan
    src: str | None = None
    in_place: bool = False
    scanned: bool = True
    own: bool = True
    update: bool = False
    hint: str = ""
    threshold: int | None = None
    _files: tuple[set, set] | None = None  # the replaced model's files and ranges (in memory)


class Pipeline:
    """One call of a writer: its settings, its source files, its models, their weights.

    Args:
        options: the settings (checked when they were set).
        dsts: the destination models, in the order they are added.
        weights: the weights file the caller names, or None for the default
            name; checked now, so a bad name fails before anything is read.
        single_file: no weights file: every tensor inline (``save`` without a
            location).
        too_large: what to do when a ``.onnx`` would exceed 2 GiB.

    Raises:
        ValueError: the weights file cannot be written where it is named.
    """

    def __init__(
        self,
        options: WriteOptions,
        dsts: Sequence[str],
        weights: str | os.PathLike | None = None,
        *,
        single_file: bool = False,
        too_large: str = "store more tensors in the weights file",
    ) -> None:
        if weights is not None:
            weights_destination(dsts[0], weights, dsts[1:])
        self.options = options
        self.dsts = list(dsts)
        self.location = weights
        self.single_file = single_file
        self.too_large = too_large
        self.threshold = options.size_threshold
        if self.threshold is None:
            self.threshold = ONNX_SAVE_THRESHOLD
        self.progress = options.progress
        self.drop_behind = options.drop_behind
        self.models: list[Model] = []
        self.weights: WeightsFiles | None = None
        self.others: list[tuple[object, str]] = []  # other files the commit writes, their hint
        self.companions: Companions | None = None  # with_files, once copy_files is called
        self.written = 0
        self.unreferenced: list[str] = []
        self.removed: list[str] = []
        self.files = SourceFiles()
        self.inline: InlineSpans | None = None  # the inline bytes scan() made references

    def __enter__(self) -> Pipeline:
        self._context = contextlib.ExitStack()
        self._context.enter_context(paused_gc())  # objects per tensor, no cycle to collect
        self._context.enter_context(self.files)  # every source closed on the way out
        return self

    def __exit__(self, *exc) -> None:
        self._context.__exit__(*exc)

    # -- 1. the models ---------------------------------------------------------------

    def add_source(
        self,
        src: str,
        dst: str,
        *,
        threshold: int | None = None,
        inline_below: int | None = None,
        hint: str = "",
    ) -> Model:
        """Scan ``src`` without its weights and plan every tensor (every external one
        moves; inline ones of ``threshold`` bytes or more too, None: see
        :func:`~onnx_light.onnx._plan.source_plan.plan_model`)."""
        proto, plan, applied = plan_model(src, self.files, threshold, inline_below)
        model = Model(dst, proto, plan, src, is_in_place(src, dst), hint=hint, threshold=applied)
        self.models.append(model)
        return model

    def scan(self, src: str, threshold: int) -> onnx.ModelProto:
        """A source's metadata without its inline weights of ``threshold`` bytes or more,
        under its folder's shared lock: a model a writer changes before adding it (the
        converter's graph pass). The spans of the inline bytes it made references are
        kept in ``self.inline`` (a writer tells them from the source's external ones)."""
        with folder_lock(os.path.dirname(src), shared=True):
            model, self.inline = scan_model(src, self.files, threshold)
        return model

    def add_model(
        self,
        proto: onnx.ModelProto,
        dst: str,
        *,
        keep: bool,
        base: str | os.PathLike | None = None,
        casts: dict | None = None,
        src: str | None = None,
        own: bool = False,
        update: bool = False,
        hint: str = SAVE_HINT,
        keep_hint: str = KEEP_HINT,
        source_size=None,
    ) -> Model:
        """Plan a model held in memory.

        Args:
            proto: the model.
            dst: its destination.
            keep: keep its external references as they are (checked from
                ``dst``'s folder; a failure says ``keep_hint``); else copy
                their bytes, read from ``base`` (a folder, or the ``.onnx``
                they were loaded from; None: ``dst``'s folder).
            casts: ``{tensor path: Cast}``: references whose bytes change dtype
                on the way (into the weights files).
            src: the source it was read from (the converter: in place when
                ``dst`` is it).
            own: its tensors may be placed in ``proto`` itself.
            update: once committed, its tensors written to the weights files
                become references to them.
            hint: what to do when a destination is a file the call reads.
            source_size: gives the byte size an inline tensor had in the
                source when the writer changed it in memory (None for the
                others): the size threshold compares it.

        Raises:
            TypeError: ``proto`` is not a ModelProto.
            FileNotFoundError, ExternalDataError: a reference does not resolve.
        """
        if not isinstance(proto, onnx.ModelProto):
            raise TypeError(f"model must be an onnx.ModelProto, got {type(proto).__name__}")
        threshold = None if self.single_file else self.threshold
        plan = plan_in_memory(
            proto,
            os.path.dirname(dst),
            self.files,
            keep=keep,
            base=base,
            casts=casts,
            threshold=threshold,
            keep_hint=keep_hint,
            source_size=source_size,
        )
        in_place = src is not None and is_in_place(src, dst)
        model = Model(
            dst, proto, plan, src, in_place, scanned=False, own=own, update=update, hint=hint
        )
        self.models.append(model)
        return model

    @property
    def items(self) -> list[Item]:
        """Every model's tensors for the weights files, in order."""
        return [item for model in self.models for item in model.plan.items]

    def copy_files(self, with_files: Sequence[str | os.PathLike]) -> Companions:
        """Copy ``with_files`` (an exporter's config and tokenizer files) beside the
        models, in the commit: the one way every writer brings them.

        Call it once the models are added, before anything is read: each file is
        checked and opened now (:meth:`Companions.open
        <onnx_light.onnx._write.companions.Companions.open>`: never a source
        model or a weights file it reads, never a file from outside a source
        model's folder, nothing that is not a regular file), refused over a
        weights file when the targets are checked, written with the models;
        a ``genai_config.json`` of a folder whose models the call renames names
        the new files. :meth:`result` then fills ``files_copied``,
        ``files_left`` and ``files_rewritten``.

        Raises:
            TypeError, ValueError, FileNotFoundError, ExternalDataError: a file
                refused, by name (see :meth:`Companions.open
                <onnx_light.onnx._write.companions.Companions.open>`).
        """
        sources = [m.src for m in self.models if m.src is not None]
        renames: dict[str, dict[str, str]] = {}
        for model in self.models:
            if model.src is not None:
                old, new = os.path.basename(model.src), os.path.basename(model.dst)
                if old != new:
                    renames.setdefault(os.path.dirname(model.src), {})[old] = new
        self.companions = Companions.open(
            with_files,
            sources,
            os.path.dirname(self.dsts[0]),
            self.files,
            self.dsts,
            self._made_of(),
            renames,
        )
        self.also_write(self.companions, FILES_HINT)
        return self.companions

    def _made_of(self) -> dict[tuple[int, int], str]:
        """The files the source models are made of, by identity: each model, and the
        weights files it reads (what ``with_files`` never copies)."""
        made_of: dict[tuple[int, int], str] = {}
        for model in self.models:
            if model.src is None:
                continue
            name = shown(model.src)
            itself = identity(model.src)  # a source of its own inline bytes, too
            if itself is not None:
                made_of.setdefault(itself, f"the source model {name}")
            for source in model.plan.sources:
                made_of.setdefault(source.identity, f"a weights file of model {name}")
        return made_of

    # -- 2. the layout ---------------------------------------------------------------

    def lay_out(self, items: list[Item] | None = None) -> WeightsFiles | None:
        """Name the weights files and place every item (``items``: those the call
        writes, when not every model's, e.g. dedup's one per content).

        A model held in memory saved over the files it was loaded from (``load``
        with ``load_external_data=False``, edit, ``save`` to the same path) has the
        references it keeps into a file the call replaces copied instead (read from
        the descriptors opened now, before the commit), and is laid out again.

        Raises:
            ValueError: a weights name cannot be written, or a single file would
                exceed 2 GiB.
        """
        naming = None if self.single_file else self._name_weights()
        model = self.models[0]
        kept = [] if model.scanned else list(model.plan.kept)
        replaced: set[tuple[int, int]] = set()
        while True:
            if not self.single_file:
                self.weights = WeightsFiles(
                    self.items if items is None else items,
                    check_alignment(self.options.alignment),  # 0: dense, as 1
                    self.dsts[0],
                    self.location,
                    self.options.max_shard_size,
                    naming,
                )
            targets = [model.dst, *(self.weights.paths if self.weights is not None else [])]
            for target in targets if kept else ():
                replaced |= target_identities(target)
            moved = [ref for ref in kept if ref.source.identity in replaced]
            if not moved:
                break
            self._check_own(model, moved)
            kept = [ref for ref in kept if ref.source.identity not in replaced]
            for ref in moved:
                model.plan.copy(ref, into_weights=not self.single_file)
        if self.single_file and model.plan.inline_bytes > PROTOBUF_LIMIT:
            raise ValueError(
                f"model for {shown(model.dst)} holds {model.plan.inline_bytes} bytes of tensor "
                "data, over protobuf's 2 GiB limit: pass location= to store the weights in a "
                "second file"
            )
        return self.weights

    def _name_weights(self) -> str:
        """The weights name (the caller's, else the default) and the shard naming."""
        naming = self.options.shard_naming
        if self.location is not None:
            return naming or ONNX_IR
        dst, others = self.dsts[0], self.dsts[1:]
        followed = None
        if all(m.scanned and m.in_place for m in self.models) and naming != TRANSFORMERS_JS:
            kept = [source for m in self.models for source in m.plan.sources]
            followed = kept_weights(dst, kept, others, self.items, self.files)
        if followed is not None:  # in place, the exporter's names stay
            self.location, naming = followed[0], naming or followed[1]
        elif others:
            self.location = os.path.join(os.path.dirname(dst), SHARED_WEIGHTS)
        else:
            self.location = dst + ("_data" if naming == TRANSFORMERS_JS else ".data")
        weights_destination(dst, self.location, others)
        return naming or ONNX_IR

    # -- 3. the targets --------------------------------------------------------------

    def also_write(self, other, hint: str) -> None:
        """Other files the commit writes (dedup's ``with_files``): ``other.targets``,
        checked with ``hint``, written by ``other.write(out, files, chunk_size)``."""
        self.others.append((other, hint))

    def check_targets(self) -> None:
        """Refuse destinations that are not files, that hold bytes the call reads (but
        a source replaced in place), or that another model of the folder reads.

        Raises:
            ValueError: a destination exists and is not a regular file or a symlink.
            ExternalDataError: naming the destination and what reads it.
        """
        paths = self.weights.paths if self.weights is not None else []
        in_place = all(m.in_place for m in self.models)
        for model in self.models:
            if model.scanned:
                check_targets(
                    [*paths, model.dst],
                    self.files,
                    model=self.dsts,
                    in_place=in_place,
                    hint=model.hint,
                )
            else:
                check_targets(
                    [model.dst, *paths],
                    self.files,
                    model=model.dst,
                    replaceable=lambda model=model: self._own_files(model),
                    hint=model.hint,
                )
        if self.companions is not None:  # never over a weights file the call writes
            self.companions.refuse(paths)
        for other, hint in self.others:
            check_targets(other.targets, self.files, model=self.dsts, hint=hint)

    def _own_files(self, model: Model) -> set[tuple[int, int]]:
        """The files the destination ``.onnx`` (which a save replaces) and its references
        are: those an in-place save may replace."""
        if model._files is None:
            model._files = model_files(model.dst, self.files)
        return model._files[0]

    def _check_own(self, model: Model, refs: list[TensorRef]) -> None:
        """References into the files of the model replaced must be ranges it has: a
        model loaded elsewhere would otherwise read the bytes being replaced.

        Raises:
            ExternalDataError: naming the tensor, the file and the range.
        """
        own = self._own_files(model)
        for ref in refs:
            if ref.source.identity in own and ref_key(ref) not in model._files[1]:
                raise ExternalDataError(
                    f"tensor {ref.site.label}: its bytes [{ref.offset}, {ref.offset + ref.length})"
                    f" of {shown(ref.file)} are not a tensor of {shown(model.dst)}, which this "
                    "save replaces: was the model loaded from another file? Save it elsewhere"
                )

    # -- 4. the writing, the one ending, the prune ----------------------------------------

    def write(self) -> None:
        """Write the weights files, place every tensor, write every ``.onnx`` and commit
        them together; then list (and, asked, delete) the files a model replaced in
        place no longer reads.

        Raises:
            ValueError: a model cannot be serialized, or would exceed 2 GiB.
            OSError: disk full or I/O error; nothing is committed then.
        """
        options, weights = self.options, self.weights
        outputs = weights.outputs if weights is not None else []
        chunk_size = options.chunk_size
        with AtomicFiles(durable=options.durable) as out:
            others = [path for other, _ in self.others for path in other.targets]
            out.reserve([*outputs, *others, *self.dsts])
            if weights is not None:
                threads = check_num_threads(options.num_threads)
                self.written = weights.write(
                    out, self.files, threads, chunk_size, self.progress, self.drop_behind
                )
            elif self.progress is not None:
                self.progress(0, 0)
            for other, _ in self.others:
                other.write(out, self.files, chunk_size)
            subs = self._placed()
            ending = [(m.dst, m.proto, subs[i]) for i, m in enumerate(self.models)]
            finish(out, ending, self.files, chunk_size, self.too_large)
        for model in self.models:
            if model.update and weights is not None:
                for item, (location, offset) in zip(weights.items, weights.placement, strict=True):
                    place(item.site.tensor, location, offset, item.size, item.extra)
        self._prune(outputs)

    def _placed(self) -> list[dict]:
        """Each model's substitutions by tensor path: inline bytes spliced from their
        source (never read); a tensor of the weights files placed in the model itself
        when the call owns it, else a placed copy."""
        weights = self.weights
        placement = zip(weights.items, weights.placement, strict=True) if weights else ()
        owner = {id(item.site.tensor): model for model in self.models for item in model.plan.items}
        subs: list[dict] = [{} for _ in self.models]
        index = {id(model): i for i, model in enumerate(self.models)}
        for item, (location, offset) in placement:
            model = owner.get(id(item.site.tensor))
            if model is None or model.own:
                place(item.site.tensor, location, offset, item.size, item.extra)
            else:
                sub = strip_raw_data(item.site.tensor)
                place(sub, location, offset, item.size, item.extra)
                subs[index[id(model)]][item.site.path] = sub
        for i, model in enumerate(self.models):
            for ref in model.plan.inline:
                inline = strip_raw_data(ref.site.tensor)
                if ref.cast is None:
                    subs[i][ref.site.path] = Spliced(inline, ref)
                else:  # converted in memory (a sparse tensor's values: small)
                    inline.raw_data = converted_bytes(ref, self.files)
                    subs[i][ref.site.path] = inline
        return subs

    def _prune(self, outputs: list[str]) -> None:
        """In place: the weights files the old models read that no ``.onnx`` of their
        folder references now; deleted when the settings ask."""
        replaced = [m for m in self.models if m.in_place]
        if not replaced:
            return
        with folder_lock(os.path.dirname(replaced[0].dst)):  # one folder: every destination's
            for model in replaced:
                for path in unreferenced(model.dst, model.plan.sources, outputs):
                    if path not in self.unreferenced:
                        self.unreferenced.append(path)
            if self.options.remove_unreferenced:
                self.removed = remove(self.unreferenced)

    # -- 5. the result -------------------------------------------------------------------

    def result(self, cls: type[WriteResult] = WriteResult, **extras: object) -> WriteResult:
        """``cls`` with the common fields, and the verb's ``extras`` beside them."""
        values: dict[str, object] = {
            "bytes_written": self.written,
            "weights_paths": list(self.weights.outputs if self.weights is not None else []),
            "unreferenced": list(self.unreferenced),
            "removed": list(self.removed),
        }
        if self.companions is not None:
            values["files_copied"] = self.companions.targets
            values["files_left"] = list(self.companions.left)
            values["files_rewritten"] = dict(self.companions.rewritten)
        values.update(extras)
        return cls(**values)
