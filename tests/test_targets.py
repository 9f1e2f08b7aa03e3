"""Which files a call may replace (``_commit/targets.py``): never one the call reads.

A destination (the new ``.onnx`` or its weights file) that is a source of the
call, under any spelling (a symlink, a hard link, a symlinked folder, ``..``),
is refused before anything is written, through ``save``, the shared save, the
streaming helper and the command line; re-aligning in place goes through the
model's one name only. A destination that is a device or a FIFO, or ends with
``/``, is refused too.

Each refusal as a user reads it, word for word: a missing or non-folder
destination folder, a FIFO as destination, a weights name that is a model the
call writes, that is not UTF-8 or that reads as a drive, an ambiguous weights
path, a destination that is a file the call reads (the message says which: the
model, or the file of a tensor, and what to do, a hard-linked model included),
and in place a ``.safetensors`` the model reads. The same rules accept a model
folder named through a symbolic link and a weights path only one reading of
which exists; an in-place re-align checks every destination for other readers,
not just the first.
"""

from __future__ import annotations

import os
import stat
import struct

import numpy as np
import pytest
from helpers import (
    as_options,
    external_offsets,
    folder_digest,
    read_back,
    save_two_file,
    tensor_bytes,
    write_safetensors,
)
from helpers import uint8_model as _model
from onnx import TensorProto, helper, numpy_helper

import onnx_light.onnx as onnxl
from onnx_light.cli import main


def _align(src, dst, weights, **kw):
    kw = as_options(kw, keep=("alignment", "chunk_size"))  # the settings in options=
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


# -- each refusal word for word ----------------------------------------------------------


def _two_tensors():
    return _model(2, 3000)


def _refused(call, exc) -> str:
    with pytest.raises(exc) as info:
        call()
    assert type(info.value) is exc
    return str(info.value)


# -- the destination itself -----------------------------------------------------------------


def test_a_missing_destination_folder_says_how_to_create_it(tmp_path):
    assert _refused(
        lambda: onnxl.save(_two_tensors(), tmp_path / "nope" / "m.onnx"), FileNotFoundError
    ) == (
        f"destination folder '{tmp_path / 'nope'}' does not exist: create it first "
        "(os.makedirs in Python, mkdir -p in a shell); nothing was written"
    )
    assert os.listdir(tmp_path) == []


def test_a_destination_folder_that_is_a_file(tmp_path):
    (tmp_path / "afile").write_bytes(b"x")
    message = _refused(
        lambda: onnxl.save(_two_tensors(), tmp_path / "afile" / "m.onnx"), NotADirectoryError
    )
    assert message == f"destination folder '{tmp_path / 'afile'}' is not a folder"
    assert (tmp_path / "afile").read_bytes() == b"x"


def test_a_fifo_is_never_replaced(tmp_path):
    """A FIFO where the weights file would go: refused before anything is opened on it."""
    os.mkfifo(tmp_path / "w.data")
    message = _refused(
        lambda: onnxl.save(_two_tensors(), tmp_path / "m.onnx", "w.data"), ValueError
    )
    assert message == (
        f"destination '{tmp_path / 'w.data'}' exists and is not a regular file (a device, "
        "FIFO or socket?): refusing to replace it"
    )
    assert os.listdir(tmp_path) == ["w.data"]


# -- the weights name -------------------------------------------------------------------------


def test_dedup_refuses_a_weights_name_that_is_another_destination_model(tmp_path):
    """The weights name ``y.onnx`` is the second destination model: the message names it
    as a model the call writes (not as the first model "itself")."""
    save_two_file(_two_tensors(), tmp_path / "a.onnx", size_threshold=0)
    save_two_file(_two_tensors(), tmp_path / "b.onnx", size_threshold=0)
    before = folder_digest(tmp_path)
    message = _refused(
        lambda: onnxl.deduplicate_external_data(
            [tmp_path / "a.onnx", tmp_path / "b.onnx"],
            [tmp_path / "x.onnx", tmp_path / "y.onnx"],
            "y.onnx",
        ),
        ValueError,
    )
    assert message == (
        f"weights file 'y.onnx' cannot be the model file '{tmp_path / 'y.onnx'}', a model the "
        "call writes"
    )
    assert folder_digest(tmp_path) == before


