"""Companion files: an exporter's other files, copied beside the models a writer commits.

A loader reads more than the models: optimum's ``config.json``,
onnxruntime-genai's ``genai_config.json``, the tokenizer files. A writer
given ``with_files`` copies them into its destination folder, each under its
own name, in its own commit:

- each file is a file (a folder is refused as one), not a file the source
  models are made of (a model, a weights file one of them reads: the call
  writes those itself), lies in the folder of a source model and follows the rule for
  that model's data files (:meth:`~onnx_light.onnx._read.sources.SourceFiles.data`,
  with the folders the model's resolver allows, any model of that folder):
  once links are resolved it lies inside the model's folder, or inside the
  folder of the model file's real path (a Hugging Face snapshot links its
  files into ``blobs/``), and it is a regular file with a single hard link.
  Any other file is refused by name before anything is written: a link to a
  file elsewhere on the machine never reaches an output folder;
- its bytes are read from the descriptor opened when it was checked and
  copied by the copy engine to a temporary file beside its destination,
  renamed with the models (:class:`~onnx_light.onnx._commit.atomic.AtomicFiles`):
  an error (a full disk) leaves nothing under a final name, and a failed
  rename is undone with the others;
- a file of that name already in the destination folder is replaced in the
  commit, whatever it holds: a copy an older run left, stale or truncated, is
  never kept (the writer checks the destinations as it checks every other,
  ``check_targets``);
- of several files with one name (onnxruntime-genai's folders each hold a
  ``genai_config.json``), the first is copied; the others are left out,
  and listed when their bytes differ (sizes, then bytes compared chunk by
  chunk from the descriptors opened when they were checked);
- a file whose destination is the file itself (the destination folder is its
  own) is already there: nothing is copied;
- onnxruntime-genai's ``genai_config.json`` names the model files it loads:
  when the call writes a model of its folder under another name
  (``fp32/model.onnx`` as ``fp32_model.onnx``), the copy names the new files
  (:mod:`~onnx_light.onnx._write.genai_config`; its bytes read from the
  checked descriptor before anything is written, the new ones written to the
  temporary file as a copy's are). Each folder's config then names its own
  models: the first is copied as ``genai_config.json`` (``og.Model(DIR)``
  loads its models), the others as ``FOLDER_genai_config.json``, ``FOLDER``
  their source folder's name (an overlay of the first:
  ``og.Config(DIR).overlay(text)``).
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from .._commit.atomic import AtomicFiles
from .._errors import shown
from .._read.external import Resolver
from .._read.sources import SourceFile, SourceFiles, identity, kernel_path
from .._system.files import pread_exact
from .copy import CopyEngine, pwrite_all
from .fs import copy_policy
from .genai_config import GENAI_CONFIG, renamed_config

__all__ = ["Companions"]


CHUNK = 1 << 20  # bytes compared at a time
OUTSIDE_FIX = (
    ": only files inside it are copied beside the models; if you trust the file, put a copy "
    "of it there in place of the link, else remove the link"
)


@dataclass(frozen=True)
class _Copy:
    """One file to copy: the path given, its checked and open source, its destination,
    and its new bytes when the copy is not the file's own (a config naming renamed
    models)."""

    path: str
    source: SourceFile
    target: str
    data: bytes | None = None


@dataclass
class Companions:
    """The files a writer copies beside its models, checked before anything is written.

    Attributes:
        copies: the files to copy, in the order given (one per name).
        left: the files left out, ``(file, the file copied under its name)``:
            another file of that name came first, with other bytes.
        rewritten: ``{destination: {old name: new name}}``: the configs copied
            naming the models the call renamed.
    """

    copies: list[_Copy] = field(default_factory=list)
    left: list[tuple[str, str]] = field(default_factory=list)
    rewritten: dict[str, dict[str, str]] = field(default_factory=dict)

    @classmethod
    def open(
        cls,
        paths: Sequence[str | os.PathLike],
        sources: Sequence[str],
        folder: str,
        files: SourceFiles,
        taken: Collection[str] = (),
        made_of: Mapping[tuple[int, int], str] | None = None,
        renames: Mapping[str, Mapping[str, str]] | None = None,
    ) -> Companions:
        """Check and open every file of ``paths``.

        Args:
            paths: the files to copy (``with_files``).
            sources: the source models of the call (absolute paths).
            folder: the destination folder.
            files: the call's source files: each file is opened there, once.
            taken: the destinations the call writes otherwise (its models):
                no file may be copied over one.
            made_of: the files the source models are made of (the models
                and the weights files they read), by identity, with what
                each is ("a weights file of model 'a.onnx'"): never copied.
            renames: ``{source folder: {model file name: its new name}}``:
                the models the call writes under another name, which a
                ``genai_config.json`` of that folder is made to name.

        Returns:
            The files to copy, and those left out.

        Raises:
            TypeError: ``paths`` is one path, not a list.
            ValueError: a file is a folder, is a model or a weights file of
                the call's sources, is not in the folder of a source model, is
                a ``genai_config.json`` naming a renamed model that is not
                JSON, or its destination is one the call writes otherwise.
            FileNotFoundError: a file does not exist.
            ExternalDataError: a file resolves outside its model's folders,
                is not a regular file or has several hard links.
        """
        if isinstance(paths, (str, bytes, os.PathLike)):
            raise TypeError("with_files is a list of paths, not one path")
        by_folder: dict[str, list[str]] = {}
        for src in sources:
            by_folder.setdefault(os.path.dirname(src), []).append(src)
        roots_of: dict[str, tuple[str, ...]] = {}
        firsts: dict[str, _Copy] = {}
        later: list[_Copy] = []
        rewritten: dict[str, dict[str, str]] = {}
        for given in paths:
            path = kernel_path(given)
            if os.path.isdir(path):
                raise ValueError(
                    f"{shown(path)} is a folder, not a file: with_files copies files beside "
                    "the models; name the files of it to copy, or leave it out"
                )
            home, name = os.path.split(path)
            models = by_folder.get(home)
            if models is None:
                raise ValueError(
                    f"{shown(path)} is not in the folder of a source model "
                    f"({', '.join(shown(f) for f in by_folder)}): only the files beside the "
                    "models are copied; copy it yourself, or leave it out"
                )
            if home not in roots_of:  # what the references of its models may reach
                roots_of[home] = tuple(
                    dict.fromkeys(
                        root
                        for model in models
                        for root in Resolver(home, files, model=files.model(model)).roots
                    )
                )
            try:
                source = files.data(
                    home, roots_of[home], name, name, noun="copying", kind="file", fix=OUTSIDE_FIX
                )
            except FileNotFoundError:
                if not os.path.islink(path):
                    raise
                raise FileNotFoundError(
                    f"copying {name}: {shown(path)} is a link to {shown(os.readlink(path))}, "
                    "which does not exist: remove the link, or put the file it names there"
                ) from None
            what = (made_of or {}).get(source.identity)
            if what is not None:
                raise ValueError(
                    f"{shown(path)} is {what}: with_files copies an exporter's other files "
                    "(configs, tokenizers); the call writes the models and their weights "
                    "itself: leave it out"
                )
            entry = _Copy(path, source, os.path.join(folder, name))
            renamed = (renames or {}).get(home)
            if name == GENAI_CONFIG and renamed:
                entry, names = _renamed(entry, renamed, files)
                if names and name in firsts:  # one config per folder: named after it
                    name = f"{os.path.basename(home)}_{name}"
                    entry = _Copy(path, source, os.path.join(folder, name), entry.data)
                if names:
                    rewritten[entry.target] = names
            if name in firsts:
                later.append(entry)
            else:
                firsts[name] = entry
        left = _differing(later, firsts, files)
        copies = [c for c in firsts.values() if identity(c.target) != c.source.identity]
        kept = {c.target for c in copies}
        found = cls(copies, left, {t: n for t, n in rewritten.items() if t in kept})
        found.refuse(taken)
        return found

    def refuse(self, taken: Collection[str]) -> None:
        """Refuse a file whose destination the call writes otherwise (a model, weights).

        Raises:
            ValueError: naming the file and the destination.
        """
        for c in self.copies:
            if c.target in taken:
                raise ValueError(
                    f"{shown(c.path)} would be copied to {shown(c.target)}, which this call "
                    "writes otherwise: leave it out, or give that output another name"
                )

    @property
    def targets(self) -> list[str]:
        """The destinations written, in order."""
        return [c.target for c in self.copies]

    def write(self, out: AtomicFiles, files: SourceFiles, chunk_size: int) -> None:
        """Copy every file to its temporary name in ``out`` (renamed at its commit).

        Raises:
            TruncatedFileError: a file shrank since it was checked.
            ExternalDataError: a file changed since it was checked.
            OSError: a full disk or an I/O error (nothing is committed then).
        """
        for c in self.copies:
            fd = out.create(c.target)
            if c.data is not None:
                pwrite_all(fd, c.data, 0)
            elif c.source.size:
                with (
                    files.lease(c.source) as src,
                    CopyEngine(chunk_size, policy=copy_policy(fd)) as engine,
                ):
                    engine.copy(src, 0, fd, 0, c.source.size, f"copying {shown(c.path)}")
            out.finish(fd)


def _renamed(
    entry: _Copy, renames: Mapping[str, str], files: SourceFiles
) -> tuple[_Copy, dict[str, str]]:
    """``entry`` with the bytes of its config naming the renamed models, read from the
    descriptor opened when it was checked (and the names replaced); as it is when its
    config names none of them."""
    with files.lease(entry.source) as fd:
        data = pread_exact(fd, entry.source.size, 0, shown(entry.path))
    found = renamed_config(data, renames, shown(entry.path))
    if found is None:
        return entry, {}
    return _Copy(entry.path, entry.source, entry.target, found[0]), found[1]


def _differing(
    later: list[_Copy], firsts: dict[str, _Copy], files: SourceFiles
) -> list[tuple[str, str]]:
    """The files of ``later`` whose bytes differ from the first file of their name."""
    left = []
    for c in later:
        first = firsts[os.path.basename(c.target)]
        if not _same_bytes(c.source, first.source, files):
            left.append((c.path, first.path))
    return left


def _same_bytes(a: SourceFile, b: SourceFile, files: SourceFiles) -> bool:
    """True when two checked files hold the same bytes (read a chunk at a time)."""
    if a.identity == b.identity:
        return True
    if a.size != b.size:
        return False
    with files.lease(a) as fa, files.lease(b) as fb:
        for start in range(0, a.size, CHUNK):
            n = min(CHUNK, a.size - start)
            if pread_exact(fa, n, start, shown(a.path)) != pread_exact(fb, n, start, shown(b.path)):
                return False
    return True
