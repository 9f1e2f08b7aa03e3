"""When source files are opened (``_read/sources.py``): each once, checked on its descriptor.

The file read is the file checked: a data file renamed over, edited (even with
its mtime set back) or turned into a hard link or a symlink between the checks
and the reads is noticed, and the model's folder is fixed when the model is
opened. Over the descriptor budget, files are closed and reopened, and a
reopened file must be the one first opened; a model with more data files than
the process may open descriptors is still read.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import onnx
import pytest
from helpers import as_options, read_back, save_two_file, tensor_bytes
from helpers import uint8_model as _model
from onnx import helper

import onnx_light.onnx as onnxl
from onnx_light.onnx._commit import targets as _targets
from onnx_light.onnx._read import sources as _sources


def _align(src, dst, weights, **kw):
    kw = as_options(kw, keep=("alignment", "chunk_size"))  # the settings in options=
    return onnxl.align_external_data_streaming(src, dst, weights, **kw)


def test_source_swapped_after_its_check_is_not_read(pair, tmp_path, monkeypatch):
    """The data file renamed over between the checks and the copy: the checked bytes are copied."""
    path, tensors, _ = pair
    data = path.parent / "m.onnx.data"
    real = _targets.check_targets

    def swap_then_check(*args, **kwargs):
        other = path.parent / "other"
        other.write_bytes(b"\xee" * os.path.getsize(data))
        os.replace(other, data)
        return real(*args, **kwargs)

    monkeypatch.setattr("onnx_light.onnx._pipeline.check_targets", swap_then_check)
    out = tmp_path / "out"
    out.mkdir()
    _align(path, out / "a.onnx", "a.data")
    assert read_back(out / "a.onnx") == tensors


# -- identity on the descriptor --------------------------------------------------


@pytest.mark.parametrize("link", [os.link, os.symlink], ids=["hard link", "symlink"])
def test_link_swapped_in_before_open(pair, tmp_path, monkeypatch, link):
    """A hard link or a symlink to a foreign file swapped in between the check and the open."""
    path, _, _ = pair
    secret = tmp_path / "secret"
    secret.write_bytes(b"\x42" * os.path.getsize(path.parent / "m.onnx.data"))
    real_open = os.open

    def swap_then_open(p, flags, *args, **kwargs):
        if str(p).endswith("m.onnx.data") and not os.path.islink(p) and os.stat(p).st_nlink == 1:
            os.unlink(p)
            link(secret, p)
        return real_open(p, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", swap_then_open)
    with pytest.raises(onnxl.ExternalDataError, match="'W0'.*(hard link|replaced)"):
        onnxl.load(path)


def test_hard_link_on_descriptor(pair, tmp_path, monkeypatch):
    """Same inode as stat saw, but a link count of 2 on the descriptor: refused."""
    path, _, _ = pair
    data = path.parent / "m.onnx.data"
    real_open = os.open

    def link_then_open(p, flags, *args, **kwargs):
        if str(p).endswith("m.onnx.data") and not (tmp_path / "second").exists():
            os.link(data, tmp_path / "second")
        return real_open(p, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", link_then_open)
    with pytest.raises(onnxl.ExternalDataError, match="2 hard links"):
        onnxl.load(path)


def test_model_link_swapped_after_open_does_not_widen_the_folder(tmp_path, monkeypatch):
    """The real path of the model is taken when it is opened: a link swapped to ``/x`` after
    that cannot make ``/`` the folder data may lie in."""
    from onnx_light.onnx._read import sources as _sources

    secret = tmp_path / "secret"
    secret.write_bytes(b"TOPSECRET!" * 100)
    folder = tmp_path / "m"
    folder.mkdir()
    t = onnx.TensorProto(name="w", data_type=onnx.TensorProto.UINT8, dims=[1000])
    t.data_location = onnx.TensorProto.EXTERNAL
    for key, value in (("location", "leak"), ("offset", "0"), ("length", "1000")):
        entry = t.external_data.add()
        entry.key, entry.value = key, value
    onnx.save(helper.make_model(helper.make_graph([], "g", [], [], [t])), str(folder / "real.onnx"))
    os.symlink(secret, folder / "leak")
    os.symlink("real.onnx", folder / "model.onnx")
    real_model = _sources.SourceFiles.model

    def swap_after_open(self, path):
        source = real_model(self, path)
        os.unlink(folder / "model.onnx")
        os.symlink("/nonexistent-x.onnx", folder / "model.onnx")
        return source

    monkeypatch.setattr(_sources.SourceFiles, "model", swap_after_open)
    with pytest.raises(onnxl.ExternalDataError, match="'w'.*outside"):
        onnxl.load(folder / "model.onnx")


# -- the descriptor budget: files closed and reopened ------------------------------


def _per_tensor_over_budget(tmp_path, monkeypatch):
    """12 data files, and a budget of 4 descriptors: files are closed and reopened."""
    folder = tmp_path / "src"
    folder.mkdir()
    model = _model(12, 2000)
    save_two_file(model, folder / "m.onnx", per_tensor=True, size_threshold=0)
    monkeypatch.setattr(_sources, "descriptor_budget", lambda: 4)
    return folder, model


def test_reopened_file_must_be_the_same(tmp_path, monkeypatch):
    """Over the descriptor budget, a file is reopened; replaced meanwhile, the call fails."""
    folder, model = _per_tensor_over_budget(tmp_path, monkeypatch)
    out = tmp_path / "out"
    out.mkdir()
    _align(folder / "m.onnx", out / "a.onnx", "a.data")  # reopened, unchanged: fine
    assert read_back(out / "a.onnx") == tensor_bytes(model)
    real = _targets.check_targets

    def modify_then_check(*args, **kwargs):
        victim = folder / "W0"
        victim.write_bytes(b"\xee" * os.path.getsize(victim))
        os.utime(victim, ns=(1, 1))
        return real(*args, **kwargs)

    monkeypatch.setattr("onnx_light.onnx._pipeline.check_targets", modify_then_check)
    with pytest.raises(onnxl.ExternalDataError, match="'W0'.*changed since it was checked"):
        _align(folder / "m.onnx", out / "b.onnx", "b.data")
    assert not (out / "b.onnx").exists()


def test_file_edited_with_its_mtime_set_back_is_noticed(tmp_path, monkeypatch):
    folder, _ = _per_tensor_over_budget(tmp_path, monkeypatch)
    real = _targets.check_targets

    def edit_then_check(*args, **kwargs):
        victim = folder / "W0"
        st = os.stat(victim)
        with open(victim, "r+b") as f:
            f.write(b"\xee" * 16)
        os.utime(victim, ns=(st.st_atime_ns, st.st_mtime_ns))  # mtime set back
        return real(*args, **kwargs)

    monkeypatch.setattr("onnx_light.onnx._pipeline.check_targets", edit_then_check)
    with pytest.raises(onnxl.ExternalDataError, match="'W0'.*changed since it was checked"):
        _align(folder / "m.onnx", tmp_path / "b.onnx", "b.data")


_FEW_FDS = textwrap.dedent(
    """
    import resource, sys
    import onnx
    import onnx_light.onnx as onnxl

    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
    src, out = sys.argv[1:]
    onnx.load(src)  # onnx reads it under this limit: so must onnx-light
    model = onnxl.load(src)
    onnxl.align_external_data_streaming(src, out + "/a.onnx", "a.data")
    meta = onnxl.load(src, load_external_data=False)
    opts = onnxl.SerializeOptions(use_external_data_location=False, base_dir=src.rsplit("/", 1)[0])
    onnxl.save(meta, out + "/b.onnx", "b.data", options=opts)
    onnxl.save(model, out + "/c.onnx", "c.data")
    print("ok")
    """
)


def test_more_data_files_than_descriptors(tmp_path):
    folder = tmp_path / "src"
    folder.mkdir()
    model = _model(150, 100)
    save_two_file(model, folder / "m.onnx", per_tensor=True, size_threshold=0)
    out = tmp_path / "out"
    out.mkdir()
    proc = subprocess.run(
        [sys.executable, "-c", _FEW_FDS, str(folder / "m.onnx"), str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.stdout.strip() == "ok", proc.stderr
    for name in ("a.onnx", "b.onnx", "c.onnx"):
        assert read_back(out / name) == tensor_bytes(model)
