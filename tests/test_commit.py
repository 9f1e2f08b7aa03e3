"""How a commit is made (``_commit/atomic.py``): temporary files, renames that can be undone.

A commit that fails (an exchange, a link or a rename refused, an immutable
``.onnx``) leaves the old pair as it was; files replaced keep their mode and new
files follow the umask; temporary names fit beside long legal names; two
spellings of one folder take one lock; an onnxruntime session opened before an
in-place re-align keeps reading the files it opened.
"""

from __future__ import annotations

import errno
import os
import stat
import subprocess

import numpy as np
import pytest
from helpers import as_options, folder_digest, read_back, save_two_file

import onnx_light.onnx as onnxl
from onnx_light.onnx._commit import atomic as _atomic


def _align(src, dst, weights, **kw):
    kw = as_options(kw, keep=("alignment", "chunk_size"))  # the settings in options=
    return onnxl.align_external_data_streaming(src, dst, weights, **kw)


@pytest.mark.parametrize("how", ["exchange", "link", "rename"])
def test_failed_commit_keeps_the_old_pair(pair, monkeypatch, how):
    path, tensors, before = pair
    if how != "exchange":
        monkeypatch.setattr(_atomic, "_exchange", lambda a, b: False)
    if how == "rename":

        def no_link(*args, **kwargs):
            raise OSError(errno.EPERM, "no hard links here")

        monkeypatch.setattr(os, "link", no_link)
    real_exchange, real_replace = _atomic._exchange, os.replace

    def refuse_onnx(real):
        def call(a, b, *args, **kwargs):
            if str(b) == str(path):
                raise OSError(errno.EPERM, "Operation not permitted (immutable)", str(b))
            return real(a, b, *args, **kwargs)

        return call

    monkeypatch.setattr(_atomic, "_exchange", refuse_onnx(real_exchange))
    monkeypatch.setattr(os, "replace", refuse_onnx(real_replace))
    with pytest.raises(OSError, match="immutable"):
        _align(path, path, "m.onnx.data", alignment=65536)
    assert folder_digest(path.parent) == before
    assert read_back(path) == tensors


def test_immutable_onnx(pair):
    """A real immutable .onnx (chattr +i): the commit fails, the old pair is untouched."""
    path, tensors, before = pair
    if subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not available here (needs root and ext4/xfs/btrfs)")
    try:
        with pytest.raises(OSError):
            _align(path, path, "m.onnx.data", alignment=65536)
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)
    assert folder_digest(path.parent) == before
    assert read_back(path) == tensors


# -- permissions ---------------------------------------------------------------------


def test_replaced_files_keep_their_mode(pair, tmp_path):
    path, tensors, _ = pair
    data = path.parent / "m.onnx.data"
    os.chmod(path, 0o600)
    os.chmod(data, 0o640)
    _align(path, path, "m.onnx.data")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(data).st_mode) == 0o640
    onnxl.save(onnxl.load(path), path)  # one file now, over the 0600 model
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert read_back(path) == tensors


def test_new_files_follow_the_umask(pair, tmp_path):
    path, _, _ = pair
    old = os.umask(0o027)
    try:
        _align(path, tmp_path / "a.onnx", "a.data")
    finally:
        os.umask(old)
    for name in ("a.onnx", "a.data"):
        assert stat.S_IMODE(os.stat(tmp_path / name).st_mode) == 0o640


# -- names and folders -----------------------------------------------------------------


def test_long_destination_names(pair, tmp_path):
    path, tensors, _ = pair
    name = "n" * 240 + ".onnx"  # 245 bytes, NAME_MAX is 255
    _align(path, tmp_path / name, "w" * 250 + ".data")
    assert read_back(tmp_path / name) == tensors
    onnxl.save(onnxl.load(path), tmp_path / name, "x" * 254)
    assert read_back(tmp_path / name) == tensors
    assert not [n for n in os.listdir(tmp_path) if n.endswith(_atomic.TMP_SUFFIX)]


def test_commit_through_two_spellings_of_one_folder(pair, tmp_path):
    """Weights in ``same/`` (a link to the model's folder): one lock, no deadlock."""
    path, tensors, _ = pair
    out = tmp_path / "out"
    out.mkdir()
    os.symlink(".", out / "same")
    _align(path, out / "a.onnx", "same/w.data")  # two names of one folder: one lock
    assert read_back(out / "a.onnx") == tensors
    # a folder that is itself reached through a link is fine as a destination
    link = tmp_path / "link"
    os.symlink(out, link)
    _align(path, link / "a.onnx", "a.data")
    assert read_back(out / "a.onnx") == tensors


# -- readers of the old pair ------------------------------------------------------------


def test_session_opened_before_an_in_place_align_keeps_working(tmp_path, runnable):
    from helpers import run_ort

    ort = pytest.importorskip("onnxruntime")
    path = tmp_path / "m.onnx"
    save_two_file(runnable, path, size_threshold=0)
    before = run_ort(path)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(3)
    feeds = {"X": rng.standard_normal((2, 256)).astype(np.float32), "cond": np.array(True)}
    first = session.run(None, feeds)
    _align(path, path, "m.onnx.data", alignment=65536)
    again = session.run(None, feeds)
    assert all(np.array_equal(a, b) for a, b in zip(first, again, strict=True))
    assert all(np.array_equal(a, b) for a, b in zip(before, run_ort(path), strict=True))
