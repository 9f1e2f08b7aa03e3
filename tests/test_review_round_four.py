"""What a hostile review of the first-contact and loader-rules changes found, each kept fixed.

1. ``lnk/../m.onnx`` (``lnk`` a symbolic link) names the file the kernel opens,
   ``<lnk's target>/../m.onnx``, never an unrelated ``./m.onnx`` (it replaced one).
2. A ``.safetensors`` is never pruned, whatever the case of its extension.
3. An in-place re-align keeps the weights file's name only when no byte of it
   would be dropped: bytes no tensor reads any more (a tensor an edit cut) stay,
   in the old file, listed as unreferenced.
4. A weights path through a linked subfolder is recorded as the folder it is
   (onnx refuses a link anywhere on the way), and ``verify`` says onnx refuses
   a model whose location goes through a link.
5. "Already aligned: nothing written" only when a rewrite would change nothing:
   not with junk in the padding, a weights file that is a link, or external
   sparse values a rewrite brings inline.
6. ``X`` and ``X_1`` are not taken for transformers.js shards.
7. ``dedup --out`` never replaces an existing file under a name it invented, and
   ``--with-files`` says what it kept or skipped.
"""

from __future__ import annotations

import os

import numpy as np
import onnx
from helpers import folder_digest, read_back, save_two_file, tensor_bytes, uint8_model
from helpers import run_cli as _cli
from onnx import helper, numpy_helper

import onnx_light.onnx as onnxl


def test_a_dot_dot_after_a_link_is_where_the_kernel_goes(tmp_path, monkeypatch):
    (tmp_path / "deep" / "x").mkdir(parents=True)
    os.symlink(tmp_path / "deep" / "x", tmp_path / "lnk")
    onnxl.save(uint8_model(2, 3000, seed=1), tmp_path / "m.onnx")  # unrelated
    unrelated = (tmp_path / "m.onnx").read_bytes()
    monkeypatch.chdir(tmp_path)
    model = uint8_model(2, 3000, seed=2)
    onnxl.save(model, "lnk/../m.onnx", location="m.onnx.data")
    assert (tmp_path / "m.onnx").read_bytes() == unrelated
    assert not (tmp_path / "m.onnx.data").exists()
    assert read_back(tmp_path / "deep" / "m.onnx") == tensor_bytes(model)
    # and read from there: load and align take the same file
    assert tensor_bytes(onnxl.load("lnk/../m.onnx")) == tensor_bytes(model)
    onnxl.align_external_data_streaming("lnk/../m.onnx", "lnk/../out.onnx")
    assert read_back(tmp_path / "deep" / "out.onnx") == tensor_bytes(model)
    assert not (tmp_path / "out.onnx").exists()


def test_a_safetensors_in_upper_case_is_never_pruned(tmp_path, capsys):
    model = uint8_model(2, 6000)
    save_two_file(model, tmp_path / "model.onnx", location="MODEL.SAFETENSORS", size_threshold=0)
    code, _, err = _cli(
        capsys, "align", tmp_path / "model.onnx", tmp_path / "model.onnx", "--weights", "w.data",
        "--prune",
    )  # fmt: skip
    assert code == 0, err
    assert (tmp_path / "MODEL.SAFETENSORS").exists()
    assert read_back(tmp_path / "model.onnx") == tensor_bytes(model)


def test_in_place_keeps_bytes_no_tensor_reads(tmp_path):
    """weights.bin holds W0 and W1; the model (cut by an edit) reads W0 only."""
    model = uint8_model(2, 4096)
    save_two_file(model, tmp_path / "m.onnx", location="weights.bin", size_threshold=0)
    cut = onnx.load(str(tmp_path / "m.onnx"), load_external_data=False)
    del cut.graph.initializer[1]
    onnx.save(cut, str(tmp_path / "m.onnx"))
    before = folder_digest(tmp_path)["weights.bin"]
    result = onnxl.align_external_data_streaming(tmp_path / "m.onnx", tmp_path / "m.onnx")
    assert folder_digest(tmp_path)["weights.bin"] == before  # W1's bytes are still there
    assert result.unreferenced == [str(tmp_path / "weights.bin")]
    assert result.weights_paths == [str(tmp_path / "m.onnx.data")]
    # with only padding besides the tensors read, the name is kept (nothing lost)
    whole = tmp_path / "whole"
    whole.mkdir()
    save_two_file(model, whole / "m.onnx", location="weights.bin", size_threshold=0)
    again = onnxl.align_external_data_streaming(whole / "m.onnx", whole / "m.onnx")
    assert again.weights_paths == [str(whole / "weights.bin")] and again.unreferenced == []


