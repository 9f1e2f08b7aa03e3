"""The dedup sources of ``make bench``: what the rows' targets assume."""

from __future__ import annotations

import importlib.util
import os
import sys

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import onnx_light.onnx as onnxl

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_PATH = os.path.join(ROOT, "benchmarks", "sources.py")
_SPEC = importlib.util.spec_from_file_location("bench_sources", _PATH)
sources = sys.modules["bench_sources"] = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(sources)  # without putting benchmarks/ on sys.path


def _arrays(path: str) -> dict[str, np.ndarray]:
    model = onnx.load(path)
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


def test_pair_shares_seven_eighths(tmp_path):
    paths = sources.Paths(str(tmp_path), "2MiB")
    a, b = paths.models("pair")
    os.makedirs(os.path.dirname(a))
    n, dim = sources.SIZES["2MiB"]
    sources._write_pair([a, b], n, dim)
    da, db = paths.datas("pair")
    assert os.path.getsize(da) == os.path.getsize(db)
    xa, xb = _arrays(a), _arrays(b)
    differ = sorted(k for k in xa if not np.array_equal(xa[k], xb[k]))
    assert differ == ["B0", "W0"]  # 1 weight (and its bias) out of 8
    naive = os.path.getsize(da) + os.path.getsize(db)
    out = tmp_path / "out"
    out.mkdir()
    result = onnxl.deduplicate_external_data(
        [a, b],
        [str(out / "a.onnx"), str(out / "b.onnx")],
        "weights.data",
        options=onnxl.WriteOptions(alignment=0),
    )
    assert result.bytes_written == pytest.approx(naive * 9 / 16, rel=0.01)
    assert _arrays(str(out / "b.onnx")).keys() == xb.keys()
    for k, v in _arrays(str(out / "b.onnx")).items():
        np.testing.assert_array_equal(v, xb[k])


def test_twins_have_many_twins(tmp_path):
    paths = sources.Paths(str(tmp_path), "tiny")
    a, b = paths.models("twins")
    os.makedirs(os.path.dirname(a))
    sources._write_twins([a, b], 800)
    blobs = [v.tobytes() for p in (a, b) for v in _arrays(p).values()]
    assert len(blobs) == 800
    assert len(set(blobs)) <= 800 // sources.TWIN_POOL
    # twins across the two models, not only within one
    assert set(blobs[:400]) & set(blobs[400:])
