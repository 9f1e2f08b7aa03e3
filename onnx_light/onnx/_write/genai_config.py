"""onnxruntime-genai's ``genai_config.json``, made to name the models a call renamed.

onnxruntime-genai loads a folder by its ``genai_config.json``, which names
each model file it runs (``model.decoder.filename``, the encoder's, the
vision and embedding models', each entry of a decoder ``pipeline``: every
``filename`` key). A writer that copies the config beside models it wrote
under other names (``dedup --out`` writes ``fp32/model.onnx`` as
``fp32_model.onnx``) writes the copy with those names replaced, and nothing
else changed: the same keys in the same order, the same values (written
back by :mod:`json`, four spaces of indent as onnxruntime-genai's builder
writes them, its final newline kept or not as the source had it).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping

__all__ = ["GENAI_CONFIG", "renamed_config"]


GENAI_CONFIG = "genai_config.json"
_KEY = "filename"  # the key every model entry of the config names its file with


def renamed_config(
    data: bytes, renames: Mapping[str, str], path: str
) -> tuple[bytes, dict[str, str]] | None:
    """The config ``data`` with every ``filename`` that names a renamed model replaced.

    Args:
        data: the bytes of a ``genai_config.json``.
        renames: ``{the model's file name in the source folder: its new name}``.
        path: the file, for messages.

    Returns:
        ``(the new bytes, {old name: new name} for the names replaced)``, or
        None when the config names none of the renamed models.

    Raises:
        ValueError: ``data`` is not JSON (naming the file and the models
            renamed: a copy naming the old files would not load).
    """
    try:
        config = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        names = ", ".join(f"{old} -> {new}" for old, new in renames.items())
        raise ValueError(
            f"{path} is not JSON ({e}): the models it names are written under new names "
            f"({names}), and a copy naming the old ones would not load; fix the file, or "
            "leave it out of the files to copy"
        ) from None
    done: dict[str, str] = {}
    _rename(config, renames, done)
    if not done:
        return None
    text = json.dumps(config, indent=4, ensure_ascii=False)
    if data.endswith(b"\n"):
        text += "\n"
    return text.encode("utf-8"), done


def _rename(node, renames: Mapping[str, str], done: dict[str, str]) -> None:
    """Replace, in place, every ``filename`` string of ``node`` that is a renamed model."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == _KEY and isinstance(value, str):
                new = renames.get(os.path.normpath(value))
                if new is not None:
                    node[key] = new
                    done[value] = new
            else:
                _rename(value, renames, done)
    elif isinstance(node, list):
        for value in node:
            _rename(value, renames, done)
