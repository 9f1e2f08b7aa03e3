"""Windows or macOS as onnx-light sees them, simulated on Linux. A test tool, not in the package.

``install(name)`` runs before anything else is imported (``sitecustomize.py``
beside this file, on ``PYTHONPATH`` with ``ONNX_LIGHT_SIMULATE`` set, so child
processes are simulated too). Every ``import`` in a module of ``onnx_light``
of ``os``, ``signal``, ``ctypes``, ``mmap``, ``fcntl`` or ``resource`` then
gets a view of that module with what the platform lacks taken away and what
it refuses enforced, so a Linux-only call in the package fails here as it
would there (numpy, onnx and pytest see the real modules: they decide from
``sys.platform``, which stays Linux):

- ``windows``: no positioned I/O (``pread``, ``preadv``, ``pwrite``...), no
  ``pathconf``, ``geteuid``, ``uname``, ``fdatasync``, ``statvfs``,
  ``copy_file_range``, ``splice``, ``posix_fadvise``; ``fchmod`` only from
  Python 3.13; no ``O_CLOEXEC``, ``O_DIRECTORY``, ``O_NONBLOCK``, ``O_NOCTTY``,
  ``O_NOFOLLOW``; ``O_BINARY`` and ``O_NOINHERIT`` exist. The package cannot
  import ``fcntl``, ``resource``, ``termios``, ``pwd`` nor ``grp``;
  ``ctypes.CDLL(None)`` raises ``TypeError``; no ``SIGHUP``. What Windows
  refuses: opening a folder (EACCES); a file the package opens without
  ``O_BINARY`` (text mode there: refused here, loudly, rather than
  translated); ``os.rename`` onto an existing name; renaming, replacing or
  removing a file any descriptor or mapping of this process holds (CPython
  and onnxruntime open without ``FILE_SHARE_DELETE``: a sharing violation);
  ``fsync`` through a read-only descriptor (EBADF; the others are recorded
  in :data:`flushed`).
- ``windows-fat``: the same, and hard links refused (FAT, exFAT).
- ``macos``: no ``posix_fadvise``, ``posix_fallocate``, ``copy_file_range``,
  ``splice``, ``fdatasync``, ``sched_getaffinity`` (macOS 11 and later:
  ``preadv`` and ``pwritev`` exist), ``O_DIRECT``, ``O_NOATIME``, ``O_PATH``; the C
  library has no ``renameat2``, ``fallocate``, nor a Linux ``fstatfs``;
  ``uname`` says Darwin; ``fcntl`` has no pipe sizes and has ``F_FULLFSYNC``
  (recorded in :data:`flushed`, then an ``fsync``); the soft limit of open
  files is macOS's default, 256.

What it cannot show: a real NTFS or APFS, their case folding and name rules,
another process's locks, Windows's ``MAX_PATH``, how fast anything is.
"""

from __future__ import annotations

import builtins
import ctypes
import errno
import fcntl
import mmap
import os
import resource
import signal
import stat
import sys
import types

__all__ = ["flushed", "held", "install", "simulated"]

simulated = ""  # the platform installed ("" when none)
flushed: list[str] = []  # files flushed: by fsync (windows), by F_FULLFSYNC (macos)

_WINDOWS_OS = [
    "pread",
    "preadv",
    "pwrite",
    "pwritev",
    "pathconf",
    "fpathconf",
    "pathconf_names",
    "geteuid",
    "getuid",
    "getegid",
    "getgid",
    "getgroups",
    "uname",
    "fdatasync",
    "statvfs",
    "fstatvfs",
    "sync",
    "copy_file_range",
    "splice",
    "sendfile",
    "posix_fadvise",
    "posix_fallocate",
    "sched_getaffinity",
    "pipe2",
    "getpgid",
    "killpg",
    "mkfifo",
    "mknod",
    "O_CLOEXEC",
    "O_DIRECTORY",
    "O_NONBLOCK",
    "O_NOCTTY",
    "O_NOFOLLOW",
    "O_SYNC",
    "O_DSYNC",
    "O_NDELAY",
    "O_ASYNC",
    "O_DIRECT",
    "O_NOATIME",
    "O_PATH",
    "O_TMPFILE",
    "O_LARGEFILE",
    "POSIX_FADV_DONTNEED",
]
_MACOS_OS = [
    "posix_fadvise",
    "posix_fallocate",
    "copy_file_range",
    "splice",
    "fdatasync",
    "sched_getaffinity",
    "pipe2",
    "memfd_create",
    "eventfd",
    "pidfd_open",
    "O_DIRECT",
    "O_NOATIME",
    "O_PATH",
    "O_TMPFILE",
    "O_LARGEFILE",
    "POSIX_FADV_DONTNEED",
]
_WINDOWS_MODULES = {"fcntl", "resource", "termios", "pwd", "grp"}
_LINUX_LIBC = {"renameat2", "fallocate", "fstatfs", "copy_file_range", "splice"}
_O_BINARY, _O_NOINHERIT = 0x8000, 0x0080  # Windows's values
_F_FULLFSYNC = 51  # macOS's value


