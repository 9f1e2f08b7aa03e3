"""How a commit is made: temporary files, then renames that can be undone.

Every output is first written to a temporary file beside its final name,
``.<final name>.<8 hex digits>.onnx-light-tmp`` (the final name shortened when
needed, so the temporary name fits whatever legal name the user gives). A
file that replaces another keeps the replaced file's permission bits; a new
file gets ``0666 & ~umask``. On any error the temporary files are removed:
nothing appears under a destination name, files already there are untouched.

The commit first closes every descriptor the call holds of its sources
(``release``): a file about to be replaced is never open at its rename, which
Windows requires. It then replaces the files in order (the weights first, the
``.onnx`` last) while holding an exclusive ``flock`` on their folders (POSIX;
Windows has no lock on a folder). Each replaced file stays reachable until
the last rename succeeded: swapped with its replacement in one
``renameat2(RENAME_EXCHANGE)`` where the filesystem has it (Linux), else kept
under a second hard link (macOS, Linux without the exchange), else moved
aside to a new name (no hard links; and always on Windows, see below). If a
rename fails (an immutable ``.onnx``, EPERM, EBUSY, a file another process
holds open on Windows), the renames already made are undone, so the old pair
is exactly as it was. Readers of onnx-light take the same lock shared while
they open a model and its data files, so they never pair an ``.onnx`` with
weights of another commit.

On Windows a file's names cannot be removed nor renamed while any process
holds it open without ``FILE_SHARE_DELETE`` (CPython's ``open`` and
onnxruntime's mapping both do). A second hard link could then not be removed
after a refused replace, leaving the old file with two links (which onnx and
onnx-light refuse). So there the old file is moved aside first, as
``ReplaceFileW`` does with a backup name: a file another process holds fails
that first rename, before anything changed, with an error that names it.

A commit that replaces a file, or any commit of a set made ``durable``,
survives a power cut: every new file's data and metadata are flushed to the
disk (``fsync``; ``F_FULLFSYNC`` on macOS, where ``fsync`` leaves the data in
the drive's cache) before the first rename, and each folder is flushed after
the last one, so the renames themselves are on the disk when the call
returns (POSIX: Windows cannot open a folder to flush it; NTFS journals the
renames).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import secrets
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from .._errors import shown
from .._system.files import O_BINARY, O_CLOEXEC
from .._system.libc import last_error, libc_function
from .._system.signals import critical, guarded

__all__ = ["AtomicFiles", "folder_lock"]


TMP_SUFFIX = ".onnx-light-tmp"
OLD_SUFFIX = ".onnx-light-old"
_NO_ROOM = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
_NO_EXCHANGE = frozenset({errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP})
_NO_MODES = frozenset({errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EPERM, errno.EINVAL})
_NO_SYNC = frozenset({errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EBADF})
_O_DIRECTORY = getattr(os, "O_DIRECTORY", None)  # None: folders cannot be opened (Windows)
# Windows (the one system with O_BINARY): an open file's names cannot be removed,
# so a replaced file is moved aside, never given a second link (see the docstring)
_NAMES_PINNED_BY_OPEN_FILES = O_BINARY != 0
_PATHCONF = getattr(os, "pathconf", None)
_FCHMOD = getattr(os, "fchmod", None)  # Windows before Python 3.13: none (modes are POSIX's)


def temp_path(final_path: str, suffix: str = TMP_SUFFIX, token: str | None = None) -> str:
    """A hidden name beside ``final_path`` that fits the folder's NAME_MAX.

    Args:
        final_path: the name the file will have.
        suffix: what the hidden name ends with.
        token: 8 hex digits (a fresh random one when None). A name too long
            to be kept whole is shortened and always gets a fresh token.
    """
    folder, name = os.path.split(final_path)
    try:
        limit = _PATHCONF(folder or ".", "PC_NAME_MAX") if _PATHCONF else 255  # NTFS: 255
    except (OSError, ValueError):
        limit = 255
    room = limit - len(os.fsencode(f"..{'0' * 8}{suffix}"))
    encoded = os.fsencode(name)
    if len(encoded) > room:
        name, token = os.fsdecode(encoded[: max(room, 0)]), None
    return os.path.join(folder, f".{name}.{token or secrets.token_hex(4)}{suffix}")


def _kept_mode(final_path: str) -> int | None:
    """The permission bits of the file ``final_path`` names, if it exists."""
    try:
        return stat.S_IMODE(os.stat(final_path).st_mode)
    except OSError:
        return None


def _fchmod(fd: int, path: str, mode: int) -> None:
    """Give the file ``mode``, where the filesystem stores modes (not FAT, exFAT...).

    Through its name where the system has no ``fchmod`` (Windows before Python
    3.13, where only the read-only attribute follows the mode).
    """
    try:
        if _FCHMOD is None:
            os.chmod(path, mode)
        else:
            _FCHMOD(fd, mode)
    except OSError as e:
        if e.errno not in _NO_MODES:
            raise


@dataclass(slots=True)
class _Pending:
    """One output: its temporary file (``fd`` -1 once closed) and its final name."""

    fd: int
    tmp: str
    final: str
    identity: tuple[int, int]


class AtomicFiles:
    """A set of files written to temporary names and replaced together.

    Use as a context manager: on an exception (a signal included, see
    :mod:`_system.signals`) every temporary file is removed, and a full disk names
    the file being written; call :meth:`commit` to move them over their final
    names. All the temporary names of one set share one random token, so two
    destinations that a case-insensitive filesystem takes for one file meet
    as soon as their temporary files are created (:meth:`reserve`), before
    anything is written.

    Args:
        durable: flush every file and folder to the disk at the commit, even
            when no file is replaced (a commit that replaces one always does).
    """

    def __init__(self, durable: bool = False) -> None:
        self.durable = durable  # flush new files to the disk even when none replaces a file
        self._pending: list[_Pending] = []
        self._token = secrets.token_hex(4)
        self._guard = guarded()
        self._writing: str | None = None  # the file being written, for messages

    def __enter__(self) -> AtomicFiles:
        self._guard.__enter__()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if exc_type is not None:
                self._clean_up(exc)
        except BaseException as e:  # the clean-up's own error replaces the call's
            self._guard.__exit__(type(e), e, e.__traceback__)
            raise
        self._guard.__exit__(exc_type, exc, tb)  # a signal raised again after the clean-up

    def _clean_up(self, exc: BaseException) -> None:
        """Remove the temporary files; a full disk names the file being written."""
        writing = self._writing
        self.abort()
        if (
            writing is not None
            and isinstance(exc, OSError)
            and type(exc) is OSError
            and exc.errno in _NO_ROOM
            and exc.filename is None
        ):
            raise OSError(
                exc.errno, f"{exc.strerror} while writing {shown(writing)}", writing
            ) from None

    def reserve(self, final_paths: list[str]) -> None:
        """Create the temporary files of ``final_paths`` now, empty, in commit order.

        Raises:
            ValueError: two of them are one file on this filesystem (it does
                not tell upper from lower case, or folds names otherwise).
            OSError: a file cannot be created beside its destination (the
                message names the destination).
        """
        for path in final_paths:
            os.close(self.create(path))
            self._pending[-1].fd = -1

    def create(self, final_path: str) -> int:
        """Open the temporary file of ``final_path`` (reserved, or new) and return its descriptor.

        A new file gets the permission bits of the file it will replace, if
        any (where the filesystem stores them).

        Raises:
            ValueError: ``final_path`` is one file with another destination.
            OSError: the file cannot be created (the message names ``final_path``).
        """
        final_path = os.path.abspath(final_path)
        with critical():
            for entry in self._pending:
                if entry.final == final_path and entry.fd < 0:
                    entry.fd = os.open(entry.tmp, os.O_RDWR | O_BINARY | O_CLOEXEC)
                    self._writing = final_path
                    return entry.fd
            mode = _kept_mode(final_path)
            tmp = temp_path(final_path, token=self._token)
            flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | O_BINARY | O_CLOEXEC
            try:
                fd = os.open(tmp, flags, 0o600 if mode is not None else 0o666)
            except FileExistsError:
                raise self._same_file(final_path, tmp) from None
            except OSError as e:
                raise OSError(
                    e.errno, f"cannot write {shown(final_path)}: {e.strerror}", final_path
                ) from None
            st = os.fstat(fd)
            self._pending.append(_Pending(fd, tmp, final_path, (st.st_dev, st.st_ino)))
            self._writing = final_path
        if mode is not None:
            _fchmod(fd, tmp, mode)
        return fd

    def _same_file(self, final_path: str, tmp: str) -> Exception:
        """The error for a temporary name that exists already.

        The name holds this set's random token: the filesystem took it for
        the temporary name of another destination of the set, spelled another
        way (through FUSE the two spellings even give two inode numbers).
        """
        folder = os.path.dirname(tmp)
        same = [e for e in self._pending if os.path.dirname(e.tmp) == folder]
        if same:
            other = next((e for e in same if e.tmp.casefold() == tmp.casefold()), same[0])
            return ValueError(
                f"destinations {shown(other.final)} and {shown(final_path)} are one file on this "
                "filesystem (it does not tell upper from lower case, or folds names): "
                "give them names that differ by more than case"
            )
        return FileExistsError(
            errno.EEXIST,
            f"cannot write {shown(final_path)}: {shown(tmp)} exists; run again",
            final_path,
        )

    def finish(self, fd: int) -> None:
        """Close a temporary file once written (its name waits for the commit).

        Many files (shards) then never hold many descriptors.
        """
        for entry in self._pending:
            if entry.fd == fd:
                entry.fd = -1
                os.close(fd)
                return

    def commit(self, release: Callable[[], None] | None = None) -> None:
        """Close the temporary files and move each over its final name, in order.

        Signals are held from the first rename to the last clean-up, and
        delivered after: an interrupt never leaves a mix of old and new files.
        The wait for the folders' locks is not held: an interrupt then
        removes the temporary files.

        Args:
            release: closes the call's descriptors of its sources (its
                :class:`~onnx_light.onnx._read.sources.SourceFiles`), called
                before the first rename: Windows refuses to replace a file
                that is open, the caller's own descriptors included.

        Raises:
            OSError: a rename failed; the renames already made were undone.
                On Windows a file another process holds open (an onnxruntime
                session...) is named: nothing was replaced.
        """
        if release is not None:
            try:
                release()
            except OSError:
                self.abort()
                raise
        durable = self.durable or any(os.path.lexists(e.final) for e in self._pending)
        if durable:  # data and metadata on the disk before any rename (an interrupt
            for entry in self._pending:  # here removes the temporary files: nothing lost)
                _fsync_file(entry)
        with critical():
            try:
                for entry in self._pending:
                    if entry.fd >= 0:
                        fd, entry.fd = entry.fd, -1
                        os.close(fd)
            except OSError:
                self.abort()
                raise
        folders = _distinct_folders([os.path.dirname(e.final) for e in self._pending])
        with contextlib.ExitStack() as locks:
            for folder in folders:  # in a fixed order: two commits never deadlock
                locks.enter_context(folder_lock(folder))  # a wait an interrupt may cut
            with critical():
                pending, self._pending = self._pending, []
                done: list[_Swap] = []
                try:
                    for entry in pending:
                        swap = _Swap(entry.tmp, entry.final)
                        done.append(swap)  # recorded before any rename
                        swap.run()
                    if durable:  # the renames on the disk before the old files go
                        for folder in folders:
                            _fsync_folder(folder)
                except BaseException:
                    for swap in reversed(done):
                        swap.undo()
                    for entry in pending[len(done) :]:
                        _unlink(entry.tmp)
                    raise
                for swap in done:
                    if swap.old is not None:
                        _unlink(swap.old)

    def abort(self) -> None:
        """Close and remove every temporary file."""
        with critical():
            pending, self._pending = self._pending, []
            for entry in pending:
                if entry.fd >= 0:
                    with contextlib.suppress(OSError):
                        os.close(entry.fd)
                _unlink(entry.tmp)


def _distinct_folders(folders: list[str]) -> list[str]:
    """The folders, each once however spelled (two flocks on one folder would deadlock),
    in a fixed order (two commits never deadlock either)."""
    seen: dict[tuple[int, int], str] = {}
    for folder in sorted(set(folders)):
        try:
            st = os.stat(folder)
            key = (st.st_dev, st.st_ino)
        except OSError:
            key = (-1, len(seen))
        seen.setdefault(key, folder)
    return sorted(seen.values(), key=lambda f: os.path.realpath(f))


class _HeldOpen(PermissionError):
    """Internal: Windows refused to rename a file another process holds open."""


class _Swap:
    """One rename of a commit, recorded before it is made, so it can be undone.

    Attributes:
        tmp: the new file's temporary name.
        final: its final name.
        old: where the replaced file is kept until the commit ends (None:
            nothing was replaced, or not yet).
        state: "planned", "aside" (the old file moved away, the final name
            missing a moment: no hard links here), "done".
    """

    def __init__(self, tmp: str, final: str) -> None:
        self.tmp, self.final = tmp, final
        self.old: str | None = None
        self.state = "planned"

    def run(self) -> None:
        """Move ``tmp`` over ``final``, keeping the replaced file reachable.

        Raises:
            OSError: the rename failed (the names are as they were).
        """
        try:
            if not os.path.lexists(self.final):
                os.replace(self.tmp, self.final)
                self.state = "done"
                return
            if _exchange(self.tmp, self.final):
                self.old, self.state = self.tmp, "done"  # the old file has the temporary name
                return
            old = temp_path(self.final, OLD_SUFFIX)
            if _NAMES_PINNED_BY_OPEN_FILES:  # Windows: moved aside, never linked
                self._aside(old)
            else:
                try:
                    os.link(self.final, old, follow_symlinks=False)
                    self.old = old
                except OSError:  # no hard links here: move it aside
                    self._aside(old)
            os.replace(self.tmp, self.final)
            self.state = "done"
        except _HeldOpen as e:
            raise PermissionError(
                e.errno,
                f"cannot replace {shown(self.final)}: another process holds it open "
                "(an onnxruntime session, an editor, a virus scanner?); nothing was replaced: "
                "close it and run again, or write to another name",
                self.final,
            ) from None
        except OSError as e:
            raise OSError(
                e.errno, f"cannot replace {shown(self.final)}: {e.strerror}", self.final
            ) from None

    def _aside(self, old: str) -> None:
        """Rename the replaced file to ``old``.

        Raises:
            _HeldOpen: Windows refused it: another process holds the file open.
        """
        try:
            os.rename(self.final, old)
        except PermissionError as e:
            if _NAMES_PINNED_BY_OPEN_FILES:
                raise _HeldOpen(e.errno, e.strerror) from None
            raise
        self.old, self.state = old, "aside"

    def undo(self) -> None:
        """Put back what ``final`` named before (best effort); remove the temporary file."""
        with contextlib.suppress(OSError):
            if self.state == "done" and self.old is None:
                os.unlink(self.final)
            elif self.state == "done" and self.old is not None:
                os.replace(self.old, self.final)
            elif self.state == "aside":  # the final name is free: never written over
                os.rename(self.old, self.final)
            elif self.old is not None:  # a second link, never used
                os.unlink(self.old)
        if self.old != self.tmp:
            _unlink(self.tmp)


def _exchange(a: str, b: str) -> bool:
    """Swap two names in one step (``renameat2(RENAME_EXCHANGE)``).

    Returns:
        False where the system or the filesystem cannot do it.

    Raises:
        OSError: any other failure (EPERM on an immutable file, EBUSY...).
    """
    renameat2 = libc_function(
        "renameat2", [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    )
    if renameat2 is None:
        return False
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    error = last_error(b)
    if error.errno in _NO_EXCHANGE:
        return False
    raise error


@contextlib.contextmanager
def folder_lock(folder: str, shared: bool = False) -> Iterator[None]:
    """Hold a ``flock`` on ``folder``: exclusive to commit, shared to read a model.

    Best effort: skipped where the folder cannot be opened or flock is not
    supported, and on Windows, which has neither ``flock`` nor a descriptor
    of a folder (there a reader may pair an ``.onnx`` with the weights of a
    commit made meanwhile: the platforms page says so). Every call opens its
    own descriptor, so the lock also serialises threads of one process.
    """
    if _O_DIRECTORY is None:
        yield
        return
    try:
        import fcntl

        fd = os.open(folder, os.O_RDONLY | _O_DIRECTORY | O_CLOEXEC)
    except (ImportError, OSError):
        yield
        return
    try:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def full_sync(fd: int) -> None:
    """Flush a file to the disk itself: ``fsync``, or ``F_FULLFSYNC`` on macOS.

    macOS's ``fsync`` hands the data to the drive, which may keep it in its
    cache across a power cut; ``fcntl(F_FULLFSYNC)`` asks the drive to write
    it (where a filesystem refuses it, ``fsync`` is what it can do).

    Raises:
        OSError: the flush failed.
    """
    try:
        import fcntl

        fcntl.fcntl(fd, fcntl.F_FULLFSYNC)
        return
    except (ImportError, AttributeError):  # not macOS
        pass
    except OSError:  # a filesystem without it (FAT, network, a folder...): as SQLite does,
        pass  # fsync, whose own failure is the one that counts
    os.fsync(fd)


def _fsync_file(entry: _Pending) -> None:
    """Flush a temporary file's data and metadata to the disk (reopened if closed).

    Reopened for writing: Windows flushes only through a descriptor that may
    write (``FlushFileBuffers``; read-only, EBADF).

    Raises:
        OSError: the flush failed (an I/O error: the data may not be on the
            disk), naming the destination.
    """
    fd = entry.fd if entry.fd >= 0 else os.open(entry.tmp, os.O_RDWR | O_BINARY | O_CLOEXEC)
    try:
        full_sync(fd)
    except OSError as e:
        if e.errno not in _NO_SYNC:  # a filesystem that cannot flush (some FUSE ones)
            raise OSError(
                e.errno, f"cannot flush {shown(entry.final)} to the disk: {e.strerror}", entry.final
            ) from None
    finally:
        if fd != entry.fd:
            os.close(fd)


def _fsync_folder(folder: str) -> None:
    """Flush a folder's entries (the renames) to the disk, where the filesystem can.

    Raises:
        OSError: the flush failed with an I/O error.
    """
    if _O_DIRECTORY is None:
        return  # Windows: folders cannot be opened (NTFS journals the renames)
    try:
        fd = os.open(folder, os.O_RDONLY | _O_DIRECTORY | O_CLOEXEC)
    except OSError:
        return  # a folder that cannot be opened cannot be flushed: nothing more to do
    try:
        full_sync(fd)
    except OSError as e:
        if e.errno not in _NO_SYNC:
            raise OSError(
                e.errno,
                f"cannot flush the folder {shown(folder)} to the disk: {e.strerror}",
                folder,
            ) from None
    finally:
        os.close(fd)


def _unlink(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)
