"""Which models of a folder read which files, found from their metadata.

A weights file may be shared: a variant saved with
:func:`~onnx_light.onnx.save_model_with_shared_external_data` reads the first
model's weights, a model loaded with ``skip_raw_data`` and saved as it is
reads the bytes inside another ``.onnx``. Before a call replaces an existing
file, and before it deletes one it left behind, it asks which ``.onnx`` of
the folder (and of the folders between it and the file) reads it.

Files, not names: a model reads a file when one of its references resolves
to it, compared by identity (device and inode, links followed: a symbolic
link or a hard link in the folder is the file it names), and by name as its
folder stores it (:func:`stored_spelling`: on a filesystem that does not
tell upper from lower case, ``M.DATA`` in a model is ``m.data`` on disk; on
FUSE two spellings of one file may give two inode numbers, so names are
compared too).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from .._read.external import read_entries
from .._read.scan import scan_model
from .._read.sources import SourceFiles, identity, is_inside
from .._read.tensors import is_external, iter_tensors

__all__ = ["Listings", "is_model_name", "readers", "stored_spelling"]


@dataclass
class Listings:
    """The names each folder holds, listed once per call."""

    names: dict[str, set[str]] = field(default_factory=dict)

    def of(self, folder: str) -> set[str]:
        """The names in ``folder`` (empty when it cannot be listed)."""
        known = self.names.get(folder)
        if known is None:
            try:
                known = set(os.listdir(folder))
            except OSError:
                known = set()
            self.names[folder] = known
        return known


def stored_spelling(path: str, listings: Listings) -> str:
    """The real path of ``path`` with its name as its folder stores it.

    ``path`` itself (folders resolved), or, where the filesystem does not
    tell upper from lower case (FAT, exFAT, casefold ext4), the one entry it
    matched. Through FUSE two spellings of one file give two inode numbers,
    so identities alone cannot tell that ``M.ONNX.DATA`` is ``m.onnx.data``.
    """
    folder, name = os.path.split(os.path.abspath(path))
    folder = os.path.realpath(folder)
    names = listings.of(folder)
    if name not in names:
        matches = [n for n in names if n.casefold() == name.casefold()]
        if len(matches) == 1:
            name = matches[0]
    return os.path.join(folder, name)


def is_model_name(name: str) -> bool:
    """True for a ``.onnx`` file name, in any case."""
    return name.casefold().endswith(".onnx")


def files_read_by(model_path: str, listings: Listings) -> set[str]:
    """The files ``model_path`` references, as stored (its own inline bytes left out).

    Raises:
        ValueError, OSError: the model cannot be read.
    """
    folder = os.path.dirname(model_path)
    with SourceFiles() as files:
        model, spans = scan_model(model_path, files)
    locations = set()
    for site in iter_tensors(model):
        if is_external(site.tensor):
            entries = read_entries(site)
            if not spans.holds(entries):
                locations.add(entries["location"])
    # each location resolved once: 200,000 tensors share a handful of files
    return {stored_spelling(os.path.join(folder, loc), listings) for loc in locations}


def readers(
    paths: list[str], root: str, skip: set[str], listings: Listings
) -> tuple[dict[str, str], list[str]]:
    """The models that read ``paths``: every ``.onnx`` of ``root``, of the folders
    between ``root`` and each path, and of the folders above ``root`` (a model
    there may record ``sub/w.data``), but those in ``skip``.

    Args:
        paths: the files asked about.
        root: the folder of the model the call is about.
        skip: models whose references do not count (stored spellings): the
            model the call replaces.
        listings: the call's folder listings.

    Returns:
        ``(reader of each path read, by stored spelling; the models that could
        not be read)``.
    """
    wanted = {stored_spelling(p, listings): p for p in paths}
    by_identity = {}
    for stored, path in wanted.items():
        ident = identity(stored)
        if ident is not None:
            by_identity.setdefault(ident, path)
    root = os.path.realpath(root)
    folders = {root}
    for path in wanted:
        folder = os.path.dirname(path)
        while is_inside(folder, root) and folder not in folders:
            folders.add(folder)
            folder = os.path.dirname(folder)
    folder = root  # a model above may reference sub/w.data: every folder up to /
    while os.path.dirname(folder) != folder:
        folder = os.path.dirname(folder)
        folders.add(folder)
    found: dict[str, str] = {}
    unreadable: list[str] = []
    for folder in sorted(folders):
        for name in sorted(listings.of(folder)):
            model = os.path.join(folder, name)
            if not is_model_name(name) or model in skip or not os.path.isfile(model):
                continue
            try:
                read = files_read_by(model, listings)
            except (ValueError, OSError):
                unreadable.append(model)
                continue
            for path in read:
                hit = wanted.get(path) or by_identity.get(identity(path))
                if hit is not None:
                    found.setdefault(hit, model)
    return found, unreadable