def _name_of(fd: int) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return f"fd {fd}"


def held(path) -> str | None:
    """How this process holds the regular file ``path``: "open", "mapped", or None."""
    try:
        st = os.stat(path, follow_symlinks=False)
    except (OSError, ValueError):
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    key = (st.st_dev, st.st_ino)
    for name in os.listdir("/proc/self/fd"):
        try:
            fst = os.fstat(int(name))
        except OSError:
            continue
        if (fst.st_dev, fst.st_ino) == key:
            return "open"
    with builtins.open("/proc/self/maps") as maps:
        for line in maps:
            parts = line.split(None, 5)
            if len(parts) < 6 or parts[4] == "0":
                continue
            major, minor = (int(x, 16) for x in parts[3].split(":"))
            if int(parts[4]) == st.st_ino and os.makedev(major, minor) == st.st_dev:
                return "mapped"
    return None


def _package_caller(depth: int = 2) -> bool:
    try:
        return str(sys._getframe(depth).f_globals.get("__name__", "")).startswith("onnx_light")
    except ValueError:
        return False


class _View(types.ModuleType):
    """A module as the package sees it: some names taken away, some replaced or added."""

    def __init__(self, real: types.ModuleType, hidden=(), **replaced) -> None:
        super().__init__(real.__name__, real.__doc__)
        self.__dict__.update(replaced)
        object.__setattr__(self, "_real", real)
        object.__setattr__(self, "_hidden", frozenset(hidden))

    def __getattr__(self, name):
        if name in self._hidden:
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r} (simulated)")
        return getattr(self._real, name)

    def __dir__(self):
        return sorted((set(dir(self._real)) | set(self.__dict__)) - self._hidden)


def _refuse(path, what: str) -> None:
    how = held(path)
    if how is not None:
        raise PermissionError(
            errno.EACCES,
            f"simulated Windows: cannot {what} a file this process holds {how} (sharing violation)",
            os.fsdecode(path),
        )


def _windows(fat: bool) -> dict:
    def open_(path, flags, mode=0o777, *, dir_fd=None):
        if dir_fd is not None:
            raise NotImplementedError("dir_fd unavailable on this platform")
        try:
            st = os.stat(path)
        except (OSError, ValueError):
            st = None
        if st is not None and stat.S_ISDIR(st.st_mode):
            raise PermissionError(errno.EACCES, "Permission denied", os.fsdecode(path))
        if (st is None or stat.S_ISREG(st.st_mode)) and not flags & _O_BINARY:
            raise OSError(
                errno.EINVAL,
                "simulated Windows: os.open without O_BINARY opens in text mode",
                os.fsdecode(path),
            )
        return os.open(path, flags & ~(_O_BINARY | _O_NOINHERIT), mode)

    def replace(src, dst, *, src_dir_fd=None, dst_dir_fd=None, _how=None):
        if src_dir_fd is not None or dst_dir_fd is not None:
            raise NotImplementedError("dir_fd unavailable on this platform")
        _refuse(src, "rename")
        _refuse(dst, "replace")
        if os.path.isdir(dst):
            raise PermissionError(errno.EACCES, "Access is denied", os.fsdecode(dst))
        return (_how or os.replace)(src, dst)  # looked up now: tests may replace it

    def rename(src, dst, *, src_dir_fd=None, dst_dir_fd=None):
        if os.path.lexists(dst):
            raise FileExistsError(
                errno.EEXIST, "Cannot create a file when that file already exists", os.fsdecode(dst)
            )
        return replace(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd, _how=os.rename)

    def unlink(path, *, dir_fd=None):
        if dir_fd is not None:
            raise NotImplementedError("dir_fd unavailable on this platform")
        _refuse(path, "remove")
        return os.unlink(path)

    def link(src, dst, *, src_dir_fd=None, dst_dir_fd=None, follow_symlinks=True):
        if fat:
            raise OSError(errno.EINVAL, "Incorrect function (simulated FAT: no hard links)")
        return os.link(src, dst)

    def fsync(fd):
        if hasattr(fd, "fileno"):
            fd = fd.fileno()
        if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_RDONLY:
            raise OSError(errno.EBADF, "Bad file descriptor (simulated Windows: read-only)")
        flushed.append(_name_of(fd))
        return os.fsync(fd)

    class CDLL(ctypes.CDLL):
        def __init__(self, name, *args, **kwargs):
            if name is None:
                raise TypeError("expected str, bytes or os.PathLike object, not NoneType")
            super().__init__(name, *args, **kwargs)

    hidden = _WINDOWS_OS + (["fchmod"] if sys.version_info < (3, 13) else [])
    return {
        "os": _View(
            os,
            hidden,
            open=open_,
            replace=replace,
            rename=rename,
            unlink=unlink,
            remove=unlink,
            link=link,
            fsync=fsync,
            O_BINARY=_O_BINARY,
            O_NOINHERIT=_O_NOINHERIT,
            O_TEXT=0x4000,
        ),
        "signal": _View(
            signal, ["SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGALRM", "pthread_sigmask"]
        ),
        "ctypes": _View(ctypes, CDLL=CDLL),
        "mmap": _View(
            mmap,
            [n for n in dir(mmap) if n.startswith(("MAP_", "PROT_", "MADV_")) or n == "madvise"],
        ),
        **dict.fromkeys(_WINDOWS_MODULES),  # None: not importable
    }


