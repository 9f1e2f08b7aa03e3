"""The fixtures every test file may ask for; the plain helpers are in helpers.py."""

from __future__ import annotations

import os
import subprocess

import pytest
from helpers import make_every_kind_model, make_runnable_model, two_file_pair


@pytest.fixture
def runnable():
    return make_runnable_model()


@pytest.fixture
def every_kind():
    return make_every_kind_model()


@pytest.fixture
def pair(tmp_path):
    """A two-file model m.onnx + m.onnx.data in tmp_path/src: (path, tensors, digest)."""
    return two_file_pair(tmp_path)


@pytest.fixture
def sparse_folder(tmp_path):
    """A folder whose filesystem holds a 2**62-byte sparse file (a 4 MiB tmpfs, as root)."""
    folder = tmp_path / "tmpfs"
    folder.mkdir()
    mounted = os.geteuid() == 0 and (
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(folder)], capture_output=True
        ).returncode
        == 0
    )
    try:
        with open(folder / "probe", "wb") as f:
            f.truncate(2**62)
        os.unlink(folder / "probe")
    except OSError:
        pytest.skip("no filesystem here holds a 2**62-byte sparse file")
    try:
        yield folder
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(folder)], capture_output=True)
