"""Which files a call may replace: the destination rules, in one place.

Every writer (``save``, the shared save, ``align``, the CLI) names its
destinations and goes through these checks before it writes anything:

- the destination folder exists and the destination is not a folder;
- the weights file lies inside the destination model's folder *once
  symlinks are resolved*, and its recorded location is one onnx-light's own
  ``load`` accepts (so no writer makes a model its reader refuses);
- an existing destination is a regular file or a symlink (which is replaced,
  never written through); a device, FIFO or socket is refused;
- no destination is a file any source reference of the call reads, compared
  by identity (device + inode, following links, and the symlinks a reference
  went through). Only the declared in-place case (``align`` with the
  destination ``.onnx`` being the source ``.onnx``) may replace its sources:
  every byte is read from descriptors opened before the commit.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Sequence

from .._errors import ExternalDataError, shown
from .._read.external import check_location
from .._read.sources import SourceFiles, is_inside, kernel_path
from .readers import Listings, is_model_name, readers, stored_spelling

__all__ = [
    "check_targets",
    "destination_path",
    "is_in_place",
    "overwrite_hint",
    "real_entry",
    "target_identities",
    "weights_destination",
]


def destination_path(path: str | os.PathLike) -> str:
    """The absolute path of a destination file the caller names, its folder checked.

    Raises:
        IsADirectoryError: ``path`` ends with ``/`` or is an existing folder.
        FileNotFoundError: the folder does not exist.
        NotADirectoryError: it is not a folder.
    """
    path = os.fsdecode(path)
    if path.endswith(("/", os.sep)):
        raise IsADirectoryError(f"destination {shown(path)} ends with '/': not a file name")
    path = kernel_path(path)  # lnk/../m.onnx: where open() writes, not ./m.onnx
    destination_dir(path)
    return path


def destination_dir(path: str) -> str:
    """The folder of the destination file ``path``, which must exist.

    Raises:
        FileNotFoundError: the folder does not exist.
        NotADirectoryError: it is not a folder.
        IsADirectoryError: ``path`` itself is an existing folder.
    """
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.exists(folder):
        raise FileNotFoundError(
            f"destination folder {shown(folder)} does not exist: create it first "
            "(os.makedirs in Python, mkdir -p in a shell); nothing was written"
        )
    if not os.path.isdir(folder):
        raise NotADirectoryError(f"destination folder {shown(folder)} is not a folder")
    if os.path.isdir(path):
        raise IsADirectoryError(f"destination {shown(path)} is a folder, not a file name")
    return folder


def weights_destination(
    onnx_path: str, location: str | os.PathLike, others: Sequence[str] = ()
) -> tuple[str, str]:
    """Where a weights file goes, and the location to record for it.

    ``location`` is read by :func:`weights_target`'s rule (a path from the
    current folder that names the model's folder or a folder inside it, or
    else a path from the model's folder, as in onnx and onnx-ir); the file
    must lie inside the model's folder once symlinks are resolved, and is
    recorded relative to it.

    Args:
        onnx_path: the destination ``.onnx`` file.
        location: the weights file name or path.
        others: the call's other destination models (dedup writes several,
            in one folder): the weights file may be none of them either.

    Returns:
        ``(absolute path, location relative to the model folder)``.

    Raises:
        ValueError: the weights file would be outside the model folder, is
            the model file itself (or one of ``others``), has a name a location cannot record
            (not UTF-8, or one ``load`` would refuse), or ``location`` is
            ambiguous (see :func:`weights_target`).
    """
    location = os.fsdecode(location)
    folder = os.path.dirname(os.path.abspath(onnx_path))
    if not location or location.endswith(("/", os.sep)):
        raise ValueError(f"weights location {shown(location)} is not a file name")
    target = weights_target(folder, location)
    if not is_inside(target, folder):
        raise ValueError(
            f"weights file {shown(location)} is {shown(target)}: it must lie inside the model's folder "
            f"{shown(folder)} (a relative location is relative to that folder)"
        )
    destination_dir(target)
    entry = real_entry(target)
    for model in (onnx_path, *others):
        if entry == real_entry(model):  # the same name, spelled another way
            what = "itself" if model is onnx_path else f"{shown(model)}, a model the call writes"
            raise ValueError(f"weights file {shown(location)} cannot be the model file {what}")
    real_folder = os.path.realpath(folder)
    real_target = os.path.join(*entry)
    if not is_inside(real_target, real_folder):
        raise ValueError(
            f"weights file {shown(target)} resolves to {shown(real_target)}, outside the model's "
            f"folder {shown(real_folder)} (a symlinked folder?): the model could not be loaded"
        )
    recorded = os.path.relpath(target, folder).replace(os.sep, "/")
    try:
        recorded.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(
            f"weights file {shown(target)}: its name is not valid UTF-8, and ONNX records "
            "locations as UTF-8 strings; choose another name"
        ) from None
    try:
        check_location(recorded, f"weights file {shown(target)}")
    except ExternalDataError as e:
        raise ValueError(f"{e}; choose another name") from None
    return target, recorded


def weights_target(folder: str, location: str) -> str:
    """The file a weights path names, for a model in ``folder``: one rule for every writer.

    A weights path may be written as onnx writes it, from the model's folder
    (``save(m, "out/m.onnx", location="m.onnx.data")``), or as a path from
    the current folder (``location=os.path.join("out", "m.onnx.data")``):

    - an absolute path is that path;
    - a relative path whose folder, read from the current folder, is the
      model's folder or lies inside it (compared as folders, links resolved)
      names that place;
    - any other relative path is read from the model's folder.

    When both readings are possible places (both folders exist) and name
    different files, the path is ambiguous and refused. A path whose folder
    exists only when read from the current folder, outside the model's
    folder, is refused as outside (not read as a missing subfolder).

    Args:
        folder: the model's folder (absolute).
        location: the weights path, as the caller wrote it.

    Returns:
        The absolute path of the weights file (not yet checked to lie inside
        ``folder``).

    Raises:
        ValueError: ``location`` is ambiguous, or lies outside the model's
            folder read from the current folder: the message gives both readings.
    """
    if os.path.isabs(location):
        return kernel_path(location)
    by_model = kernel_path(os.path.join(folder, location))
    by_cwd = kernel_path(location)
    if by_cwd == by_model or real_entry(by_cwd) == real_entry(by_model):
        return by_model
    cwd_there = os.path.isdir(os.path.dirname(by_cwd))
    # a reading that leaves the model's folder is no place (it would be refused)
    model_there = os.path.isdir(os.path.dirname(by_model)) and is_inside(
        os.path.realpath(os.path.dirname(by_model)), os.path.realpath(folder)
    )
    if not is_inside(os.path.realpath(os.path.dirname(by_cwd)), os.path.realpath(folder)):
        if cwd_there and not model_there:  # meant from the current folder, surely
            raise ValueError(
                f"weights file {shown(location)} is {shown(by_cwd)} from the current folder: it "
                f"must lie inside the model's folder {shown(folder)} (from that folder it would "
                f"be {shown(by_model)}, whose folder does not exist)"
            )
        return by_model
    if cwd_there and model_there:
        raise ValueError(
            f"weights path {shown(location)} is ambiguous: from the current folder it is "
            f"{shown(by_cwd)}, from the model's folder {shown(folder)} it is {shown(by_model)}; "
            "pass an absolute path (os.path.join(folder, name) with an absolute folder)"
        )
    return by_model if model_there else by_cwd


def real_entry(path: str) -> tuple[str, str]:
    """``(resolved folder, name)``: the directory entry a path names, however spelled."""
    path = os.path.abspath(os.fsdecode(path))
    return os.path.realpath(os.path.dirname(path)), os.path.basename(path)


def is_in_place(src: str, dst: str) -> bool:
    """True when ``dst`` replaces the very model ``src`` names, and nothing else reads it.

    The same directory entry, a regular file with a single link: a symlink
    or a second hard link means another name still reads the old model (and
    its data), which an in-place re-align would break.
    """
    if real_entry(src) != real_entry(dst):
        return False
    try:
        st = os.lstat(dst)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_nlink == 1


def _identities(path: str) -> set[tuple[int, int]] | None:
    """Identities behind an existing destination (None when it does not exist).

    Raises:
        ValueError: it exists and is neither a regular file nor a symlink.
    """
    try:
        lst = os.lstat(path)
    except FileNotFoundError:
        return None
    ids = {(lst.st_dev, lst.st_ino)}
    if stat.S_ISLNK(lst.st_mode):
        try:
            st = os.stat(path)
            ids.add((st.st_dev, st.st_ino))
        except OSError:
            pass  # a dangling link: only the link is replaced
    elif stat.S_ISDIR(lst.st_mode):
        raise ValueError(
            f"destination {shown(path)} is a folder: refusing to replace it; move it away, "
            "or write to another folder"
        )
    elif not stat.S_ISREG(lst.st_mode):
        raise ValueError(
            f"destination {shown(path)} exists and is not a regular file (a device, FIFO or "
            "socket?): refusing to replace it"
        )
    return ids


def target_identities(path: str) -> set[tuple[int, int]]:
    """The identities a destination would replace (empty when it does not exist).

    Raises:
        ValueError: it exists and is neither a regular file nor a symlink.
    """
    return _identities(path) or set()


def check_targets(
    paths: list[str],
    files: SourceFiles,
    *,
    model: str | Sequence[str],
    in_place: bool = False,
    replaceable: Callable[[], set[tuple[int, int]]] | None = None,
    hint: str = "",
) -> None:
    """Refuse destinations that are not files, that hold bytes the call reads,
    or that another model of the folder reads.

    Args:
        paths: the destination files of the call.
        files: the call's opened source files.
        model: the destination ``.onnx`` (its own references do not count:
            it is replaced), or every destination model of a call that
            writes several.
        in_place: the declared in-place case: the destinations replace the
            very model being read, so they may be its sources.
        replaceable: when a destination is a source, the identities of the
            sources it may replace all the same (asked once, when needed:
            an in-place save may replace the model and its own weights).
        hint: what to do instead, appended to the error.

    Raises:
        ValueError: a destination exists and is not a regular file or a symlink.
        ExternalDataError: a destination is a file the call reads, or one
            another ``.onnx`` of the folder reads.
    """
    listings = Listings()
    folded: dict[str, object] | None = None
    allowed: set[tuple[int, int]] | None = None
    existing = []
    for path in paths:
        ids = _identities(path)
        if ids is None:
            continue
        existing.append(path)
        stored = stored_spelling(path, listings)
        if os.path.basename(stored) != os.path.basename(path):
            if folded is None:  # the sources as their folders store their names
                folded = {stored_spelling(p, listings): s for p, s in files.sources()}
            if stored in folded:  # even in place: never replace a file read under another name
                raise ExternalDataError(
                    f"destination {shown(path)} is {shown(stored)} on this filesystem (it does not "
                    f"tell upper from lower case), which this call reads: name it {shown(stored)}"
                )
        source = files.reader_of(ids)
        if in_place and source is not None and _never_replaced(path, model):
            raise ExternalDataError(
                f"destination {shown(path)} is a file this model reads and that other models "
                "or tools load for themselves (another .onnx, or a .safetensors): even in "
                "place it is never replaced; name the weights file otherwise"
            )
        if in_place:
            continue
        if source is None:
            continue
        if replaceable is not None:
            if allowed is None:
                allowed = replaceable()
            if source.identity in allowed:
                continue
        if source.label == "model":
            what = f"the model {shown(source.path)} it reads"
        else:
            what = f"{shown(source.path)}, the file holding the bytes of tensor {source.label}"
        raise ExternalDataError(
            f"destination {shown(path)}: this call would overwrite {what}, and leave the source "
            f"model broken{'; ' + hint if hint else ''}"
        )
    if existing:
        models = [model] if isinstance(model, str) else list(model)
        _check_other_readers(existing, models, listings)


def _never_replaced(path: str, model: str | Sequence[str]) -> bool:
    """A file no in-place call may replace though it reads it: another ``.onnx`` (a
    model whose inline bytes a view reads) or a ``.safetensors`` (other tools load it)."""
    models = [model] if isinstance(model, str) else list(model)
    if any(real_entry(path) == real_entry(m) for m in models):
        return False
    return is_model_name(os.path.basename(path)) or path.casefold().endswith(".safetensors")


def _check_other_readers(existing: list[str], models: list[str], listings: Listings) -> None:
    """Refuse to replace a file another model of the folder reads (a shared weights
    file, the ``.onnx`` whose inline bytes a view reads): it would break it.

    Raises:
        ExternalDataError: naming the file and the model that reads it.
    """
    skip = {stored_spelling(m, listings) for m in models}
    read, _ = readers(existing, os.path.dirname(os.path.abspath(models[0])), skip, listings)
    for path in existing:
        reader = read.get(path)
        if reader is not None:
            raise ExternalDataError(
                f"destination {shown(path)} is read by {shown(reader)}, another model of the folder: "
                "replacing it would break that model; write the new files under other "
                "names (the old ones stay for it)"
            )


def overwrite_hint(src: str, dst: str, verb: str = "re-align") -> str:
    """What to do when a destination would overwrite a file the call reads (``verb``:
    what the call does, in the message)."""
    if real_entry(src) != real_entry(dst):
        return (
            "give the new files other names, or pass the source .onnx as the destination "
            f"to {verb} it in place"
        )
    if os.path.islink(dst):  # a Hugging Face cache: links into blobs/ other snapshots share
        return (
            f"{shown(dst)} is a symbolic link (to {shown(os.path.realpath(dst))}), so other "
            f"names may read these files: it cannot be {verb}ed in place; {verb} it into a "
            "folder of your own"
        )
    return (
        f"{shown(dst)} has other hard links, which read these files: it cannot be {verb}ed "
        f"in place; {verb} it into a folder of your own"
    )