def test_a_linked_subfolder_is_recorded_as_the_folder_it_is(tmp_path):
    (tmp_path / "y").mkdir()
    os.symlink("y", tmp_path / "alias")
    model = uint8_model(2, 3000)
    onnxl.save(model, tmp_path / "m.onnx", location="alias/w.data")
    meta = onnx.load(str(tmp_path / "m.onnx"), load_external_data=False)
    locations = {e.value for t in meta.graph.initializer for e in t.external_data}
    assert "y/w.data" in locations
    assert tensor_bytes(onnx.load(str(tmp_path / "m.onnx"))) == tensor_bytes(model)  # onnx too


def test_verify_says_onnx_refuses_a_link_on_the_way(tmp_path, capsys):
    (tmp_path / "y").mkdir()
    model = uint8_model(2, 3000)
    onnxl.save(model, tmp_path / "m.onnx", location="y/w.data")
    os.symlink("y", tmp_path / "alias")
    meta = onnx.load(str(tmp_path / "m.onnx"), load_external_data=False)
    for t in meta.graph.initializer:
        for e in t.external_data:
            if e.key == "location":
                e.value = "alias/w.data"
    onnx.save(meta, str(tmp_path / "m.onnx"))
    code, out, _ = _cli(capsys, "verify", tmp_path / "m.onnx")
    assert code == 0
    assert "onnx >= 1.21: refuses: alias/w.data goes through a symbolic link (alias)" in out
    try:
        onnx.load(str(tmp_path / "m.onnx"))
        loaded = True
    except Exception:  # noqa: BLE001 - onnx's checker error
        loaded = False
    assert not loaded


def _aligned(folder):
    model = uint8_model(2, 3000)
    save_two_file(model, folder / "m.onnx", location="w.data", size_threshold=0)
    onnxl.align_external_data_streaming(folder / "m.onnx", folder / "m.onnx", "w.data")
    return model


def test_junk_in_the_padding_is_rewritten(tmp_path):
    model = _aligned(tmp_path)
    with open(tmp_path / "w.data", "r+b") as f:
        f.seek(3000)
        f.write(b"junk")  # between W0 (0..3000) and W1 (at 4096)
    result = onnxl.align_external_data_streaming(tmp_path / "m.onnx", tmp_path / "m.onnx", "w.data")
    assert result.rewritten is True
    with open(tmp_path / "w.data", "rb") as f:
        f.seek(3000)
        assert f.read(1096) == bytes(1096)
    assert read_back(tmp_path / "m.onnx") == tensor_bytes(model)


def test_a_weights_file_that_is_a_link_is_rewritten_as_a_file(tmp_path):
    model = _aligned(tmp_path)
    os.rename(tmp_path / "w.data", tmp_path / "blob")
    os.symlink("blob", tmp_path / "w.data")
    result = onnxl.align_external_data_streaming(tmp_path / "m.onnx", tmp_path / "m.onnx", "w.data")
    assert result.rewritten is True and not os.path.islink(tmp_path / "w.data")
    assert tensor_bytes(onnx.load(str(tmp_path / "m.onnx"))) == tensor_bytes(model)