def _macos() -> dict:
    def uname():
        u = os.uname()
        return os.uname_result(("Darwin", u.nodename, "23.0.0", "Darwin Kernel", "arm64"))

    def fcntl_(fd, cmd, arg=0):
        if cmd == _F_FULLFSYNC:
            flushed.append(_name_of(fd if isinstance(fd, int) else fd.fileno()))
            os.fsync(fd)
            return 0
        return fcntl.fcntl(fd, cmd, arg)

    def getrlimit(which):
        if which == resource.RLIMIT_NOFILE:
            return (256, resource.RLIM_INFINITY)
        return resource.getrlimit(which)

    pipe_sizes = [
        n for n in dir(fcntl) if "PIPE_SZ" in n or n.startswith(("F_OFD_", "F_ADD_SEALS"))
    ]
    return {
        "os": _View(os, _MACOS_OS, uname=uname),
        "fcntl": _View(fcntl, pipe_sizes, fcntl=fcntl_, F_FULLFSYNC=_F_FULLFSYNC),
        "resource": _View(resource, getrlimit=getrlimit),
        "ctypes": _View(ctypes, CDLL=_hiding_cdll(_LINUX_LIBC)),
        "mmap": _View(mmap, [n for n in dir(mmap) if n in ("MAP_POPULATE", "MADV_HUGEPAGE")]),
    }


def _hiding_cdll(names: set[str]):
    class CDLL(ctypes.CDLL):
        def __getattr__(self, name):
            if name in names:
                raise AttributeError(f"simulated: the C library has no {name}")
            return super().__getattr__(name)

        def __getitem__(self, name):
            if name in names:
                raise AttributeError(f"simulated: the C library has no {name}")
            return super().__getitem__(name)

    return CDLL


def _serve(views: dict) -> None:
    """The package's imports of these modules get their views (None: no such module)."""
    real_import = builtins.__import__

    def import_(name, globals=None, locals=None, fromlist=(), level=0):
        top = name.partition(".")[0]
        if (
            level == 0
            and top in views
            and str((globals or {}).get("__name__", "")).startswith("onnx_light")
        ):
            view = views[top]
            if view is None:
                raise ModuleNotFoundError(f"No module named {name!r} (simulated)", name=name)
            if "." not in name or not fromlist:
                real_import(name, globals, locals, fromlist, level)  # os.path and the like
                return view
        return real_import(name, globals, locals, fromlist, level)

    builtins.__import__ = import_


def install(name: str) -> None:
    """Simulate ``name`` ("windows", "windows-fat" or "macos") in this process.

    Raises:
        ValueError: an unknown name.
    """
    global simulated
    if simulated:
        return
    if name in ("windows", "windows-fat"):
        _serve(_windows(fat=name == "windows-fat"))
    elif name == "macos":
        _serve(_macos())
    else:
        raise ValueError(f"ONNX_LIGHT_SIMULATE={name!r}: windows, windows-fat or macos")
    simulated = name
