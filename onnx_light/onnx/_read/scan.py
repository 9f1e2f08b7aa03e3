"""The scanner's entry points: a model's metadata, parsed without its weights.

``scan_model`` parses an ``.onnx`` through the wire scanner (its inline
weights become references into the file itself, never read);
``external_refs`` checks every external reference and opens its file. Load,
save, align, the pruning of left-over files and ``info``/``verify`` all
start here.
"""

from __future__ import annotations

import os
import stat

import onnx
from google.protobuf.message import DecodeError

from .._errors import shown
from .external import InlineSpans, Resolver, TensorRef
from .sources import SourceFile, SourceFiles
from .tensors import is_external, iter_tensors
from .wire import scan_file

__all__ = [
    "PROTOBUF_LIMIT",
    "external_refs",
    "model_files",
    "own_location",
    "parse_model",
    "ref_key",
    "scan_model",
]


PROTOBUF_LIMIT = 2**31 - 1


def parse_model(data: bytes, path: str) -> onnx.ModelProto:
    """Parse serialized model bytes, with an error that names the file.

    Raises:
        ValueError: the bytes are not an ONNX model.
    """
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except (DecodeError, RuntimeError) as e:
        raise ValueError(f"{shown(path)} is not a valid ONNX model: {e}") from None
    if not model.HasField("graph") and not model.ir_version and not len(model.functions):
        raise ValueError(
            f"{shown(path)} is not a valid ONNX model: no graph, ir_version or function"
        )
    return model


def own_location(path: str) -> str:
    """The ``location`` recorded for the inline bytes of the model file ``path``.

    Its name, or, when the name is not valid UTF-8 (which a protobuf string
    must be), the name with its undecodable bytes escaped.
    """
    return os.fsencode(os.path.basename(path)).decode("utf-8", "backslashreplace")


def scan_model(
    path: str, files: SourceFiles, threshold: int = 1024
) -> tuple[onnx.ModelProto, InlineSpans]:
    """Parse a model without reading its inline weights (``skip_raw_data``).

    The model file is opened once, through ``files``; its inline raw_data of
    at least ``threshold`` bytes become references into the file itself.

    Returns:
        ``(model, inline)``: the metadata, and the spans of the inline bytes
        (to be read from the opened model file).

    Raises:
        FileNotFoundError: the file is missing.
        ValueError: it is not an ONNX model (or not a regular file).
    """
    source = files.model(path)
    location = own_location(path)
    with files.lease(source) as fd:
        data, converted = scan_file(fd, source.size, location, threshold, repr(path))
    return parse_model(data, path), InlineSpans(location, frozenset(converted), source)


def external_refs(
    model: onnx.ModelProto,
    base_dir: str,
    files: SourceFiles,
    inline: InlineSpans | None = None,
    source: SourceFile | None = None,
) -> list[TensorRef]:
    """Check every external reference of ``model`` (read from ``source``) and open its file.

    Raises:
        FileNotFoundError: a referenced file is missing.
        ExternalDataError: a reference is malformed, unsafe or out of range.
    """
    resolver = Resolver(base_dir, files, inline, source)
    return [resolver.resolve(s) for s in iter_tensors(model) if is_external(s.tensor)]


def ref_key(ref: TensorRef) -> tuple[str, int, int]:
    """What a reference reads, as a model records it: (location, offset, length)."""
    return (os.path.normpath(ref.location), ref.offset, ref.length)


def model_files(
    path: str, files: SourceFiles
) -> tuple[set[tuple[int, int]], set[tuple[str, int, int]]]:
    """The files the model ``path`` is made of, and the byte ranges it references.

    What an in-place save may replace: the model being replaced and its own
    weights; and what the saved model may read from them: the ranges the
    replaced model itself references (:func:`ref_key`). Empty when ``path``
    is not a regular file with a single link (a second name would still read
    the old files), or cannot be read as a model.

    Returns:
        ``(identities of the model and of its data files, its references)``.
    """
    try:
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
            return set(), set()
        model, spans = scan_model(path, files)
        refs = external_refs(model, os.path.dirname(path), files, spans, spans.source)
    except (OSError, ValueError):
        return set(), set()
    identities = {spans.source.identity} | {ref.source.identity for ref in refs}
    return identities, {ref_key(ref) for ref in refs}
