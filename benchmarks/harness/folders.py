"""The files an operation writes: its destination emptied, their size, their contents."""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Iterable

__all__ = ["empty_folder", "file_digests", "mib_on_disk"]

MiB = 2**20


def empty_folder(path: str, keep: Iterable[str] = ()) -> str:
    """Create the folder ``path``, or remove everything in it but ``keep``.

    Called before each run of a save, so that its destination does not exist
    yet, as in a first save: replacing a large file also costs its deletion,
    which is not what is measured.

    Args:
        path: the folder.
        keep: names of entries to leave in place (the source model, when
            the outputs are written beside it).

    Returns:
        ``path``.

    Raises:
        OSError: ``path`` is not a folder, or an entry cannot be removed.
    """
    os.makedirs(path, exist_ok=True)
    keep = set(keep)
    with os.scandir(path) as entries:
        for entry in entries:
            if entry.name in keep:
                continue
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)
            else:
                os.remove(entry.path)
    return path


def mib_on_disk(*paths: str) -> float:
    """The bytes of files and folders (every file under a folder), in MiB.

    Lengths of the files (:func:`os.path.getsize`), not the blocks the
    filesystem allocated. A path that does not exist counts 0: the weights
    file a save had no need to write.

    Args:
        paths: files or folders.

    Returns:
        Their total size in MiB.
    """
    total = 0
    for path in paths:
        if os.path.isdir(path):
            for root, _, names in os.walk(path):
                total += sum(os.path.getsize(os.path.join(root, n)) for n in names)
        elif os.path.exists(path):
            total += os.path.getsize(path)
    return total / MiB


def file_digests(folder: str, names: Iterable[str] | None = None) -> dict[str, str]:
    """The sha256 of the files of ``folder``, by name (its subfolders left out).

    Taken before and after an operation, the two are equal when it changed
    none of these files.

    Args:
        folder: the folder.
        names: the files to read (None: every file in it).

    Returns:
        ``{name: hex digest}``.

    Raises:
        OSError: a named file cannot be read.
    """
    if names is None:
        names = sorted(n for n in os.listdir(folder) if os.path.isfile(os.path.join(folder, n)))
    digests = {}
    for name in names:
        sha = hashlib.sha256()
        with open(os.path.join(folder, name), "rb") as f:
            while chunk := f.read(MiB):
                sha.update(chunk)
        digests[name] = sha.hexdigest()
    return digests
