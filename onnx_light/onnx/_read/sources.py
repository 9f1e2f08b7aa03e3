"""Source files: every file a call reads, opened once, when it is checked.

Which bytes a call reads is decided in one place. The ``.onnx`` the caller
names is opened first (it is trusted: a symlink, a second hard link or any
legal name is fine). Each data file is opened when the first reference to it
is checked, and checked *on the descriptor*: a regular file, one hard link,
the very file that was resolved inside the model's folder. Every later read
goes through that descriptor, so a file renamed over it during the call
changes nothing.

Descriptors are bounded (:func:`descriptor_budget`, well under
``RLIMIT_NOFILE``): a model with one file per tensor may have more files than
a process may open. The least recently used descriptor is closed; a file
reopened later must still be the same file (device, inode, size and
modification and status-change times) or the call fails with :class:`ExternalDataError`.
"""

from __future__ import annotations

import contextlib
import os
import stat
import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property

from .._errors import OUTSIDE, ExternalDataError, shown
from .._system.files import O_BINARY, O_CLOEXEC

__all__ = ["SourceFile", "SourceFiles", "identity", "is_inside", "kernel_path"]


# O_NONBLOCK and O_NOCTTY: a FIFO or a terminal swapped in after the check never
# blocks the open (POSIX; Windows has neither, nor FIFOs in a folder)
_OPEN_FLAGS = (
    os.O_RDONLY | O_BINARY | O_CLOEXEC | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
)