def test_a_weights_name_that_is_not_utf8(tmp_path):
    location = os.fsdecode(b"w\xff.data")
    message = _refused(
        lambda: onnxl.save(_two_tensors(), tmp_path / "m.onnx", location), ValueError
    )
    assert message == (
        f"weights file '{tmp_path}/w\\xff.data': its name is not valid UTF-8, and ONNX records "
        "locations as UTF-8 strings; choose another name"
    )
    assert os.listdir(tmp_path) == []


def test_a_weights_name_that_reads_as_a_drive(tmp_path):
    """``C:w.data`` is a legal name here, but readers on Windows take it for a drive: the
    rule of load, said for the weights file."""
    message = _refused(
        lambda: onnxl.save(_two_tensors(), tmp_path / "m.onnx", "C:w.data"), ValueError
    )
    assert message == (
        f"weights file '{tmp_path}/C:w.data': location 'C:w.data' is absolute; external data "
        "must be relative to the model's folder; choose another name"
    )
    assert os.listdir(tmp_path) == []


# -- reading the weights path -------------------------------------------------------------


def test_a_model_folder_named_through_a_symbolic_link(tmp_path, monkeypatch):
    """From inside ``real/``, saving to ``link/m.onnx`` (``link`` -> ``real``) with
    ``w.data``: both readings name one file, so it is no ambiguity; it goes in ``real/``."""
    (tmp_path / "real").mkdir()
    os.symlink("real", tmp_path / "link")
    monkeypatch.chdir(tmp_path / "real")
    model = _two_tensors()
    onnxl.save(model, tmp_path / "link" / "m.onnx", "w.data")
    assert sorted(os.listdir(tmp_path / "real")) == ["m.onnx", "w.data"]
    assert external_offsets(tmp_path / "real" / "m.onnx") == [
        ("w.data", 0, 3000),
        ("w.data", 3000, 3000),
    ]


def test_an_ambiguous_weights_path_gives_both_readings(tmp_path, monkeypatch):
    """``out/w.data`` from ``tmp`` for a model in ``out/``, where ``out/out/`` exists too."""
    (tmp_path / "out" / "out").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    call = lambda: onnxl.save(_two_tensors(), tmp_path / "out" / "m.onnx", "out/w.data")  # noqa: E731
    assert _refused(call, ValueError) == (
        f"weights path 'out/w.data' is ambiguous: from the current folder it is "
        f"'{tmp_path}/out/w.data', from the model's folder '{tmp_path}/out' it is "
        f"'{tmp_path}/out/out/w.data'; pass an absolute path (os.path.join(folder, name) with "
        "an absolute folder)"
    )
    assert os.listdir(tmp_path / "out") == ["out"]


def test_a_weights_path_whose_folder_exists_only_from_the_model(tmp_path, monkeypatch):
    """From ``F/a/``, ``b/w.data`` for a model in ``F/``: ``F/a/b/`` does not exist, ``F/b/``
    does: the weights go to ``F/b/w.data``."""
    (tmp_path / "F" / "a").mkdir(parents=True)
    (tmp_path / "F" / "b").mkdir()
    monkeypatch.chdir(tmp_path / "F" / "a")
    model = _two_tensors()
    onnxl.save(model, tmp_path / "F" / "m.onnx", "b/w.data")
    assert os.listdir(tmp_path / "F" / "b") == ["w.data"]
    assert read_back(tmp_path / "F" / "m.onnx") == tensor_bytes(model)


# -- destinations the call reads -----------------------------------------------------------


@pytest.fixture
def src(tmp_path):
    save_two_file(_two_tensors(), tmp_path / "src.onnx", size_threshold=0)
    return tmp_path / "src.onnx"


HINT = "give the new files other names, or pass the source .onnx as the destination to re-align it in place"


def test_overwriting_a_tensors_file_says_which_tensor_and_what_to_do(src):
    folder = src.parent
    before = folder_digest(folder)
    call = lambda: onnxl.align_external_data_streaming(src, folder / "n.onnx", "src.onnx.data")  # noqa: E731
    assert _refused(call, onnxl.ExternalDataError) == (
        f"destination '{folder}/src.onnx.data': this call would overwrite "
        f"'{folder}/src.onnx.data', the file holding the bytes of tensor 'W0' "
        f"(graph.initializer[0]), and leave the source model broken; {HINT}"
    )
    assert folder_digest(folder) == before


def test_overwriting_the_model_read_says_so(src):
    folder = src.parent
    before = folder_digest(folder)
    call = lambda: onnxl.align_external_data_streaming(src, folder / "n.onnx", "src.onnx")  # noqa: E731
    assert _refused(call, onnxl.ExternalDataError) == (
        f"destination '{folder}/src.onnx': this call would overwrite the model "
        f"'{folder}/src.onnx' it reads, and leave the source model broken; {HINT}"
    )
    assert folder_digest(folder) == before


