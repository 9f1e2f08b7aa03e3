"""Code written for the original onnx-light API runs unmodified.

- ``onnx_light.onnx.helper`` and ``onnx_light.onnx.numpy_helper`` import as
  modules and are onnx's own;
- a weights path is a path: written from the current folder
  (``os.path.join(out_dir, "w.data")``) or, as onnx writes it, from the
  model's folder (``"w.data"``); an ambiguous one is refused naming both
  readings; one outside the model's folder is refused, for every writer;
- ``ModelProto.SerializeToFile(path, options, weights_path)`` is the
  in-memory save.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import onnx
import pytest
from helpers import read_back, save_two_file, tensor_bytes, uint8_model
from helpers import run_cli as _cli

import onnx_light.onnx as onnxl


def test_submodules_import_as_onnx_own_modules():
    import onnx_light.onnx.helper as oh
    import onnx_light.onnx.numpy_helper as onh
    from onnx_light.onnx.helper import make_node
    from onnx_light.onnx.numpy_helper import from_array

    assert oh is onnx.helper and onh is onnx.numpy_helper
    assert onnxl.helper is onnx.helper and onnxl.numpy_helper is onnx.numpy_helper
    assert make_node is onnx.helper.make_node and from_array is onnx.numpy_helper.from_array


def test_submodules_import_in_a_fresh_interpreter():
    """Nothing imported before: the first statement is the submodule import."""
    code = (
        "import onnx_light.onnx.numpy_helper as onh, onnx\n"
        "from onnx_light.onnx.helper import make_graph\n"
        "assert onh is onnx.numpy_helper and make_graph is onnx.helper.make_graph\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_serialize_to_file_is_save(tmp_path):
    model = uint8_model(3, 5000)
    opts = onnxl.SerializeOptions()
    opts.alignment = 4096
    model.SerializeToFile(tmp_path / "a.onnx", opts, tmp_path / "a.data")
    onnxl.save(model, tmp_path / "b.onnx", location="b.data", options=opts)
    assert (tmp_path / "a.data").read_bytes() == (tmp_path / "b.data").read_bytes()
    assert read_back(tmp_path / "a.onnx") == tensor_bytes(model)
    model.SerializeToFile(str(tmp_path / "single.onnx"))  # no weights path: one file
    assert read_back(tmp_path / "single.onnx") == tensor_bytes(model)
    assert sorted(os.listdir(tmp_path)) == ["a.data", "a.onnx", "b.data", "b.onnx", "single.onnx"]


def test_serialize_to_file_honours_use_external_data_location(tmp_path):
    src = tmp_path / "m.onnx"
    model = uint8_model(3, 5000)
    save_two_file(model, src, size_threshold=0)
    meta = onnxl.load(src, load_external_data=False)
    opts = onnxl.SerializeOptions()
    opts.use_external_data_location = True  # keep the references: read m.onnx.data
    meta.SerializeToFile(tmp_path / "view.onnx", opts)
    assert not (tmp_path / "view.onnx.data").exists()
    assert read_back(tmp_path / "view.onnx") == tensor_bytes(model)
    opts.use_external_data_location = False  # stream the bytes into a new file
    opts.base_dir = str(src)
    meta.SerializeToFile(tmp_path / "copy.onnx", opts, tmp_path / "copy.data")
    assert read_back(tmp_path / "copy.onnx") == tensor_bytes(model)
    assert os.path.getsize(tmp_path / "copy.data") >= 3 * 5000


def test_serialize_to_file_changes_nothing_onnx_has():
    model = uint8_model(2, 100)
    assert isinstance(model, onnx.ModelProto)
    data = model.SerializeToString()
    again = onnx.ModelProto()
    again.ParseFromString(data)
    assert again == model and again.SerializeToString() == data
    assert onnx.ModelProto.SerializeToFile is onnxl._io.serialize_to_file
    for cls in (onnx.GraphProto, onnx.TensorProto, onnx.NodeProto):
        assert not hasattr(cls, "SerializeToFile")


# -- the path rule, for every writer ----------------------------------------------------


def _writer(how: str, src, dst: str, weights: str | None, capsys):
    """Write ``dst`` from the two-file model ``src`` with the weights path ``weights``."""
    if how == "save":
        onnxl.save(onnxl.load(src), dst, location=weights)
    elif how == "serialize":
        onnxl.load(src).SerializeToFile(dst, None, weights)
    elif how == "align":
        onnxl.align_external_data_streaming(src, dst, weights)
    elif how == "save_edited":
        onnxl.save_edited(onnxl.load(src, load_external_data=False), src, dst, weights)
    elif how == "dedup":
        onnxl.deduplicate_external_data([src], [dst], weights)
    elif how == "cli-align":
        code, _, err = _cli(capsys, "align", src, dst, "--weights", weights)
        if code:
            raise ValueError(err)
    else:
        out = os.path.dirname(dst)
        code, _, err = _cli(capsys, "dedup", src, "--out", out, "--weights", weights)
        if code:
            raise ValueError(err)


WRITERS = ["save", "serialize", "align", "save_edited", "dedup", "cli-align", "cli-dedup"]


@pytest.fixture
def layout(tmp_path, monkeypatch):
    """A source in src/, an empty out/, the current folder their parent."""
    (tmp_path / "src").mkdir()
    (tmp_path / "out").mkdir()
    model = uint8_model(3, 5000)
    save_two_file(model, tmp_path / "src" / "m.onnx", size_threshold=0)
    monkeypatch.chdir(tmp_path)
    return os.path.join("src", "m.onnx"), tensor_bytes(model)


def _location(path) -> set[str]:
    meta = onnx.load(str(path), load_external_data=False)
    return {e.value for t in meta.graph.initializer for e in t.external_data if e.key == "location"}


@pytest.mark.parametrize("how", WRITERS)
def test_weights_path_from_the_current_folder(layout, how, capsys):
    src, expected = layout
    dst = os.path.join("out", "m.onnx")
    _writer(how, src, dst, os.path.join("out", "w.data"), capsys)
    assert sorted(os.listdir("out")) == ["m.onnx", "w.data"]
    assert _location(dst) == {"w.data"}
    assert read_back(dst) == expected


@pytest.mark.parametrize("how", WRITERS)
def test_weights_path_from_the_model_folder_as_onnx_writes_it(layout, how, capsys):
    src, expected = layout
    dst = os.path.join("out", "m.onnx")
    _writer(how, src, dst, "w.data", capsys)
    assert sorted(os.listdir("out")) == ["m.onnx", "w.data"]
    assert not os.path.exists("w.data")
    assert _location(dst) == {"w.data"}
    assert read_back(dst) == expected


@pytest.mark.parametrize("how", WRITERS)
def test_weights_path_inside_a_subfolder_from_the_current_folder(layout, how, capsys):
    src, expected = layout
    os.mkdir(os.path.join("out", "sub"))
    dst = os.path.join("out", "m.onnx")
    _writer(how, src, dst, os.path.join("out", "sub", "w.data"), capsys)
    assert os.listdir(os.path.join("out", "sub")) == ["w.data"]
    assert _location(dst) == {"sub/w.data"}
    assert read_back(dst) == expected


@pytest.mark.parametrize("how", WRITERS)
def test_ambiguous_weights_path_is_refused_naming_both(layout, how, capsys):
    """``out/w.data`` with an ``out/out/`` folder: out/w.data or out/out/w.data?"""
    src, _ = layout
    os.mkdir(os.path.join("out", "out"))
    dst = os.path.join("out", "m.onnx")
    with pytest.raises(ValueError) as info:
        _writer(how, src, dst, os.path.join("out", "w.data"), capsys)
    message = str(info.value)
    assert "ambiguous" in message
    assert os.path.join(os.getcwd(), "out", "w.data") in message
    assert os.path.join(os.getcwd(), "out", "out", "w.data") in message
    assert sorted(os.listdir("out")) == ["out"] and os.listdir(os.path.join("out", "out")) == []


@pytest.mark.parametrize("how", WRITERS)
def test_weights_path_outside_the_model_folder_is_refused(layout, how, capsys):
    src, _ = layout
    dst = os.path.join("out", "m.onnx")
    with pytest.raises(ValueError, match="inside the model's folder"):
        _writer(how, src, dst, os.path.join("src", "w.data"), capsys)
    assert os.listdir("out") == [] and sorted(os.listdir("src")) == ["m.onnx", "m.onnx.data"]


def test_current_folder_is_the_model_folder(tmp_path, monkeypatch):
    """Both readings are one file: no ambiguity."""
    model = uint8_model(3, 5000)
    monkeypatch.chdir(tmp_path)
    onnxl.save(model, "m.onnx", location="m.onnx.data")
    assert _location(tmp_path / "m.onnx") == {"m.onnx.data"}
    assert read_back(tmp_path / "m.onnx") == tensor_bytes(model)


def test_defaults_do_not_depend_on_the_current_folder(tmp_path, monkeypatch):
    """A default weights name (DST.data) is beside DST even from a subfolder of DST's."""
    src = tmp_path / "m.onnx"
    model = uint8_model(3, 5000)
    save_two_file(model, src, size_threshold=0)
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    onnxl.align_external_data_streaming(os.path.join("..", "m.onnx"), os.path.join("..", "a.onnx"))
    assert _location(tmp_path / "a.onnx") == {"a.onnx.data"}
    assert os.listdir(tmp_path / "sub") == []


