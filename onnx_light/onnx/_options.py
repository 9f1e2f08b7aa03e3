"""SerializeOptions: how :func:`onnx_light.onnx.save` lays out weights."""

from __future__ import annotations

import copy
import numbers
import os

__all__ = [
    "ONNX_IR",
    "SETTINGS",
    "SHARD_NAMINGS",
    "TRANSFORMERS_JS",
    "SerializeOptions",
    "check_alignment",
    "check_chunk_size",
    "check_max_finite_val",
    "check_max_shard_size",
    "check_min_positive_val",
    "check_num_threads",
    "check_options",
    "check_progress",
    "check_setting",
    "check_shard_naming",
    "check_size_threshold",
    "derived",
]


ONNX_IR = "onnx-ir"
TRANSFORMERS_JS = "transformers.js"
SHARD_NAMINGS = (ONNX_IR, TRANSFORMERS_JS)


def check_shard_naming(value: object) -> str:
    """Validate a shard naming: ``"onnx-ir"`` or ``"transformers.js"``.

    Raises:
        TypeError: it is not a string.
        ValueError: it is another string.
    """
    if not isinstance(value, str):
        raise TypeError(f"shard_naming must be a str, got {value!r}")
    if value not in SHARD_NAMINGS:
        raise ValueError(f"shard_naming must be one of {SHARD_NAMINGS}, got {value!r}")
    return value


MAX_ALIGNMENT = 2**30
MAX_CHUNK_SIZE = 2**30  # the kernel moves at most ~2 GiB per call anyway


