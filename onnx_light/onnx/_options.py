"""The settings of every writer (:class:`WriteOptions`, and :class:`SerializeOptions`,
``save``'s view of it) and each setting's one check."""

from __future__ import annotations

import copy
import numbers
import os
from collections.abc import Callable

__all__ = [
    "LARGEST_FLOAT16",
    "ONNX_IR",
    "SETTINGS",
    "SHARD_NAMINGS",
    "SMALLEST_FLOAT16",
    "TRANSFORMERS_JS",
    "SerializeOptions",
    "WriteOptions",
    "check_alignment",
    "check_chunk_size",
    "check_limits",
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


def _limit(value: object, name: str) -> None:
    """A clipping limit: a finite number within float16's positive range."""
    _number(value, name)
    if value < SMALLEST_FLOAT16:
        raise ValueError(
            f"{name}={value!r} is below 5.96e-08, the smallest positive float16 (a "
            "subnormal; the smallest normal is 6.104e-05)"
        )
    if value > LARGEST_FLOAT16:
        raise ValueError(
            f"{name}={value!r} is above 65504, the largest finite float16: clipped "
            "weights would become infinite"
        )
    if value != value:
        raise ValueError(f"{name}={value!r} is not a number: give one from 5.96e-08 to 65504")


def check_min_positive_val(value: object) -> numbers.Real:
    """Validate the float16 conversion's smallest magnitude kept: 5.96e-08 to 65504.

    Returns:
        The value itself, its type kept (a numpy float64 clips in float64, as in
        onnxruntime's converter).

    Raises:
        TypeError: when it is not a number.
        ValueError: when it is below 5.96e-08 or above 65504 (infinite, or NaN).
    """
    _limit(value, "min_positive_val")
    return value


def check_max_finite_val(value: object) -> numbers.Real:
    """Validate the float16 conversion's largest finite magnitude kept: 5.96e-08 to 65504.

    Returns:
        The value itself, its type kept.

    Raises:
        TypeError: when it is not a number.
        ValueError: when it is below 5.96e-08 or above 65504 (infinite, or NaN).
    """
    _limit(value, "max_finite_val")
    return value


def check_limits(min_positive_val: object, max_finite_val: object) -> None:
    """Validate both clipping limits, each (:func:`check_min_positive_val`,
    :func:`check_max_finite_val`) and together: the smallest magnitude kept is not
    above the largest.

    Raises:
        TypeError: a limit is not a number.
        ValueError: a limit is out of range, or ``min_positive_val`` is above
            ``max_finite_val``.
    """
    check_min_positive_val(min_positive_val)
    check_max_finite_val(max_finite_val)
    if min_positive_val > max_finite_val:
        raise ValueError(
            f"min_positive_val={min_positive_val!r} is above max_finite_val="
            f"{max_finite_val!r}: every weight would be clipped to one of them; give "
            "min_positive_val a value at most max_finite_val"
        )


def check_setting(name: str, value: object) -> object:
    """Check one setting by the rule every writer applies to it, as a script or a
    command line checks its arguments before any work.

    The rules: ``alignment`` 0 or 1 (dense) or a power of two up to 1 GiB;
    ``size_threshold`` and ``inline_below`` a non-negative int;
    ``max_shard_size`` a positive int or None; ``chunk_size`` 1 byte to 1 GiB;
    ``num_threads`` a positive int; ``shard_naming`` ``"onnx-ir"`` or
    ``"transformers.js"``; the float16 conversion's clipping
    limits, ``min_positive_val`` and ``max_finite_val`` finite numbers from
    5.96e-08 to 65504 (float16's own positive range); a call that takes both
    also refuses ``min_positive_val`` above ``max_finite_val``.

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


def check_options(options: object, cls: type = None, **given: object) -> WriteOptions:
    """The settings of one call: ``options``, the defaults of ``cls`` when it is None, with
    the arguments ``given`` (the original API's positional ``alignment`` and
    ``chunk_size`` of ``align_external_data_streaming``) set on a copy when not None.

    Raises:
        TypeError: ``options`` is neither None nor a :class:`WriteOptions` (the
            message names ``cls``, :class:`SerializeOptions` for ``save``).
        ValueError: a value of ``given`` is out of range.
    """
    cls = cls or WriteOptions
    if options is None:
        options = cls()
    elif not isinstance(options, WriteOptions):
        kinds = {cls.__name__: None, WriteOptions.__name__: None}  # the verb's, then the base
        raise TypeError(f"options must be a {', a '.join(kinds)} or None, got {options!r}")
    given = {name: value for name, value in given.items() if value is not None}
    return derived(options, **given) if given else options


def derived(options: WriteOptions, **changes: object) -> WriteOptions:
    """A copy of ``options`` with ``changes`` set, every other setting kept.

    Writers that must change a setting (the shared save keeps references)
    copy the caller's object whole, so a setting added later cannot be lost
    by a rebuild field by field; the caller's object is not modified.
    """
    new = copy.copy(options)
    for name, value in changes.items():
        setattr(new, name, value)
    return new


class WriteOptions:
    """How a writer writes weights: the settings every writer takes, as ``options=``.

    One object for :func:`~onnx_light.onnx.save`,
    :func:`~onnx_light.onnx.save_model_with_shared_external_data`,
    :func:`~onnx_light.onnx.align_external_data_streaming`,
    :func:`~onnx_light.onnx.deduplicate_external_data`,
    :func:`~onnx_light.onnx.save_edited` and
    :func:`~onnx_light.onnx.convert_float_to_float16`; each setting is
    checked when it is set (the constructor included), by the rule every
    writer and the command line apply, so a value means the same thing and
    fails the same way everywhere: a value of the wrong type
    (``alignment="4096"``, ``max_shard_size=True``) raises
    :class:`TypeError`, one out of range :class:`ValueError`. A writer never
    modifies the object it is given.

    :class:`SerializeOptions`, the settings of the original API's ``save``,
    is this object with onnx.save's defaults (``alignment`` 0: dense).

    Attributes:
        alignment: offsets of tensors in a weights file are multiples of it:
            0 or 1 dense (no padding), else a power of two up to 1 GiB.
            Default 4096.
        size_threshold: inline tensors of at least this many bytes move to
            the weights file; smaller ones stay inline in the ``.onnx``.
            None (default): onnx.save's 1024, except for
            ``align_external_data_streaming``, which leaves inline tensors
            inline (but in a source without any external data: re-aligning a
            single file means giving it external data, and 1024 applies).
        max_shard_size: split the weights into files of at most this many
            bytes, each tensor whole in one file, aligned within it (a tensor
            larger than the limit is alone in its file); every file and the
            ``.onnx`` are committed together. None (default): one file.
        shard_naming: how shards are named: ``"onnx-ir"``
            (``model-00001-of-00003.onnx.data`` for ``model.onnx.data``) or
            ``"transformers.js"`` (``model.onnx_data``, ``model.onnx_data_1``...,
            at most 100 files: the names its loader derives from
            ``model.onnx``; the default weights name is then ``DST_data``).
            None (default): ``"onnx-ir"``, or, in place, the naming the
            model's shards already follow.
        chunk_size: bytes per copy call, and between two ``progress`` calls,
            from 1 byte to 1 GiB. Default 4 MiB. Without ``progress``, copies
            the filesystem may share (XFS, btrfs) go in calls of up to 1 GiB:
            sharing blocks is a metadata operation.
        num_threads: parallel writers of the tensors held in memory (a
            model given to ``save``); None (default): one (more did not make
            a save faster, see :func:`~onnx_light.onnx.load`'s
            ``num_threads``).
        durable: flush the new files and their folder to the disk before
            the call returns (``fsync``), so a power cut after it cannot lose
            them, even when they replace nothing; a call that replaces
            existing files always does. Default False.
        drop_behind: drop the copied ranges of the sources and the
            destination from the page cache as the copy goes (the
            destination's written to the disk first), so a copy larger than
            the memory leaves the rest of the cache alone. None (default):
            when the bytes to copy exceed the memory available (the kernel's
            ``MemAvailable``, or the room left in the process's memory
            cgroup); the sources' ranges only when the copy is at least 64 MiB
            and its source is cold (less than half of a few probed ranges in
            the page cache), the destination kept cached for the next step.
        remove_unreferenced: a call that replaces its source model in place
            (align, dedup, convert) lists the weights files the old model read
            that no ``.onnx`` of its folder references any more (the result's
            ``unreferenced``); True deletes them too (``removed``). Default
            False.
        progress: ``progress(done_bytes, total_bytes)``, called while the
            weights are written, at least once per ``chunk_size`` and last
            with ``done == total`` (``(0, 0)`` when no weights file is
            written); the total may be refined as a call learns. None
            (default): none.

    Example::

        from onnx_light.onnx import WriteOptions, align_external_data_streaming

        opts = WriteOptions(max_shard_size=2 * 1024**3, durable=True)
        align_external_data_streaming("model.onnx", "aligned.onnx", options=opts)

    .. versionadded:: 0.1
    """

    __slots__ = (
        "_alignment",
        "_size_threshold",
        "_max_shard_size",
        "_shard_naming",
        "_chunk_size",
        "_num_threads",
        "durable",
        "drop_behind",
        "remove_unreferenced",
        "_progress",
    )

    _WRITER_DEFAULTS = True  # size_threshold and shard_naming may be None: the writer's own

    def __init__(
        self,
        *,
        alignment: int = 4096,
        size_threshold: int | None = None,
        max_shard_size: int | None = None,
        shard_naming: str | None = None,
        chunk_size: int = 4 * 1024 * 1024,
        num_threads: int | None = None,
        durable: bool = False,
        drop_behind: bool | None = None,
        remove_unreferenced: bool = False,
        progress: Callable[[int, int], None] | None = None,
    ) -> None:
        self.alignment = alignment
        self.size_threshold = size_threshold
        self.max_shard_size = max_shard_size
        self.shard_naming = shard_naming
        self.chunk_size = chunk_size
        self.num_threads = num_threads
        self.durable = bool(durable)
        self.drop_behind = None if drop_behind is None else bool(drop_behind)
        self.remove_unreferenced = bool(remove_unreferenced)
        self.progress = progress

    @property
    def alignment(self) -> int:
        return self._alignment

    @alignment.setter
    def alignment(self, value: int) -> None:
        check_alignment(value)
        self._alignment = int(value)  # 0 stays 0 (dense), as given

    @property
    def size_threshold(self) -> int | None:
        return self._size_threshold

    @size_threshold.setter
    def size_threshold(self, value: int | None) -> None:
        writer_default = value is None and self._WRITER_DEFAULTS
        self._size_threshold = None if writer_default else check_size_threshold(value)

    @property
    def max_shard_size(self) -> int | None:
        return self._max_shard_size

    @max_shard_size.setter
    def max_shard_size(self, value: int | None) -> None:
        self._max_shard_size = check_max_shard_size(value)

    @property
    def shard_naming(self) -> str | None:
        return self._shard_naming

    @shard_naming.setter
    def shard_naming(self, value: str | None) -> None:
        writer_default = value is None and self._WRITER_DEFAULTS
        self._shard_naming = None if writer_default else check_shard_naming(value)

    @property
    def chunk_size(self) -> int:
        return self._chunk_size

    @chunk_size.setter
    def chunk_size(self, value: int) -> None:
        self._chunk_size = check_chunk_size(value)

    @property
    def num_threads(self) -> int | None:
        return self._num_threads

    @num_threads.setter
    def num_threads(self, value: int | None) -> None:
        self._num_threads = None if value is None else check_num_threads(value)

    @property
    def progress(self) -> Callable[[int, int], None] | None:
        return self._progress

    @progress.setter
    def progress(self, value: Callable[[int, int], None] | None) -> None:
        self._progress = check_progress(value)

    def _fields(self) -> list[str]:
        mro = reversed(type(self).__mro__)
        return [name.lstrip("_") for cls in mro for name in getattr(cls, "__slots__", ())]

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._fields())
        return f"{type(self).__name__}({fields})"


class SerializeOptions(WriteOptions):
    """The settings of :func:`~onnx_light.onnx.save` as the original API names them.

    A :class:`WriteOptions` (every writer takes it, and every setting means
    what it says there) with the defaults of ``onnx.save``, and two settings
    of its own for a model held in memory. The exception a reader meets
    here: ``alignment`` defaults to **0**, tensors packed densely as onnx
    writes them, where :class:`WriteOptions` aligns to 4096; set it
    (``opts.alignment = 4096``) for aligned weights. ``size_threshold``
    defaults to 1024 and ``shard_naming`` to ``"onnx-ir"`` (neither takes
    None). The other settings keep :class:`WriteOptions`'s defaults.

    Attributes:
        use_external_data_location: tensors already stored as external data
            keep their ``external_data`` entries verbatim (True, default) or
            have their bytes streamed into the new weights file (False).
        base_dir: where external references are read from when
            ``use_external_data_location`` is False: the folder the model was
            loaded from, or the ``.onnx`` file itself (then, as in ``load``,
            a file may also lie in the folder of its real path, e.g. in a
            Hugging Face cache); ``None`` means the destination folder.

    Example::

        opts = SerializeOptions()
        opts.alignment = 4096

    .. versionadded:: 0.1
    """

    __slots__ = ("use_external_data_location", "base_dir")

    _WRITER_DEFAULTS = False

    def __init__(
        self,
        alignment: int = 0,
        size_threshold: int = 1024,
        use_external_data_location: bool = True,
        num_threads: int | None = None,
        base_dir: str | os.PathLike | None = None,
        max_shard_size: int | None = None,
        shard_naming: str = ONNX_IR,
        durable: bool = False,
        **settings: object,
    ) -> None:
        super().__init__(
            alignment=alignment,
            size_threshold=size_threshold,
            num_threads=num_threads,
            max_shard_size=max_shard_size,
            shard_naming=shard_naming,
            durable=durable,
            **settings,
        )
        self.use_external_data_location = bool(use_external_data_location)
        self.base_dir = base_dir
