"""The one ending of every writer: serialize each ``.onnx``, check the 2 GiB limit, write, commit.

save, the shared save, ``save_edited``, align and dedup (and the converter)
all end here, after their weights files went into the same
:class:`~onnx_light.onnx._commit.atomic.AtomicFiles`: each model is serialized with its tensors
substituted (:func:`~onnx_light.onnx._plan.serialize.serialize_pieces`: placed references, and
inline bytes as spans of source files, never read into memory), checked
against protobuf's limit, written by the copy engine, then every file is
committed together.
"""

from __future__ import annotations

from collections.abc import Sequence

import onnx

from .._commit.atomic import AtomicFiles
from .._errors import shown
from .._plan.serialize import piece_size, serialize_pieces
from .._read.scan import PROTOBUF_LIMIT
from .._read.sources import SourceFiles
from .writer import write_pieces

__all__ = ["finish"]


def finish(
    out: AtomicFiles,
    models: Sequence[tuple[str, onnx.ModelProto, dict]],
    files: SourceFiles,
    chunk_size: int = 4 * 1024 * 1024,
    too_large: str = "store more tensors in the weights file",
) -> None:
    """Write every ``.onnx`` of a call into ``out``, then commit all its files together.

    Args:
        out: the call's atomic files (its weights already written there).
        models: ``(destination path, model, substitutions by tensor path)`` per model.
        files: the call's source files (spans of inline bytes are copied from them).
        chunk_size: bytes per copy system call.
        too_large: what to do when a model would exceed protobuf's 2 GiB.

    Raises:
        ValueError: a model cannot be serialized, or would exceed 2 GiB; nothing
            is committed then.
        OSError: a write or a rename failed; nothing is committed then.
    """
    for path, model, subs in models:
        try:
            pieces = serialize_pieces(model, subs)
        except ValueError as e:  # e.g. a message protobuf cannot encode
            raise ValueError(f"cannot serialize the model for {shown(path)}: {e}") from None
        size = piece_size(pieces)
        if size > PROTOBUF_LIMIT:
            raise ValueError(
                f"{shown(path)} would hold {size} bytes, over protobuf's 2 GiB limit: {too_large}"
            )
        write_pieces(out.create(path), pieces, files, chunk_size)
    out.commit(release=files.close)  # no source open at a rename (Windows)