def _int(value: object, name: str, what: str) -> int:
    """``value`` as an int when it is an integer (``int``, ``numpy.int64``...), not a bool.

    Raises:
        TypeError: any other type, naming the argument and what it must be.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be {what}, got {type(value).__name__} {value!r}")
    return int(value)


def check_alignment(value: object) -> int:
    """Validate an alignment: 0 or 1 (dense), or a power of two up to 1 GiB.

    One rule for ``save`` (:class:`SerializeOptions`), the streaming helpers
    and the command line.

    Args:
        value: the alignment asked for.

    Returns:
        The alignment, with 0 normalised to 1 (dense).

    Raises:
        TypeError: when it is not an int.
        ValueError: negative, not a power of two, or over :data:`MAX_ALIGNMENT`
            (the padding would make files of terabytes, or offsets no file
            system can hold).
    """
    value = _int(value, "alignment", "0 or a power of two")
    if value == 0:
        return 1
    if value < 0 or value & (value - 1) or value > MAX_ALIGNMENT:
        raise ValueError(
            f"alignment must be 0 (dense) or a power of two from 1 to 1 GiB (at most "
            f"{MAX_ALIGNMENT}), got {value}"
        )
    return value


def check_chunk_size(value: object) -> int:
    """Validate a chunk size: bytes per copy call, from 1 to 1 GiB.

    Raises:
        TypeError: when it is not an int.
        ValueError: out of range.
    """
    value = _int(value, "chunk_size", "an int")
    if value < 1:
        raise ValueError(f"chunk_size must be at least 1 byte, got {value}")
    if value > MAX_CHUNK_SIZE:
        raise ValueError(f"chunk_size must be at most 1 GiB ({MAX_CHUNK_SIZE}), got {value}")
    return value


def check_progress(value: object):
    """Validate a progress callback: None, or ``progress(done_bytes, total_bytes)``.

    Raises:
        TypeError: when it is not callable.
    """
    if value is not None and not callable(value):
        raise TypeError(f"progress must be a callable or None, got {value!r}")
    return value


def check_num_threads(value: object) -> int:
    """Validate ``num_threads`` and resolve ``None`` to the default: one thread.

    One reader, one writer, unless more are asked for: measured in fresh
    processes and interleaved rounds, more threads made no load or save faster
    beyond the rounds' spread, warm or cold (the measurements:
    :doc:`/benchmarks`). A load never runs more readers than it has data files.

    Args:
        value: ``None`` (the default, one thread) or an int >= 1.

    Returns:
        The number of threads to use.

    Raises:
        TypeError: when it is neither None nor an int.
        ValueError: when it is < 1.
    """
    if value is None:
        return 1
    value = _int(value, "num_threads", "None or an int >= 1")
    if value < 1:
        raise ValueError(f"num_threads must be None or an int >= 1, got {value!r}")
    return value


def check_size_threshold(value: object, name: str = "size_threshold") -> int:
    """Validate a size threshold in bytes (an int >= 0).

    Args:
        value: the threshold.
        name: the argument's name, for the message.

    Raises:
        TypeError: when it is not an int.
        ValueError: when it is < 0.
    """
    value = _int(value, name, "an int >= 0")
    if value < 0:
        raise ValueError(f"{name} must be at least 0 bytes, got {value!r}")
    return value


def check_max_shard_size(value: object) -> int | None:
    """Validate a shard size limit: None, or an int >= 1 (bytes).

    Raises:
        TypeError: neither None nor an int.
        ValueError: < 1.
    """
    if value is None:
        return None
    value = _int(value, "max_shard_size", "None or an int >= 1 (bytes)")
    if value < 1:
        raise ValueError(f"max_shard_size must be at least 1 byte, got {value!r}")
    return value


SMALLEST_FLOAT16 = 5.96e-08  # the smallest positive float16, a subnormal
LARGEST_FLOAT16 = 65504.0  # the largest finite float16


def _number(value: object, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number, not {type(value).__name__}")


def check_min_positive_val(value: object) -> numbers.Real:
    """Validate the float16 conversion's smallest magnitude kept: at least 5.96e-08.

    Returns:
        The value itself, its type kept (a numpy float64 clips in float64, as in
        onnxruntime's converter).

    Raises:
        TypeError: when it is not a number.
        ValueError: when it is below 5.96e-08 (or NaN).
    """
    _number(value, "min_positive_val")
    if not value >= SMALLEST_FLOAT16:
        raise ValueError(
            f"min_positive_val={value!r} is below 5.96e-08, the smallest positive float16 "
            "(a subnormal; the smallest normal is 6.104e-05)"
        )
    return value


def check_max_finite_val(value: object) -> numbers.Real:
    """Validate the float16 conversion's largest finite magnitude kept: at most 65504.

    Returns:
        The value itself, its type kept.

    Raises:
        TypeError: when it is not a number.
        ValueError: when it is above 65504 (infinite, or NaN).
    """
    _number(value, "max_finite_val")
    if not value <= LARGEST_FLOAT16:
        raise ValueError(f"max_finite_val={value!r} is above 65504, the largest finite float16")
    return value


def check_setting(name: str, value: object) -> object:
    """Check one setting by the rule every writer applies to it, as a script or a
    command line checks its arguments before any work.

    The rules: ``alignment`` 0 or 1 (dense) or a power of two up to 1 GiB;
    ``size_threshold`` and ``inline_below`` a non-negative int;
    ``max_shard_size`` a positive int or None; ``chunk_size`` 1 byte to 1 GiB;
    ``num_threads`` a positive int; ``shard_naming`` one of
    :data:`~onnx_light.onnx.SHARD_NAMINGS`; the float16 conversion's clipping
    limits, ``min_positive_val`` a number of at least 5.96e-08 and
    ``max_finite_val`` one of at most 65504 (float16's own range).

    Args:
        name: one of ``"alignment"``, ``"size_threshold"``, ``"inline_below"``,
            ``"max_shard_size"``, ``"chunk_size"``, ``"num_threads"``, ``"shard_naming"``,
            ``"min_positive_val"``, ``"max_finite_val"``.
        value: its value.

    Returns:
        The value as the writers use it (an int, where it is a number).

    Raises:
        TypeError: the value has the wrong type (``alignment="4096"``).
        ValueError: it is out of range, or ``name`` is no setting; the message
            says what the setting must be.

    Examples:
        ::

            from onnx_light.onnx import check_setting

            check_setting("alignment", 4096)  # 4096
            check_setting("alignment", 3000)  # ValueError: alignment must be ... a power of two
    """
    checks = {
        "alignment": check_alignment,
        "size_threshold": check_size_threshold,
        "inline_below": lambda v: check_size_threshold(v, "inline_below"),
        "max_shard_size": check_max_shard_size,
        "chunk_size": check_chunk_size,
        "num_threads": check_num_threads,
        "shard_naming": check_shard_naming,
        "min_positive_val": check_min_positive_val,
        "max_finite_val": check_max_finite_val,
    }
    if name not in checks:
        raise ValueError(f"{name!r} is no setting: one of {', '.join(SETTINGS)}")
    return checks[name](value)


SETTINGS = (
    "alignment",
    "size_threshold",
    "inline_below",
    "max_shard_size",
    "chunk_size",
    "num_threads",
    "shard_naming",
    "min_positive_val",
    "max_finite_val",
)


def check_options(options: object) -> SerializeOptions:
    """The options to use: ``options`` itself, or the defaults when it is None.

    Raises:
        TypeError: when it is neither None nor a :class:`SerializeOptions`.
    """
    if options is None:
        return SerializeOptions()
    if not isinstance(options, SerializeOptions):
        raise TypeError(f"options must be a SerializeOptions or None, got {options!r}")
    return options


def derived(options: SerializeOptions, **changes: object) -> SerializeOptions:
    """A copy of ``options`` with ``changes`` set, every other setting kept.

    Writers that must change a setting (the shared save keeps references)
    copy the caller's object whole, so a setting added later cannot be lost
    by a rebuild field by field; the caller's object is not modified.
    """
    new = copy.copy(options)
    for name, value in changes.items():
        setattr(new, name, value)
    return new


class SerializeOptions:
    """Options of :func:`onnx_light.onnx.save`, mutable and checked on assignment.

    Attributes:
        alignment: offsets of tensors in the weights file are multiples of it
            (a power of two; 0 or 1 means dense). Default 0.
        size_threshold: tensors whose raw data is smaller (in bytes) stay inline
            in the ``.onnx`` file. Default 1024.
        use_external_data_location: tensors already stored as external data
            keep their ``external_data`` entries verbatim (True, default) or have
            their bytes streamed into the new weights file (False).
        num_threads: parallel writers of the tensors held in memory;
            ``None`` (default): one (more did not make a save faster, see
            :func:`~onnx_light.onnx.load`'s ``num_threads``).
        max_shard_size: split the weights file into shards of at most this
            many bytes, named as onnx-ir names them
            (``model-00001-of-00003.onnx.data``); None (default): one file.
        shard_naming: ``"onnx-ir"`` (default) or ``"transformers.js"``
            (``model.onnx_data``, ``model.onnx_data_1``...: the names its
            loader derives from ``model.onnx``, at most 100 files).
        durable: flush the new files and their folder to the disk before the
            call returns (``fsync``), even when they replace nothing; a save
            that replaces existing files always does. Default False.
        base_dir: where external references are read from when
            ``use_external_data_location`` is False: the folder the model was
            loaded from, or the ``.onnx`` file itself (then, as in ``load``,
            a file may also lie in the folder of its real path, e.g. in a
            Hugging Face cache); ``None`` means the destination folder.

    Example::

        opts = SerializeOptions()
        opts.alignment = 4096
    """

    __slots__ = (
        "_alignment",
        "_size_threshold",
        "use_external_data_location",
        "_num_threads",
        "base_dir",
        "_max_shard_size",
        "_shard_naming",
        "durable",
    )

    def __init__(
        self,
        alignment: int = 0,
        size_threshold: int = 1024,
        use_external_data_location: bool = True,
        num_threads: int | None = None,
        base_dir: str | os.PathLike | None = None,
        max_shard_size: int | None = None,
        shard_naming: str = "onnx-ir",
        durable: bool = False,
    ) -> None:
        self.alignment = alignment
        self.size_threshold = size_threshold
        self.use_external_data_location = bool(use_external_data_location)
        self.num_threads = num_threads
        self.base_dir = base_dir
        self.max_shard_size = max_shard_size
        self.shard_naming = shard_naming
        self.durable = bool(durable)

    @property
    def alignment(self) -> int:
        return self._alignment

    @alignment.setter
    def alignment(self, value: int) -> None:
        check_alignment(value)
        self._alignment = int(value)  # 0 stays 0 (dense), as given

    @property
    def size_threshold(self) -> int:
        return self._size_threshold

    @size_threshold.setter
    def size_threshold(self, value: int) -> None:
        self._size_threshold = check_size_threshold(value)

    @property
    def num_threads(self) -> int | None:
        return self._num_threads

    @num_threads.setter
    def num_threads(self, value: int | None) -> None:
        self._num_threads = None if value is None else check_num_threads(value)

    @property
    def max_shard_size(self) -> int | None:
        return self._max_shard_size

    @max_shard_size.setter
    def max_shard_size(self, value: int | None) -> None:
        self._max_shard_size = check_max_shard_size(value)

    @property
    def shard_naming(self) -> str:
        return self._shard_naming

    @shard_naming.setter
    def shard_naming(self, value: str) -> None:
        self._shard_naming = check_shard_naming(value)

    def __repr__(self) -> str:
        return (
            f"SerializeOptions(alignment={self.alignment}, size_threshold={self.size_threshold}, "
            f"use_external_data_location={self.use_external_data_location}, "
            f"num_threads={self.num_threads}, base_dir={self.base_dir!r}, "
            f"max_shard_size={self.max_shard_size}, shard_naming={self.shard_naming!r}, "
            f"durable={self.durable})"
        )
