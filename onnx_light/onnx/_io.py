"""load and save: ONNX models with external data, aligned and in parallel."""

from __future__ import annotations

import os
import stat

import onnx
from google.protobuf.message import DecodeError

from ._atomic import destination_dir, write_file_atomic
from ._errors import ExternalDataError
from ._external import Resolver, set_inline
from ._files import read_refs
from ._options import SerializeOptions, check_num_threads, check_options
from ._plan import SavePlan
from ._tensors import is_external, iter_tensors
from ._wire import scan_metadata

PROTOBUF_LIMIT = 2**31 - 1


def _check_model_file(path: str) -> int:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise FileNotFoundError(f"model file {path!r} does not exist") from None
    if os.path.isdir(path):
        raise IsADirectoryError(f"model path {path!r} is a folder, not an .onnx file")
    if not stat.S_ISREG(st.st_mode):
        raise ValueError(f"model path {path!r} is not a regular file (a FIFO or a device?)")
    if st.st_size == 0:
        raise ValueError(f"model file {path!r} is empty, not an ONNX model")
    return st.st_size


def parse_model(data: bytes, path: str) -> onnx.ModelProto:
    """Parse serialized model bytes, with an error that names the file.

    Raises:
        ValueError: the bytes are not an ONNX model.
    """
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except (DecodeError, RuntimeError) as e:
        raise ValueError(f"{path!r} is not a valid ONNX model: {e}") from None
    if not model.HasField("graph") and not model.ir_version and not len(model.functions):
        raise ValueError(f"{path!r} is not a valid ONNX model: no graph, ir_version or function")
    return model


def read_metadata(path: str, threshold: int = 1024) -> tuple[onnx.ModelProto, set]:
    """Parse a model without reading its inline weights (``skip_raw_data``).

    Returns:
        ``(model, converted)``: inline raw_data of at least ``threshold`` bytes
        became references into the file itself; ``converted`` holds their
        ``(offset, length)``.
    """
    path = os.fsdecode(path)
    _check_model_file(path)
    data, converted = scan_metadata(path, threshold)
    return parse_model(data, path), set(converted)


def read_external_data(
    model: onnx.ModelProto, base_dir: str, num_threads: int | None = None
) -> None:
    """Read every external tensor of ``model`` into its ``raw_data``, in place.

    All references are checked before anything is read. There is never more
    than one reader per data file: on one file, more readers only add page
    faults (each thread's buffers come from its own allocator pool, handed
    back to the kernel after every tensor) while protobuf, holding the GIL,
    copies the bytes in one at a time (``make bench``: 1.1x the time of one
    reader at 1 GiB).

    Raises:
        FileNotFoundError: a referenced file is missing.
        ExternalDataError: a reference is malformed, unsafe or out of range.
    """
    check_num_threads(num_threads)
    resolver = Resolver(base_dir)
    refs = [resolver.resolve(s) for s in iter_tensors(model) if is_external(s.tensor)]
    files = len({ref.file for ref in refs})
    threads = min(check_num_threads(num_threads, files=files), max(files, 1))
    for ref, data in read_refs(refs, threads):
        set_inline(ref.site.tensor, data)


def load(
    path: str | os.PathLike,
    *,
    load_external_data: bool = True,
    skip_raw_data: bool = False,
    num_threads: int | None = None,
) -> onnx.ModelProto:
    """Load an ONNX model, its external data read in parallel.

    Args:
        path: the ``.onnx`` file.
        load_external_data: read every external tensor into ``raw_data``
            (the tensors :func:`onnx.load` returns); False keeps the references.
        skip_raw_data: never read the inline weights of the ``.onnx`` file:
            every inline raw_data of 1 KiB or more becomes an external
            reference into the ``.onnx`` file itself (location = its name,
            offset and length of the bytes). Requires ``load_external_data=False``.
        num_threads: parallel readers, at most one per data file (None:
            one per data file, at most 4 and the number of CPUs).

    Returns:
        An :class:`onnx.ModelProto`.

    Raises:
        FileNotFoundError: the model or one of its data files is missing.
        ValueError: the file is not an ONNX model, or both
            ``skip_raw_data`` and ``load_external_data`` are set.
        ExternalDataError: a reference is malformed, unsafe or out of range.
    """
    path = os.fsdecode(path)
    check_num_threads(num_threads)
    if skip_raw_data and load_external_data:
        raise ValueError("skip_raw_data=True needs load_external_data=False")
    if skip_raw_data:
        return read_metadata(path)[0]
    size = _check_model_file(path)
    with open(path, "rb") as f:
        data = f.read(size)
    model = parse_model(data, path)
    del data
    if load_external_data:
        read_external_data(model, os.path.dirname(os.path.abspath(path)), num_threads)
    return model


def save(
    model: onnx.ModelProto,
    path: str | os.PathLike,
    location: str | os.PathLike | None = None,
    *,
    options: SerializeOptions | None = None,
) -> None:
    """Save a model, its big tensors in an aligned external weights file.

    Without ``location`` the model is saved as one file. With it, every tensor
    whose raw_data holds at least ``options.size_threshold`` bytes goes to the
    weights file ``location`` at an offset aligned to ``options.alignment``,
    in the walker's order. The caller's model is not modified; both files are
    written atomically.

    Args:
        model: the model to save.
        path: the destination ``.onnx`` file.
        location: the weights file: a name (placed next to ``path``) or a path
            inside ``path``'s folder.
        options: a :class:`SerializeOptions` (defaults when None).

    Raises:
        ValueError: the model exceeds 2 GiB without ``location``, or
            ``location`` lies outside the model's folder.
        FileNotFoundError: the destination folder or a referenced file is missing.
        ExternalDataError: an existing reference is unsafe or does not
            resolve from the destination folder.
        TypeError: ``model`` is not a ModelProto, or ``options`` not a
            :class:`SerializeOptions`.
    """
    options = check_options(options)
    path = os.path.abspath(os.fsdecode(path))
    destination_dir(path)
    plan = SavePlan(model, path, location, options)
    if location is None:
        if plan.inline_bytes > PROTOBUF_LIMIT:
            raise ValueError(
                f"model for {path!r} holds {plan.inline_bytes} bytes of tensor data, over "
                "protobuf's 2 GiB limit: pass location= to store the weights in a second file"
            )
        try:
            data = plan.serialize()
        except ValueError as e:
            raise ValueError(f"cannot serialize the model for {path!r}: {e}") from None
        write_file_atomic(path, data)
        return
    plan.write()


__all__ = ["load", "save", "ExternalDataError"]
