"""Where a weights file goes: its location is relative to the new model's folder.

As onnx means it, whatever the working directory, and it must stay inside that
folder (a symlinked subfolder that leaves it is refused, and the error names
both paths; one inside it is recorded as the folder it is, and ``lnk/..`` is
where the kernel goes); a name a reader would refuse, or one that is not valid UTF-8 (a
location is recorded as UTF-8), is refused before anything is written, while
model files whose own names are not UTF-8 are read and re-aligned.
"""

from __future__ import annotations

import os

import onnx
import pytest
from helpers import as_options, read_back, save_two_file, tensor_bytes
from helpers import assert_clean_failure as _one_line
from helpers import run_cli as _cli
from helpers import uint8_model as _model

import onnx_light.onnx as onnxl
from onnx_light.cli import main


def _align(src, dst, weights, **kw):
    kw = as_options(kw, keep=("alignment", "chunk_size"))  # the settings in options=
    return onnxl.align_external_data_streaming(src, dst, weights, **kw)


@pytest.mark.parametrize("how", ["save", "align", "cli"])
def test_relative_location_is_relative_to_the_model_folder(tmp_path, monkeypatch, how):
    """``sub/b.bin`` lands in <model folder>/sub/b.bin whatever the working directory."""
    model = _model()
    src = tmp_path / "src"
    src.mkdir()
    save_two_file(model, src / "m.onnx", size_threshold=0)
    dst = tmp_path / "x"
    (dst / "sub").mkdir(parents=True)
    elsewhere = tmp_path / "cwd"
    (elsewhere / "sub").mkdir(parents=True)
    monkeypatch.chdir(elsewhere)
    if how == "save":
        onnxl.save(onnxl.load(src / "m.onnx"), dst / "b.onnx", "sub/b.bin")
    elif how == "align":
        onnxl.align_external_data_streaming(src / "m.onnx", dst / "b.onnx", "sub/b.bin")
    else:
        assert (
            main(["align", str(src / "m.onnx"), str(dst / "b.onnx"), "--weights", "sub/b.bin"]) == 0
        )
    assert (dst / "sub" / "b.bin").is_file() and os.listdir(elsewhere / "sub") == []
    assert read_back(dst / "b.onnx") == tensor_bytes(model)
    # the location recorded is the one onnx.save would record
    location = onnx.load(str(dst / "b.onnx"), load_external_data=False).graph.initializer[0]
    assert {e.key: e.value for e in location.external_data}["location"] == "sub/b.bin"


def test_location_outside_names_both_paths(tmp_path):
    (tmp_path / "x").mkdir()
    with pytest.raises(
        ValueError, match=r"'\.\./w\.bin' is '.*/w\.bin'.*inside the model's folder"
    ):
        onnxl.save(_model(), tmp_path / "x" / "b.onnx", "../w.bin")
    assert sorted(os.listdir(tmp_path)) == ["x"] and os.listdir(tmp_path / "x") == []


def test_symlinked_subfolder_is_refused(pair, tmp_path, monkeypatch):
    path, _, _ = pair
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    out.mkdir()
    elsewhere.mkdir()
    os.symlink("../elsewhere", out / "sub")
    # the path resolved as the kernel opens it: .../elsewhere/w.data, outside out/
    refused = r"'sub/w.data' is '.*elsewhere/w.data': it must lie inside the model's folder"
    with pytest.raises(ValueError, match=refused):
        _align(path, out / "a.onnx", "sub/w.data")
    with pytest.raises(ValueError, match=refused):
        onnxl.save(onnxl.load(path), out / "a.onnx", "sub/w.data")
    assert os.listdir(elsewhere) == [] and sorted(os.listdir(out)) == ["sub"]


def test_weights_names_load_would_refuse_are_not_written(pair, tmp_path):
    path, _, _ = pair
    for name in ("C:w.data",):
        with pytest.raises(ValueError, match="absolute"):
            _align(path, tmp_path / "a.onnx", name)
    assert not (tmp_path / "a.onnx").exists()


