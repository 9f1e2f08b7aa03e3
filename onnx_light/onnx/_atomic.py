"""How a commit is made: temporary files, then renames that can be undone.

Every output is first written to a temporary file beside its final name,
``.<final name>.<8 hex digits>.onnx-light-tmp`` (the final name shortened when
needed, so the temporary name fits whatever legal name the user gives). A
file that replaces another keeps the replaced file's permission bits; a new
file gets ``0666 & ~umask``. On any error the temporary files are removed:
nothing appears under a destination name, files already there are untouched.

The commit replaces the files in order (the weights first, the ``.onnx``
last) while holding an exclusive ``flock`` on their folders. Each replaced
file stays reachable until the last rename succeeded: swapped with its
replacement in one ``renameat2(RENAME_EXCHANGE)`` where the filesystem has
it, else kept under a second hard link (or, failing that, a new name). If a
rename fails (an immutable ``.onnx``, EPERM, EBUSY), the renames already made
are undone, so the old pair is exactly as it was. Readers of onnx-light take
the same lock shared while they open a model and its data files, so they
never pair an ``.onnx`` with weights of another commit.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Iterator

TMP_SUFFIX = ".onnx-light-tmp"
OLD_SUFFIX = ".onnx-light-old"
_NO_ROOM = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
_NO_EXCHANGE = frozenset({errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP})


def temp_path(final_path: str, suffix: str = TMP_SUFFIX) -> str:
    """A fresh hidden name beside ``final_path`` that fits the folder's NAME_MAX."""
    folder, name = os.path.split(final_path)
    token = secrets.token_hex(4)
    try:
        limit = os.pathconf(folder or ".", "PC_NAME_MAX")
    except (OSError, ValueError):
        limit = 255
    room = limit - len(os.fsencode(f"..{token}{suffix}"))
    short = os.fsdecode(os.fsencode(name)[: max(room, 0)])
    return os.path.join(folder, f".{short}.{token}{suffix}")


def _kept_mode(final_path: str) -> int | None:
    """The permission bits of the file ``final_path`` names, if it exists."""
    try:
        return stat.S_IMODE(os.stat(final_path).st_mode)
    except OSError:
        return None


class AtomicFiles:
    """A set of files written to temporary names and replaced together.

    Use as a context manager: on an exception every temporary file is removed
    (and a full disk names the file being written); call :meth:`commit` to
    move them over their final names.
    """

    def __init__(self) -> None:
        self._pending: list[tuple[int, str, str]] = []

    def __enter__(self) -> AtomicFiles:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            return
        writing = self._pending[-1][2] if self._pending else None
        self.abort()
        if (
            writing is not None
            and isinstance(exc, OSError)
            and type(exc) is OSError
            and exc.errno in _NO_ROOM
            and exc.filename is None
        ):
            raise OSError(exc.errno, f"{exc.strerror} while writing {writing!r}", writing) from None

    def create(self, final_path: str) -> int:
        """Open a new temporary file for ``final_path`` and return its descriptor.

        The file gets the permission bits of the file it will replace, if any.
        """
        final_path = os.path.abspath(final_path)
        mode = _kept_mode(final_path)
        tmp = temp_path(final_path)
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
        fd = os.open(tmp, flags, 0o600 if mode is not None else 0o666)
        self._pending.append((fd, tmp, final_path))
        if mode is not None:
            os.fchmod(fd, mode)
        return fd

    def finish(self, fd: int) -> None:
        """Close a temporary file once written (its name waits for the commit).

        Many files (shards) then never hold many descriptors.
        """
        for i, (open_fd, tmp, final) in enumerate(self._pending):
            if open_fd == fd:
                self._pending[i] = (-1, tmp, final)
                os.close(fd)
                return

    def commit(self) -> None:
        """Close the temporary files and move each over its final name, in order.

        Raises:
            OSError: a rename failed; the renames already made were undone.
        """
        try:
            for i, (fd, tmp, final) in enumerate(self._pending):
                if fd >= 0:
                    self._pending[i] = (-1, tmp, final)
                    os.close(fd)
        except OSError:
            self.abort()
            raise
        pending, self._pending = self._pending, []
        folders = _distinct_folders([os.path.dirname(final) for _, _, final in pending])
        done: list[tuple[str, str | None]] = []  # (final, where the old file is kept)
        with contextlib.ExitStack() as locks:
            for folder in folders:  # in a fixed order: two commits never deadlock
                locks.enter_context(folder_lock(folder))
            try:
                for _, tmp, final in pending:
                    done.append((final, _swap_in(tmp, final)))
            except BaseException:
                for final, old in reversed(done):
                    _undo(final, old)
                for _, tmp, _ in pending[len(done) :]:
                    _unlink(tmp)
                raise
        for _, old in done:
            if old is not None:
                _unlink(old)

    def abort(self) -> None:
        """Close and remove every temporary file."""
        pending, self._pending = self._pending, []
        for fd, tmp, _ in pending:
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
            _unlink(tmp)


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


def _swap_in(tmp: str, final: str) -> str | None:
    """Move ``tmp`` over ``final``; return where the replaced file is kept (None: new)."""
    if not os.path.lexists(final):
        os.replace(tmp, final)
        return None
    if _exchange(tmp, final):
        return tmp  # the old file now has the temporary name
    old = temp_path(final, OLD_SUFFIX)
    try:
        os.link(final, old, follow_symlinks=False)
        linked = True
    except OSError:  # no hard links here: move it aside (the name is missing a moment)
        os.rename(final, old)
        linked = False
    try:
        os.replace(tmp, final)
    except BaseException:
        if linked:
            _unlink(old)
        else:
            with contextlib.suppress(OSError):
                os.rename(old, final)
        raise
    return old


def _undo(final: str, old: str | None) -> None:
    """Put back what ``final`` named before the commit (best effort)."""
    with contextlib.suppress(OSError):
        if old is None:
            os.unlink(final)
        else:
            os.replace(old, final)


_renameat2 = None


def _exchange(a: str, b: str) -> bool:
    """Swap two names in one step (``renameat2(RENAME_EXCHANGE)``).

    Returns:
        False where the system or the filesystem cannot do it.

    Raises:
        OSError: any other failure (EPERM on an immutable file, EBUSY...).
    """
    global _renameat2
    if _renameat2 is None:
        try:
            import ctypes

            func = ctypes.CDLL(None, use_errno=True).renameat2
            func.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p]
            func.argtypes += [ctypes.c_uint]
            func.restype = ctypes.c_int
            _renameat2 = func
        except (OSError, AttributeError, ImportError):
            _renameat2 = False
    if not _renameat2:
        return False
    import ctypes

    at_fdcwd, rename_exchange = -100, 2
    if _renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in _NO_EXCHANGE:
        return False
    raise OSError(err, os.strerror(err), b)


@contextlib.contextmanager
def folder_lock(folder: str, shared: bool = False) -> Iterator[None]:
    """Hold a ``flock`` on ``folder``: exclusive to commit, shared to read a model.

    Best effort: skipped where the folder cannot be opened or flock is not
    supported. Every call opens its own descriptor, so the lock also
    serialises threads of one process.
    """
    try:
        import fcntl

        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except (ImportError, OSError):
        yield
        return
    try:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _unlink(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` to ``fd`` at its current position."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