def descriptor_budget() -> int:
    """How many source files one call keeps open at most.

    An eighth of the soft ``RLIMIT_NOFILE``, between 4 and 128: several calls
    may run at once in one process, and the caller has descriptors of its own.
    """
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        if soft == resource.RLIM_INFINITY or soft <= 0:
            soft = 1024
    except (ImportError, OSError, ValueError):
        soft = 1024
    return max(4, min(128, soft // 8))


@dataclass(frozen=True, eq=False)
class SourceFile:
    """One file a call reads, as it was when checked.

    Attributes:
        path: the path it was opened by (for messages and reopening).
        dev: device number.
        ino: inode number.
        size: size in bytes.
        mtime_ns: modification time.
        ctime_ns: status change time (which, unlike the modification time,
            no program can set back).
        label: what first referenced it, for messages (a tensor, or "model").
        real: its path with every symlink resolved, checked against the
            open descriptor (the same device and inode).
    """

    path: str
    dev: int
    ino: int
    size: int
    mtime_ns: int
    ctime_ns: int
    label: str
    real: str = ""

    @cached_property  # one tuple per file, not one per tensor that asks
    def identity(self) -> tuple[int, int]:
        """``(device, inode)``: the file itself, whatever its name."""
        return (self.dev, self.ino)

    def same_as(self, st: os.stat_result) -> bool:
        """True when ``st`` describes this file, unchanged."""
        return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns) == (
            self.dev,
            self.ino,
            self.size,
            self.mtime_ns,
            self.ctime_ns,
        )


def _source(path: str, st: os.stat_result, label: str, real: str) -> SourceFile:
    return SourceFile(
        path, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, label, real
    )


def identity(path: str) -> tuple[int, int] | None:
    """``(device, inode)`` of the file ``path`` names, links followed (None: none there)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def kernel_path(path: str | os.PathLike) -> str:
    """The absolute path of the file the kernel opens for ``path``.

    Its folder has its links resolved, in order, as ``open()`` does: with
    ``lnk`` a link to ``deep/x``, ``lnk/../m.onnx`` is ``deep/m.onnx``, where
    :func:`os.path.abspath` would say ``./m.onnx``, another file. Its last
    name is kept as given: a link there is the file's own (a Hugging Face
    snapshot's model, a destination that is replaced, not written through).
    """
    head, name = os.path.split(os.fsdecode(path))
    if name in ("", ".", ".."):  # a folder, not a file name: resolved whole
        return os.path.realpath(os.fsdecode(path))
    return os.path.join(os.path.realpath(head or os.curdir), name)


def is_inside(path: str, folder: str) -> bool:
    """True when ``path`` is ``folder`` or lies below it (both already resolved).

    On Windows a path on another drive than ``folder`` is outside it.
    """
    try:
        return os.path.commonpath([path, folder]) == folder
    except ValueError:  # Windows: another drive (or a relative and an absolute path)
        return False


class SourceFiles:
    """The files one call reads, each opened once, at most ``budget`` open at a time.

    Use as a context manager: every descriptor is closed at the end.

    Args:
        budget: descriptors kept open at most (default :func:`descriptor_budget`).
    """

    def __init__(self, budget: int | None = None) -> None:
        self.budget = budget or descriptor_budget()
        self._open: OrderedDict[SourceFile, int] = OrderedDict()
        self._pins: dict[SourceFile, int] = {}
        self._by_path: dict[tuple[str, str], SourceFile] = {}
        self._entries: dict[tuple[int, int], SourceFile] = {}  # symlinks passed through
        self._files: dict[tuple[int, int], SourceFile] = {}
        self._lock = threading.Lock()

    def __enter__(self) -> SourceFiles:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            self.close()
        except OSError:
            if exc_type is None:  # never hide the error that ended the call
                raise

    def close(self) -> None:
        """Close every descriptor."""
        with self._lock:
            fds = list(self._open.values())
            self._open.clear()
        errors = []
        for fd in fds:  # every one, even after an error (a FUSE daemon gone...)
            try:
                os.close(fd)
            except OSError as e:
                errors.append(e)
        if errors:
            raise errors[0]

    # -- opening and checking ----------------------------------------------------

    def model(self, path: str) -> SourceFile:
        """Open the model file the caller names: trusted, whatever its links.

        Raises:
            FileNotFoundError: it does not exist.
            IsADirectoryError: it is a folder.
            ValueError: it is not a regular file, or is empty.
        """
        try:
            st = os.stat(path)
        except FileNotFoundError:
            raise FileNotFoundError(f"model file {shown(path)} does not exist") from None
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(f"model path {shown(path)} is a folder, not an .onnx file")
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(
                f"model path {shown(path)} is not a regular file (a FIFO or a device?)"
            )
        if st.st_size == 0:
            raise ValueError(f"model file {shown(path)} is empty, not an ONNX model")
        fd = os.open(path, _OPEN_FLAGS)
        fst = os.fstat(fd)
        # its real path, taken once and checked against the descriptor: the
        # folder of the real path is where its data may also lie
        real = os.path.realpath(path)
        if not (
            (fst.st_dev, fst.st_ino) == (st.st_dev, st.st_ino) == identity(real)
            and stat.S_ISREG(fst.st_mode)
        ):
            os.close(fd)
            raise ValueError(f"model file {shown(path)} was replaced while being opened; run again")
        return self._register(_source(path, fst, "model", real), fd)

    def data(
        self,
        folder: str,
        roots: tuple[str, ...],
        location: str,
        label,
        *,
        noun: str = "tensor",
        kind: str = "external data file",
        fix: str = "",
    ) -> SourceFile:
        """Open and check the data file ``location`` of ``folder``, once.

        The one rule for the files a model brings: its references, and the
        files a writer copies beside the models it writes (``with_files``,
        :mod:`~onnx_light.onnx._write.companions`).

        Args:
            folder: the model's folder, as named.
            roots: the resolved folders the file may lie in (the model's
                folder, and the folder of the model file's real path).
            location: a location already checked by ``check_location``.
            label: the tensor that references it, for messages (anything
                whose ``str`` names it, formatted only when needed).
            noun: what ``label`` is, opening every message ("tensor W: ...").
            kind: what the file is, in the messages.
            fix: appended to the message of a file outside the folders: what to do.

        Raises:
            FileNotFoundError: the file does not exist.
            ExternalDataError: it resolves outside the folder, is not a
                regular file, has several hard links, or changed while it
                was being checked.
            OSError: it cannot be reached (a loop of links, a name too long).
        """
        known = self._by_path.get((folder, location))
        if known is not None:
            return known
        path = os.path.join(folder, location)
        real = os.path.realpath(path)
        if not any(is_inside(real, root) for root in roots):
            where = f"the model folder {shown(folder)}"
            if len(roots) > 1 and roots[1] != roots[0]:
                where += f" and the folder of the model file's real path {shown(roots[1])}"
            raise ExternalDataError(
                f"{noun} {label}: location {shown(location)} resolves to {shown(real)}, "
                f"outside {where} (symlink?){fix}",
                reason=OUTSIDE,
            )
        try:
            st = os.stat(path)  # before opening: a FIFO or a device is never opened
        except FileNotFoundError:
            raise FileNotFoundError(
                f"{noun} {label}: {kind} {shown(path)} does not exist"
            ) from None
        except OSError as e:
            raise type(e)(
                e.errno,
                f"{noun} {label}: cannot reach {kind} {shown(path)}: {e.strerror}",
            ) from None
        if not stat.S_ISREG(st.st_mode):
            raise ExternalDataError(f"{noun} {label}: {kind} {shown(path)} is not a regular file")
        fd = os.open(path, _OPEN_FLAGS)  # as any reader opens it: links followed
        try:
            fst = os.fstat(fd)
            # the file opened is the one checked, and still the one inside the folder
            if not (
                (fst.st_dev, fst.st_ino) == (st.st_dev, st.st_ino)
                and os.path.realpath(path) == real
                and identity(real) == (fst.st_dev, fst.st_ino)
            ):
                raise ExternalDataError(
                    f"{noun} {label}: {kind} {shown(path)} was replaced while "
                    "being checked; run again"
                )
            if not stat.S_ISREG(fst.st_mode):
                raise ExternalDataError(
                    f"{noun} {label}: {kind} {shown(path)} is not a regular file"
                )
            if fst.st_nlink > 1:
                raise ExternalDataError(
                    f"{noun} {label}: {kind} {shown(path)} has {fst.st_nlink} hard "
                    "links; a hard link can bring any file of the disk into the model folder, "
                    "so it is refused (as onnx does): copy the file to give it a single link"
                )
        except BaseException:
            os.close(fd)
            raise
        source = self._register(_source(path, fst, str(label), real), fd)
        self._by_path[(folder, location)] = source
        with contextlib.suppress(OSError):
            lst = os.lstat(path)
            if stat.S_ISLNK(lst.st_mode):
                self._entries.setdefault((lst.st_dev, lst.st_ino), source)
        return source

    def _register(self, source: SourceFile, fd: int) -> SourceFile:
        known = self._files.get(source.identity)
        if known is not None and known.same_as(os.fstat(fd)):
            os.close(fd)  # the same file under another name: one descriptor is enough
            return known
        self._files.setdefault(source.identity, source)
        with self._lock:
            self._open[source] = fd
            self._evict()
        return source

    def _evict(self) -> None:
        if len(self._open) <= self.budget:
            return
        for source in list(self._open):
            if len(self._open) <= self.budget:
                return
            if not self._pins.get(source):
                os.close(self._open.pop(source))

    # -- reading -----------------------------------------------------------------

    @contextlib.contextmanager
    def lease(self, source: SourceFile) -> Iterator[int]:
        """A descriptor of ``source``, kept open while the ``with`` block runs.

        Raises:
            ExternalDataError: the file was closed to respect the budget and,
                reopened, is no longer the file that was checked.
        """
        with self._lock:
            fd = self._open.get(source)
            if fd is None:
                fd = self._reopen(source)
                self._open[source] = fd
            self._open.move_to_end(source)
            self._pins[source] = self._pins.get(source, 0) + 1
            self._evict()
        try:
            yield fd
        finally:
            with self._lock:
                self._pins[source] -= 1
                self._evict()

    @staticmethod
    def _reopen(source: SourceFile) -> int:
        try:
            fd = os.open(source.path, _OPEN_FLAGS)
        except OSError as e:
            raise ExternalDataError(
                f"tensor {source.label}: external data file {shown(source.path)} changed since it "
                f"was checked ({e.strerror}); run again"
            ) from None
        if not source.same_as(os.fstat(fd)):
            os.close(fd)
            raise ExternalDataError(
                f"tensor {source.label}: external data file {shown(source.path)} changed since it "
                "was checked (replaced or modified); run again"
            )
        return fd

    # -- what a call may not replace ---------------------------------------------

    def sources(self) -> list[tuple[str, SourceFile]]:
        """``(path, file)`` for every file opened (each file once)."""
        return [(source.path, source) for source in self._files.values()]

    def reader_of(self, identities: set[tuple[int, int]]) -> SourceFile | None:
        """The source file among ``identities`` (files, or symlinks a reference
        went through), if any."""
        for identity in identities:
            found = self._files.get(identity) or self._entries.get(identity)
            if found is not None:
                return found
        return None