def test_file_names_not_utf8(tmp_path, capsys):
    folder = os.fsencode(tmp_path)
    src = os.path.join(folder, b"mod\xe9l.onnx")  # latin-1
    model = _model(3, 5000)
    data = onnx.ModelProto()
    data.CopyFrom(model)
    with open(src, "wb") as f:
        f.write(data.SerializeToString())
    out = os.path.join(folder, b"out\xe9")
    os.mkdir(out)
    dst = os.path.join(out, b"a\xe9.onnx")
    _align(src, dst, "a.data", size_threshold=1024)
    assert read_back(os.fsdecode(dst)) == tensor_bytes(model)
    assert tensor_bytes(onnxl.load(src)) == tensor_bytes(model)
    with pytest.raises(ValueError, match="mod\\\\xe9l.onnx.*not valid UTF-8"):
        onnxl.load(src, load_external_data=False, skip_raw_data=True)
    with pytest.raises(ValueError, match="not valid UTF-8"):
        _align(src, dst, b"w\xe9.data")  # a location must be recorded as UTF-8
    for args in (["info", src], ["info", "--json", src], ["verify", src]):
        code, _, err = _cli(capsys, *[os.fsdecode(a) for a in args])
        assert code == 0, err
    code, _, err = _cli(capsys, "align", os.fsdecode(src), os.fsdecode(dst), "--weights", "a.data")
    assert code == 0, err
    # the default weights name (a\xe9.onnx.data) cannot be recorded: one clear line
    code, _, err = _cli(capsys, "align", os.fsdecode(src), os.fsdecode(dst))
    _one_line(code, err)
    assert r"a\xe9.onnx.data" in err and "UTF-8" in err


def test_messages_show_undecodable_names_as_bytes(tmp_path):
    """One helper quotes paths in messages: a name that is not UTF-8 shows its bytes
    (\\xe9), not Python's surrogate escapes (\\udce9)."""
    folder = os.fsdecode(os.path.join(os.fsencode(str(tmp_path)), b"caf\xe9"))
    with pytest.raises(FileNotFoundError) as info:
        onnxl.align_external_data_streaming(os.path.join(folder, "m.onnx"), tmp_path / "a.onnx")
    assert "caf\\xe9" in str(info.value) and "udce9" not in str(info.value)


def test_a_dot_dot_after_a_link_is_where_the_kernel_goes(tmp_path, monkeypatch):
    """``lnk/../m.onnx`` (``lnk`` a symbolic link) names the file the kernel opens,
    ``<lnk's target>/../m.onnx``, never the unrelated ``./m.onnx``: save writes there, and
    load and align read from there."""
    (tmp_path / "deep" / "x").mkdir(parents=True)
    os.symlink(tmp_path / "deep" / "x", tmp_path / "lnk")
    onnxl.save(_model(2, 3000, seed=1), tmp_path / "m.onnx")  # unrelated
    unrelated = (tmp_path / "m.onnx").read_bytes()
    monkeypatch.chdir(tmp_path)
    model = _model(2, 3000, seed=2)
    onnxl.save(model, "lnk/../m.onnx", location="m.onnx.data")
    assert (tmp_path / "m.onnx").read_bytes() == unrelated
    assert not (tmp_path / "m.onnx.data").exists()
    assert read_back(tmp_path / "deep" / "m.onnx") == tensor_bytes(model)
    # and read from there: load and align take the same file
    assert tensor_bytes(onnxl.load("lnk/../m.onnx")) == tensor_bytes(model)
    onnxl.align_external_data_streaming("lnk/../m.onnx", "lnk/../out.onnx")
    assert read_back(tmp_path / "deep" / "out.onnx") == tensor_bytes(model)
    assert not (tmp_path / "out.onnx").exists()


def test_a_linked_subfolder_is_recorded_as_the_folder_it_is(tmp_path):
    """Weights saved to ``alias/w.data`` (``alias`` a link to ``y``) are recorded as
    ``y/w.data``, the folder they are in: onnx refuses a link anywhere on the way, and
    loads this model."""
    (tmp_path / "y").mkdir()
    os.symlink("y", tmp_path / "alias")
    model = _model(2, 3000)
    onnxl.save(model, tmp_path / "m.onnx", location="alias/w.data")
    meta = onnx.load(str(tmp_path / "m.onnx"), load_external_data=False)
    locations = {e.value for t in meta.graph.initializer for e in t.external_data}
    assert "y/w.data" in locations
    assert tensor_bytes(onnx.load(str(tmp_path / "m.onnx"))) == tensor_bytes(model)  # onnx too
