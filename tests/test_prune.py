"""Pruning (``_commit/prune.py``): the weights files a call leaves behind, removed only when safe.

``remove_unreferenced=True`` (``--prune``) removes the files the old model read
and the new one no longer does, once no other model of the folder reads them.
A model of the folder that cannot be read might read them: the prune keeps the
files and warns, naming the model it could not read, at the caller's line. A
file the new model still reads is kept, the next ones are still removed, and a
file someone else deleted first is no error. A ``.safetensors`` is never pruned,
whatever the case of its extension. Which models read a file is in
``test_other_readers.py``.
"""

from __future__ import annotations

import os
import warnings

import pytest
from helpers import read_back, run_cli, save_two_file, tensor_bytes, uint8_model

import onnx_light.onnx as onnxl
from onnx_light.onnx._commit import prune as _prune


def _two_file(folder, name="m.onnx"):
    """``folder/name`` + ``name.data`` (two uint8 tensors, saved by onnx); its tensors' bytes."""
    model = uint8_model(2, 3000)
    save_two_file(model, folder / name, size_threshold=0)
    return folder / name, tensor_bytes(model)


def _not_a_model(path) -> None:
    path.write_bytes(b"\xff\xff\xff\xff not a protobuf")


# -- a model of the folder that cannot be read ----------------------------------------


def test_dedup_prune_keeps_files_when_a_model_cannot_be_read(tmp_path):
    """Dedup in place to a new weights name leaves m.onnx.data unreferenced, but a.onnx
    (not a model) might read it: nothing is listed or removed, and one UserWarning names
    the model file and a.onnx."""
    path, expected = _two_file(tmp_path)
    _not_a_model(tmp_path / "a.onnx")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = onnxl.deduplicate_external_data(
            [path], [path], "shared.data", options=onnxl.WriteOptions(remove_unreferenced=True)
        )
    assert result.unreferenced == result.removed == []
    assert (tmp_path / "m.onnx.data").exists()
    assert [(w.category, str(w.message)) for w in caught] == [
        (
            UserWarning,
            f"1 weights file(s) that '{path}' no longer references were kept: "
            f"'{tmp_path / 'a.onnx'}' could not be read to check what it references",
        )
    ]
    assert read_back(path) == expected


def _prune_in_place(writer, path):
    if writer == "align":
        onnxl.align_external_data_streaming(
            path, path, "new.data", options=onnxl.WriteOptions(remove_unreferenced=True)
        )
    else:
        onnxl.deduplicate_external_data(
            [path], [path], "new.data", options=onnxl.WriteOptions(remove_unreferenced=True)
        )


# not run by make mutate: mutmut's trampolines add a frame to every mutated function
@pytest.mark.parametrize("writer", ["align", "dedup"])
def test_prune_warning_points_at_the_caller(tmp_path, writer):
    """The warning of a prune that could not read a model names the caller's file, so a
    warnings filter or the default 'once per line' display applies to the user's call."""
    path, _ = _two_file(tmp_path)
    _not_a_model(tmp_path / "a.onnx")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _prune_in_place(writer, path)
    assert [w.filename for w in caught] == [__file__]


# -- what is removed -----------------------------------------------------------------------


def test_prune_goes_on_past_a_file_the_new_model_still_reads(tmp_path):
    """One file per tensor (W0, W1) re-aligned in place into ``W0``: W0 is the new weights
    file, W1 is left behind and pruned (it comes after W0 in the old model)."""
    model = uint8_model(2, 3000)
    save_two_file(model, tmp_path / "m.onnx", size_threshold=0, per_tensor=True)
    path = tmp_path / "m.onnx"
    result = onnxl.align_external_data_streaming(
        path, path, "W0", options=onnxl.WriteOptions(remove_unreferenced=True)
    )
    assert result.unreferenced == result.removed == [str(tmp_path / "W1")]
    assert sorted(os.listdir(tmp_path)) == ["W0", "m.onnx"]
    assert read_back(path) == tensor_bytes(model)


def test_removing_a_file_someone_already_deleted_is_not_an_error(tmp_path):
    """A left-over file gone by the time it is removed (deleted by someone else) is skipped;
    the others are removed and listed. (A race: reached through the helper itself.)"""
    (tmp_path / "b.data").write_bytes(b"x")
    gone, there = str(tmp_path / "a.data"), str(tmp_path / "b.data")
    assert _prune.remove([gone, there]) == [there]
    assert os.listdir(tmp_path) == []


def test_a_safetensors_in_upper_case_is_never_pruned(tmp_path, capsys):
    """``MODEL.SAFETENSORS``, left behind by an in-place ``align --prune``, stays: a
    ``.safetensors`` is never pruned, whatever the case of its extension (other tools load
    it for themselves)."""
    model = uint8_model(2, 6000)
    save_two_file(model, tmp_path / "model.onnx", location="MODEL.SAFETENSORS", size_threshold=0)
    code, _, err = run_cli(
        capsys, "align", tmp_path / "model.onnx", tmp_path / "model.onnx", "--weights", "w.data",
        "--prune",
    )  # fmt: skip
    assert code == 0, err
    assert (tmp_path / "MODEL.SAFETENSORS").exists()
    assert read_back(tmp_path / "model.onnx") == tensor_bytes(model)