def test_in_place_every_destination_is_checked_for_other_readers(tmp_path):
    """m.onnx keeps I inline and W in m.onnx.data; view.onnx reads only I's bytes inside
    m.onnx. Re-aligning m.onnx in place replaces m.onnx.data (read by no one else) and
    m.onnx (read by view.onnx): refused, naming m.onnx and view.onnx."""
    rng = np.random.default_rng(0)
    model = _two_tensors()
    model.graph.initializer[0].CopyFrom(
        numpy_helper.from_array(rng.integers(0, 255, 4000, dtype=np.uint8), "I")
    )
    model.graph.initializer[1].CopyFrom(
        numpy_helper.from_array(rng.integers(0, 255, 6000, dtype=np.uint8), "W")
    )
    path = tmp_path / "m.onnx"
    onnxl.save(model, path, "m.onnx.data", options=onnxl.SerializeOptions(size_threshold=5000))
    assert external_offsets(path) == [("m.onnx.data", 0, 6000)]
    view = onnxl.load(path, load_external_data=False, skip_raw_data=True)
    del view.graph.initializer[1]
    onnxl.save(view, tmp_path / "view.onnx")
    assert external_offsets(tmp_path / "view.onnx")[0][0] == "m.onnx"
    before = folder_digest(tmp_path)
    call = lambda: onnxl.align_external_data_streaming(path, path, "m.onnx.data", alignment=64)  # noqa: E731
    assert _refused(call, onnxl.ExternalDataError) == (
        f"destination '{path}' is read by '{tmp_path / 'view.onnx'}', another model of the "
        "folder: replacing it would break that model; write the new files under other names "
        "(the old ones stay for it)"
    )
    assert folder_digest(tmp_path) == before


def test_in_place_a_hard_linked_model_is_not_rewritten_and_says_why(tmp_path):
    """m.onnx has a second hard link (m2.onnx), which reads m.onnx.data too: re-aligning
    it "in place" over m.onnx.data is refused, the message saying what to do instead."""
    path = tmp_path / "m.onnx"
    save_two_file(_two_tensors(), path, size_threshold=0)
    os.link(path, tmp_path / "m2.onnx")
    before = folder_digest(tmp_path)
    call = lambda: onnxl.align_external_data_streaming(path, path, "m.onnx.data")  # noqa: E731
    assert _refused(call, onnxl.ExternalDataError) == (
        f"destination '{tmp_path}/m.onnx.data': this call would overwrite "
        f"'{tmp_path}/m.onnx.data', the file holding the bytes of tensor 'W0' "
        f"(graph.initializer[0]), and leave the source model broken; '{path}' has other hard "
        "links, which read these files: it cannot be re-aligned in place; re-align it into a "
        "folder of your own"
    )
    assert folder_digest(tmp_path) == before


def test_in_place_a_safetensors_the_model_reads_is_never_replaced(tmp_path):
    """m.onnx reads its tensor A inside w.safetensors (after the header): re-aligning it in
    place with ``w.safetensors`` as the weights name is refused, since other tools load that
    file for themselves; it stays byte for byte."""
    write_safetensors(tmp_path / "w.safetensors", {"a": np.arange(64, dtype=np.float32)})
    header = struct.unpack("<Q", (tmp_path / "w.safetensors").read_bytes()[:8])[0]
    a = TensorProto(name="A", data_type=TensorProto.FLOAT, dims=[64])
    a.data_location = TensorProto.EXTERNAL
    for key, value in (
        ("location", "w.safetensors"),
        ("offset", str(8 + header)),
        ("length", "256"),
    ):
        entry = a.external_data.add()
        entry.key, entry.value = key, value
    path = tmp_path / "m.onnx"
    path.write_bytes(helper.make_model(helper.make_graph([], "g", [], [], [a])).SerializeToString())
    before = folder_digest(tmp_path)
    call = lambda: onnxl.align_external_data_streaming(path, path, "w.safetensors")  # noqa: E731
    assert _refused(call, onnxl.ExternalDataError) == (
        f"destination '{tmp_path}/w.safetensors' is a file this model reads and that other "
        "models or tools load for themselves (another .onnx, or a .safetensors): even in place "
        "it is never replaced; name the weights file otherwise"
    )
    assert folder_digest(tmp_path) == before
