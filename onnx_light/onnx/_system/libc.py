"""The C library's system calls that ``os`` does not wrap, loaded once with ctypes.

``renameat2`` (an exchange of two names), ``fallocate`` (reserve blocks,
never emulated by writing) and ``fstatfs`` (which filesystem a file is on).
"""

from __future__ import annotations

import ctypes
import os

__all__ = ["last_error", "libc_function"]


_cache: dict[str, object] = {}


def libc_function(name: str, argtypes: list, restype=ctypes.c_int):
    """The C function ``name`` with its signature set, or None where the C library lacks it.

    Args:
        name: the function's name in the C library.
        argtypes: its ctypes argument types.
        restype: its ctypes return type.

    Returns:
        A callable (errno is kept: read it with :func:`last_error`), or None.
    """
    if name not in _cache:
        try:
            func = getattr(ctypes.CDLL(None, use_errno=True), name)
            func.argtypes = argtypes
            func.restype = restype
        except (OSError, AttributeError, TypeError):  # Windows: CDLL(None) is a TypeError
            func = None
        _cache[name] = func
    return _cache[name]


def last_error(path: str | None = None) -> OSError:
    """The OSError of the last failed call of a :func:`libc_function`."""
    err = ctypes.get_errno()
    return (
        OSError(err, os.strerror(err), path) if path is not None else OSError(err, os.strerror(err))
    )
