"""load: the same tensors onnx.load returns, read in parallel."""

import os

import onnx
import pytest
from helpers import make_every_kind_model, save_two_file, tensor_bytes

import onnx_light.onnx as onnxl
from onnx_light.onnx._read.tensors import is_external, iter_tensors


def test_protos_are_onnx_classes():
    assert onnxl.ModelProto is onnx.ModelProto
    assert onnxl.TensorProto is onnx.TensorProto
    assert onnxl.helper is onnx.helper
    assert onnxl.numpy_helper is onnx.numpy_helper
    assert issubclass(onnxl.ExternalDataError, ValueError)


@pytest.mark.parametrize("layout", ["one", "two", "per_tensor"])
@pytest.mark.parametrize("threads", [1, 2, 4])
def test_load_matches_onnx(tmp_path, layout, threads):
    model = make_every_kind_model()
    path = tmp_path / "m.onnx"
    if layout == "one":
        onnx.save(model, str(path))
    else:
        save_two_file(model, path, per_tensor=layout == "per_tensor", size_threshold=0)
    if layout == "per_tensor":
        assert len(os.listdir(tmp_path)) > 5
    ours = onnxl.load(path, num_threads=threads)
    theirs = onnx.load(str(path))
    assert ours.SerializeToString() == theirs.SerializeToString()
    assert tensor_bytes(ours) == tensor_bytes(model)
    assert not any(is_external(s.tensor) for s in iter_tensors(ours))


def test_load_keeps_references(tmp_path):
    save_two_file(make_every_kind_model(), tmp_path / "m.onnx")
    ours = onnxl.load(tmp_path / "m.onnx", load_external_data=False)
    assert (
        ours.SerializeToString()
        == onnx.load(str(tmp_path / "m.onnx"), load_external_data=False).SerializeToString()
    )


def test_missing_offset_and_length(tmp_path):
    """No offset means 0, no length means to the end of the file, as in onnx."""
    model = make_every_kind_model()
    save_two_file(model, tmp_path / "m.onnx", per_tensor=True)
    meta = onnx.load(str(tmp_path / "m.onnx"), load_external_data=False)
    for site in iter_tensors(meta):
        t = site.tensor
        if is_external(t):
            keep = [(e.key, e.value) for e in t.external_data if e.key == "location"]
            del t.external_data[:]
            for k, v in keep:
                t.external_data.add(key=k, value=v)
    onnx.save(meta, str(tmp_path / "m.onnx"))
    ours = onnxl.load(tmp_path / "m.onnx")
    assert tensor_bytes(ours) == tensor_bytes(model)


def test_load_accepts_pathlike_and_str(tmp_path):
    onnx.save(make_every_kind_model(), str(tmp_path / "m.onnx"))
    a = onnxl.load(tmp_path / "m.onnx")
    b = onnxl.load(str(tmp_path / "m.onnx"))
    assert a.SerializeToString() == b.SerializeToString()


@pytest.mark.parametrize(
    "bad,error",
    [(0, ValueError), (-1, ValueError), (1.5, TypeError), ("2", TypeError), (True, TypeError)],
)
def test_bad_num_threads(tmp_path, bad, error):
    """A wrong value is a ValueError, a wrong type a TypeError (one rule everywhere)."""
    onnx.save(make_every_kind_model(), str(tmp_path / "m.onnx"))
    with pytest.raises(error, match="num_threads"):
        onnxl.load(tmp_path / "m.onnx", num_threads=bad)


def test_not_an_onnx_file(tmp_path):
    (tmp_path / "x.onnx").write_bytes(b"\xff\xff\xff garbage")
    with pytest.raises(ValueError, match="x.onnx"):
        onnxl.load(tmp_path / "x.onnx")
    (tmp_path / "e.onnx").write_bytes(b"")
    with pytest.raises(ValueError, match="empty"):
        onnxl.load(tmp_path / "e.onnx")
    with pytest.raises(FileNotFoundError, match="nope.onnx"):
        onnxl.load(tmp_path / "nope.onnx")
    with pytest.raises(IsADirectoryError):
        onnxl.load(tmp_path)


def test_default_num_threads_is_one_reader(tmp_path, monkeypatch):
    """num_threads=None reads with one thread, even a model of one file per tensor:
    measured (benchmarks/proofs/threads_proof.py), more readers were slower warm and faster
    cold, neither beyond the rounds' spread. Asked for, they run, up to one per file."""
    from onnx_light.onnx import _io

    used = []
    real = _io.read_refs

    def spy(refs, files, num_threads=1):
        used.append(num_threads)
        return real(refs, files, num_threads)

    monkeypatch.setattr(_io, "read_refs", spy)
    model = make_every_kind_model()
    path = tmp_path / "m.onnx"
    save_two_file(model, path, per_tensor=True, size_threshold=0)
    files = len(os.listdir(tmp_path)) - 1
    assert files > 4
    onnxl.load(path)
    onnxl.load(path, num_threads=None)
    onnxl.load(path, num_threads=4)
    onnxl.load(path, num_threads=10 * files)
    assert used == [1, 1, 4, files]
    assert onnxl.check_setting("num_threads", None) == 1
