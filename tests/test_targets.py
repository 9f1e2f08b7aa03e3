"""Which files a call may replace (``_targets``): never one the call reads.

A destination (the new ``.onnx`` or its weights file) that is a source of the
call, under any spelling (a symlink, a hard link, a symlinked folder, ``..``),
is refused before anything is written, through ``save``, the shared save, the
streaming helper and the command line; re-aligning in place goes through the
model's one name only. A destination that is a device or a FIFO, or ends with
``/``, is refused too.
"""

from __future__ import annotations

import os
import stat

import pytest
from helpers import folder_digest, read_back, tensor_bytes
from helpers import uint8_model as _model

import onnx_light.onnx as onnxl
from onnx_light.cli import main


def _align(src, dst, weights, **kw):
    return onnxl.align_external_data_streaming(src, dst, weights, **kw)


@pytest.mark.parametrize(
    ("dst", "weights"),
    [
        ("a.onnx", "m.onnx.data"),  # the weights over the data the source reads
        ("a.onnx", "m.onnx"),  # the weights over the source .onnx
        ("m.onnx.data", "a.data"),  # the new .onnx over the source's data
        ("a.onnx", "link.data"),  # a symlink to the source's data
    ],
)
def test_align_never_replaces_a_source(pair, dst, weights):
    path, tensors, _ = pair
    folder = path.parent
    os.symlink("m.onnx.data", folder / "link.data")
    before = folder_digest(folder)
    with pytest.raises(onnxl.ExternalDataError, match="would overwrite.*in place"):
        _align(path, folder / dst, weights)
    assert folder_digest(folder) == before
    assert read_back(path) == tensors


def test_align_in_place_stays_correct(pair):
    path, tensors, _ = pair
    _align(path, path, "m.onnx.data", alignment=65536)
    assert read_back(path) == tensors
    assert tensor_bytes(onnxl.load(path)) == tensors
    # through another spelling of the same entry too
    _align(path, path.parent / ".." / "src" / "m.onnx", "m.onnx.data", alignment=64)
    assert read_back(path) == tensors


def test_save_and_shared_never_replace_a_source(pair):
    path, tensors, _ = pair
    folder = path.parent
    before = folder_digest(folder)
    meta = onnxl.load(path, load_external_data=False)
    stream = onnxl.SerializeOptions(use_external_data_location=False)
    for options in (None, stream):
        for dst, location in [("a.onnx", "m.onnx.data"), ("m.onnx.data", "x.data")]:
            with pytest.raises(onnxl.ExternalDataError, match="would overwrite"):
                onnxl.save(meta, folder / dst, location, options=options)
    with pytest.raises(onnxl.ExternalDataError, match="would overwrite"):
        onnxl.save(meta, folder / "m.onnx.data")  # single file, over the data it reads
    meta.graph.initializer.extend(_model(1, 3000, seed=4, prefix="new").graph.initializer)
    with pytest.raises(onnxl.ExternalDataError, match="would overwrite"):
        onnxl.save_model_with_shared_external_data(meta, folder / "m.onnx.data")
    assert folder_digest(folder) == before
    assert read_back(path) == tensors


def test_cli_never_replaces_a_source(pair, capsys):
    path, tensors, before = pair
    code = main(["align", str(path), str(path.parent / "a.onnx"), "--weights", "m.onnx.data"])
    err = capsys.readouterr().err
    assert code == 1 and len(err.strip().splitlines()) == 1 and "would overwrite" in err
    assert folder_digest(path.parent) == before


@pytest.mark.parametrize("how", ["symlink", "hardlink"])
def test_in_place_through_another_name_is_not_in_place(pair, how):
    """``current.onnx -> m.onnx`` re-aligned "in place" must not break m.onnx."""
    path, tensors, _ = pair
    other = path.parent / "current.onnx"
    if how == "symlink":
        os.symlink("m.onnx", other)
    else:
        os.link(path, other)
    before = folder_digest(path.parent) if how == "hardlink" else None
    with pytest.raises(onnxl.ExternalDataError, match="would overwrite"):
        _align(other, other, "m.onnx.data", alignment=4096)
    assert read_back(path) == tensors
    if before is not None:
        assert folder_digest(path.parent) == before
    with pytest.raises(onnxl.ExternalDataError, match="would overwrite"):
        _align(other, other, "current.data")  # the .onnx entry reads m.onnx: refused too
    if how == "hardlink":  # m.onnx itself has two names: not in place either
        with pytest.raises(onnxl.ExternalDataError, match="would overwrite"):
            _align(path, path, "m.onnx.data")
    os.unlink(other)
    _align(path, path, "m.onnx.data", alignment=4096)  # one name: in place
    assert read_back(path) == tensors


def test_weights_equal_to_the_model_through_a_symlinked_folder(pair, tmp_path):
    """``same -> .``: ``same/a.onnx`` is ``a.onnx``. Refused, never a hang or a lost file."""
    path, tensors, before = pair
    out = tmp_path / "out"
    out.mkdir()
    os.symlink(".", out / "same")
    with pytest.raises(ValueError, match="cannot be the model file itself"):
        _align(path, out / "a.onnx", "same/a.onnx")
    with pytest.raises(ValueError, match="cannot be the model file itself"):
        onnxl.save(onnxl.load(path), out / "a.onnx", "same/a.onnx")
    os.symlink(".", path.parent / "same")
    with pytest.raises(ValueError, match="cannot be the model file itself"):
        _align(path, path, "same/m.onnx")
    assert sorted(os.listdir(out)) == ["same"]
    assert read_back(path) == tensors


# -- destinations that are not regular files --------------------------------------


def _special(folder, kind: str):
    node = folder / f"{kind}.node"
    if kind == "fifo":
        os.mkfifo(node)
    else:
        if os.geteuid() != 0:
            pytest.skip("mknod of a device needs root")
        os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # a copy of /dev/null
    return node


@pytest.mark.parametrize("kind", ["fifo", "device"])
@pytest.mark.parametrize("role", ["onnx", "weights"])
def test_special_destination_is_refused(pair, tmp_path, kind, role):
    path, _, _ = pair
    out = tmp_path / "out"
    out.mkdir()
    node = _special(out, kind)
    dst, weights = (node, "w.data") if role == "onnx" else (out / "a.onnx", node.name)
    with pytest.raises(ValueError, match="not a regular file"):
        _align(path, dst, weights)
    with pytest.raises(ValueError, match="not a regular file"):
        onnxl.save(onnxl.load(path), dst, None if role == "onnx" else weights)
    assert not stat.S_ISREG(os.lstat(node).st_mode)
    assert sorted(os.listdir(out)) == [node.name]


def test_destination_with_a_trailing_slash(pair, tmp_path):
    path, _, _ = pair
    with pytest.raises(IsADirectoryError, match="not a file name"):
        _align(path, str(tmp_path / "a.onnx") + "/", "a.data")
    assert not (tmp_path / "a.onnx").exists()
