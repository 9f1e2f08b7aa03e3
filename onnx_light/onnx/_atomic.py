"""Destination files: where they go, and atomic writes.

Every output is first written to a temporary file in the destination folder,
named ``.<final name>.<random>.onnx-light-tmp``, and moved over its final name
with ``os.replace`` once everything succeeded. On any error the temporary
files are removed, so nothing appears under a destination name and existing
files there are untouched. A process killed mid-write can leave such a
temporary file behind: it is safe to delete.

Several files (an ``.onnx`` and its weights) are replaced one after the other
while holding an exclusive ``flock`` on their folder, so two saves racing to
the same destination leave one complete pair, never the ``.onnx`` of one and
the weights of the other.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator

TMP_SUFFIX = ".onnx-light-tmp"


def destination_dir(path: str) -> str:
    """The folder of the destination file ``path``, which must exist.

    Raises:
        FileNotFoundError: the folder does not exist.
        NotADirectoryError: it is not a folder.
        IsADirectoryError: ``path`` itself is an existing folder.
    """
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.exists(folder):
        raise FileNotFoundError(f"destination folder {folder!r} does not exist")
    if not os.path.isdir(folder):
        raise NotADirectoryError(f"destination folder {folder!r} is not a folder")
    if os.path.isdir(path):
        raise IsADirectoryError(f"destination {path!r} is a folder, not a file name")
    return folder


def weights_destination(onnx_path: str, location: str | os.PathLike) -> tuple[str, str]:
    """Where a weights file goes, and the location to record for it.

    A name without a folder part is placed next to ``onnx_path``; a path with
    one must lie inside ``onnx_path``'s folder and is recorded relative to it.

    Args:
        onnx_path: the destination ``.onnx`` file.
        location: the weights file name or path.

    Returns:
        ``(absolute path, location relative to the model folder)``.

    Raises:
        ValueError: the weights file would be outside the model folder, or is
            the model file itself.
    """
    location = os.fsdecode(location)
    folder = os.path.dirname(os.path.abspath(onnx_path))
    if not location or location.endswith(("/", os.sep)):
        raise ValueError(f"weights location {location!r} is not a file name")
    if os.path.dirname(location) == "":
        target = os.path.join(folder, location)
    else:
        target = os.path.abspath(location)
        if os.path.commonpath([target, folder]) != folder:
            raise ValueError(
                f"weights file {location!r} must lie inside the model's folder {folder!r}"
            )
    if target == os.path.abspath(onnx_path):
        raise ValueError(f"weights file {location!r} cannot be the model file itself")
    destination_dir(target)
    return target, os.path.relpath(target, folder).replace(os.sep, "/")


class AtomicFiles:
    """A set of files written to temporary names and replaced together.

    Use as a context manager: on an exception every temporary file is removed;
    call :meth:`commit` to move them over their final names.
    """

    def __init__(self) -> None:
        self._pending: list[tuple[int, str, str]] = []

    def __enter__(self) -> AtomicFiles:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.abort()

    def create(self, final_path: str) -> int:
        """Open a new temporary file for ``final_path`` and return its descriptor."""
        folder, name = os.path.split(os.path.abspath(final_path))
        tmp = os.path.join(folder, f".{name}.{secrets.token_hex(4)}{TMP_SUFFIX}")
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
        self._pending.append((fd, tmp, final_path))
        return fd

    def commit(self) -> None:
        """Close the temporary files and move each over its final name, in order."""
        try:
            for fd, _, _ in self._pending:
                os.close(fd)
        except OSError:
            self.abort()
            raise
        pending, self._pending = self._pending, []
        folders = sorted({os.path.dirname(tmp) for _, tmp, _ in pending})
        with contextlib.ExitStack() as locks:
            for folder in folders:  # in a fixed order: two commits never deadlock
                locks.enter_context(_folder_lock(folder))
            for i, (_, tmp, final) in enumerate(pending):
                try:
                    os.replace(tmp, final)
                except OSError:
                    for _, rest, _ in pending[i:]:
                        _unlink(rest)
                    raise

    def abort(self) -> None:
        """Close and remove every temporary file."""
        pending, self._pending = self._pending, []
        for fd, tmp, _ in pending:
            with contextlib.suppress(OSError):
                os.close(fd)
            _unlink(tmp)


@contextlib.contextmanager
def _folder_lock(folder: str) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``folder`` (best effort: skipped where unsupported).

    Every commit opens its own descriptor, so the lock also serialises threads
    of one process.
    """
    try:
        import fcntl

        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except (ImportError, OSError):
        yield
        return
    try:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _unlink(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def write_file_atomic(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically."""
    with AtomicFiles() as files:
        fd = files.create(path)
        write_all(fd, data)
        files.commit()


def write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` to ``fd`` at its current position."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