# -- the original API's example, as readers copy it ---------------------------------------

ORIGINAL_SCRIPT = textwrap.dedent(
    """
    import os

    import numpy as np

    import onnx_light.onnx as onnxl
    import onnx_light.onnx.helper as oh
    import onnx_light.onnx.numpy_helper as onh

    SMALL = os.environ.get("UNITTEST_GOING", "0") == "1"
    n, dim = (4, 64) if SMALL else (24, 1024)
    inits = [
        onh.from_array(np.random.rand(dim, dim).astype(np.float32), f"W{i}") for i in range(n)
    ]
    inits.insert(0, onh.from_array(np.arange(1000, dtype=np.int64), "ids"))
    nodes = [oh.make_node("MatMul", ["X" if i == 0 else f"Y{i - 1}", f"W{i}"], [f"Y{i}"])
             for i in range(n)]
    proto = oh.make_model(oh.make_graph(
        nodes, "g",
        [oh.make_tensor_value_info("X", onnxl.TensorProto.FLOAT, [1, dim])],
        [oh.make_tensor_value_info(f"Y{n - 1}", onnxl.TensorProto.FLOAT, [1, dim])],
        inits,
    ))

    out_dir = "temp_plot_align_external_data_streaming"
    os.makedirs(out_dir, exist_ok=True)
    src_onnx = os.path.join(out_dir, "src.onnx")
    src_data = src_onnx + ".data"
    onnxl.save(proto, src_onnx, location=src_data)

    onnxl.align_external_data_streaming(src_onnx_path=src_onnx,
        dst_onnx_path=os.path.join(out_dir, "streaming.onnx"),
        dst_weights_path=os.path.join(out_dir, "streaming.data"), alignment=4096,
        chunk_size=4 * 1024 * 1024)

    loaded = onnxl.load(src_onnx, load_external_data=True, num_threads=1)
    opts = onnxl.SerializeOptions()
    opts.alignment = 4096
    opts.use_external_data_location = False
    loaded.SerializeToFile(os.path.join(out_dir, "inmem.onnx"), opts,
                           os.path.join(out_dir, "inmem.data"))

    def ranges(path):
        meta = onnxl.load(path, load_external_data=False)
        return {t.name: {e.key: e.value for e in t.external_data} for t in meta.graph.initializer}

    a = ranges(os.path.join(out_dir, "streaming.onnx"))
    b = ranges(os.path.join(out_dir, "inmem.onnx"))
    assert a.keys() == b.keys() and len(a) == n + 1
    with open(os.path.join(out_dir, "streaming.data"), "rb") as fs, \\
            open(os.path.join(out_dir, "inmem.data"), "rb") as fm:
        for name, entry in a.items():
            assert int(entry["offset"]) % 4096 == 0, name
            fs.seek(int(entry["offset"]))
            fm.seek(int(b[name]["offset"]))
            assert fs.read(int(entry["length"])) == fm.read(int(b[name]["length"])), name
    print("equal:", len(a), "tensors")
    """
)


def test_the_original_example_runs_unmodified(tmp_path):
    (tmp_path / "example.py").write_text(ORIGINAL_SCRIPT)
    env = {**os.environ, "UNITTEST_GOING": "1"}
    run = subprocess.run(
        [sys.executable, "example.py"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "equal: 5 tensors"
    out = tmp_path / "temp_plot_align_external_data_streaming"
    assert sorted(os.listdir(out)) == [
        "inmem.data",
        "inmem.onnx",
        "src.onnx",
        "src.onnx.data",
        "streaming.data",
        "streaming.onnx",
    ]
    assert _location(out / "src.onnx") == {"src.onnx.data"}