def test_external_sparse_values_are_brought_inline_not_skipped(tmp_path):
    dense = np.zeros((64, 64), np.float32)
    dense[0, :] = 1
    flat = np.flatnonzero(dense)
    sparse = helper.make_sparse_tensor(
        numpy_helper.from_array(dense.flat[flat].astype(np.float32), "S"),
        numpy_helper.from_array(flat.astype(np.int64), "S_idx"),
        [64, 64],
    )
    w = numpy_helper.from_array(np.ones(1024, np.float32), "W")
    model = helper.make_model(helper.make_graph([], "g", [], [], [w], sparse_initializer=[sparse]))
    onnx.save(model, str(tmp_path / "m.onnx"))
    onnxl.align_external_data_streaming(tmp_path / "m.onnx", tmp_path / "m.onnx", "w.data")
    meta = onnx.load(str(tmp_path / "m.onnx"), load_external_data=False)
    values = meta.graph.sparse_initializer[0].values  # made external by hand, at a free range
    data = numpy_helper.to_array(values).tobytes()
    with open(tmp_path / "w.data", "ab") as f:
        offset = f.tell()
        f.write(data)
    values.ClearField("raw_data")
    values.data_location = onnx.TensorProto.EXTERNAL
    for key, value in (("location", "w.data"), ("offset", str(offset)), ("length", str(len(data)))):
        values.external_data.add(key=key, value=value)
    onnx.save(meta, str(tmp_path / "m.onnx"))
    result = onnxl.align_external_data_streaming(tmp_path / "m.onnx", tmp_path / "m.onnx", "w.data")
    assert result.rewritten is True
    after = onnx.load(str(tmp_path / "m.onnx"), load_external_data=False)
    assert not after.graph.sparse_initializer[0].values.external_data  # inline, as onnx wants


def test_x_and_x_1_are_not_transformers_js_shards(tmp_path):
    model = uint8_model(2, 3000)
    save_two_file(model, tmp_path / "m.onnx", location="weights.bin", size_threshold=0)
    meta = onnx.load(str(tmp_path / "m.onnx"), load_external_data=False)
    entries = {e.key: e for e in meta.graph.initializer[1].external_data}
    with open(tmp_path / "weights.bin", "rb") as f:
        f.seek(int(entries["offset"].value))
        (tmp_path / "weights.bin_1").write_bytes(f.read(3000))
    entries["location"].value, entries["offset"].value = "weights.bin_1", "0"
    onnx.save(meta, str(tmp_path / "m.onnx"))
    result = onnxl.align_external_data_streaming(tmp_path / "m.onnx", tmp_path / "m.onnx")
    assert result.weights_paths == [str(tmp_path / "m.onnx.data")]
    assert read_back(tmp_path / "m.onnx") == tensor_bytes(model)


def test_dedup_out_never_replaces_a_file_under_an_invented_name(tmp_path, capsys):
    for name in ("text", "vision"):
        (tmp_path / name).mkdir()
        save_two_file(uint8_model(2, 3000, seed=len(name)), tmp_path / name / "model.onnx")
        (tmp_path / name / "genai_config.json").write_text(f'{{"model": "{name}"}}')
    (tmp_path / "out").mkdir()
    onnxl.save(uint8_model(1, 100), tmp_path / "out" / "text_model.onnx")  # someone's model
    before = folder_digest(tmp_path / "out")
    srcs = [tmp_path / "text" / "model.onnx", tmp_path / "vision" / "model.onnx"]
    code, _, err = _cli(capsys, "dedup", *srcs, "--out", tmp_path / "out")
    assert code == 1 and "which exists: name the outputs with --names" in err
    assert folder_digest(tmp_path / "out") == before
    os.remove(tmp_path / "out" / "text_model.onnx")
    (tmp_path / "out" / "genai_config.json").write_text("stale")
    code, out, err = _cli(capsys, "dedup", *srcs, "--out", tmp_path / "out", "--with-files")
    assert code == 0, err
    assert f"kept: {tmp_path / 'out' / 'genai_config.json'}, already there" in out
    assert (tmp_path / "out" / "genai_config.json").read_text() == "stale"
    # two folders, two configs of one name: the first is copied, the second said
    (tmp_path / "out2").mkdir()
    code, out, err = _cli(capsys, "dedup", *srcs, "--out", tmp_path / "out2", "--with-files")
    assert code == 0, err
    assert (tmp_path / "out2" / "genai_config.json").read_text() == '{"model": "text"}'
    assert f"not copied: {tmp_path / 'vision' / 'genai_config.json'}" in out
