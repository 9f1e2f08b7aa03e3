"""``onnx-light info`` on a model with a thousand small tensors, as exporters write them.

GPT-2 as optimum exports it holds 55 weights and about a thousand 8-byte
Constants (1,185 lines of table). ``info`` prints a summary (tensors by place,
bytes per file, alignment, shared ranges) and the files, then says how to list
the tensors; ``--tensors`` lists them largest first, ``--external`` and
``--min-size`` filter that table (and imply it) in text and JSON; ``--json``
keeps every tensor. It names an attribute tensor after its node, and says when a
weights file is missing.
"""

from __future__ import annotations

import json
import os

import numpy as np
import onnx
from helpers import run_cli as _cli
from helpers import save_two_file
from onnx import helper, numpy_helper

N_SMALL, N_WEIGHTS = 300, 4


def _exporter_like(folder) -> str:
    """N_WEIGHTS weights of 64 KiB in model.onnx_data, N_SMALL named 8-byte Constants."""
    rng = np.random.default_rng(0)
    weights = [
        numpy_helper.from_array(rng.standard_normal((128, 128)).astype(np.float32), f"h.{i}.w")
        for i in range(N_WEIGHTS)
    ]
    nodes = [
        helper.make_node(
            "Constant",
            [],
            [f"c{i}"],
            name=f"/h.{i}/Constant",
            value=numpy_helper.from_array(np.array([i], np.int64), ""),
        )
        for i in range(N_SMALL)
    ]
    graph = helper.make_graph(nodes, "g", [], [], weights)
    model = helper.make_model(graph)
    save_two_file(model, folder / "model.onnx", location="model.onnx_data")
    return str(folder / "model.onnx")


def test_info_leads_with_a_summary(tmp_path, capsys):
    path = _exporter_like(tmp_path)
    code, out, _ = _cli(capsys, "info", path)
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == (
        f"{path}: {N_SMALL + N_WEIGHTS} tensors, {N_WEIGHTS} external (256.0 KiB in 1 file), "
        f"{N_SMALL} inline (2.3 KiB)"
    )
    # 64 KiB tensors packed back to back by onnx.save: every offset a multiple of 65536
    assert lines[1:4] == [
        "common alignment of external offsets: 65536",
        "aligned to 4096: yes",
        "aligned to 65536: yes",
    ]
    # the files, then a line saying how to list the tensors: no table of 304 rows
    files = next(i for i, line in enumerate(lines) if line.startswith("file "))
    assert lines[files + 1].split()[:3] == [
        "model.onnx_data",
        str(N_WEIGHTS),
        str(N_WEIGHTS * 65536),
    ]
    assert lines[files + 2].split()[:2] == ["inline", str(N_SMALL)]
    assert lines[files + 3 :] == [
        "",
        f"{N_SMALL + N_WEIGHTS} tensors not listed: --tensors lists them, largest first; "
        f"--min-size 1K lists the {N_WEIGHTS} of at least 1 KiB",
    ]
    assert not any(line.startswith(("name ", "h.", "/h.")) for line in lines)


def test_tensors_lists_every_tensor_largest_first(tmp_path, capsys):
    path = _exporter_like(tmp_path)
    code, out, _ = _cli(capsys, "info", path, "--tensors")
    assert code == 0
    lines = out.splitlines()
    header = lines.index(f"every tensor ({N_SMALL + N_WEIGHTS}), largest first")
    assert lines[header + 1].split()[:3] == ["name", "dtype", "shape"]
    rows = [line.split()[0] for line in lines[header + 2 :]]
    # the 64 KiB weights first, then the 8-byte Constants; equal sizes in the model's order
    expected = [f"h.{i}.w" for i in range(N_WEIGHTS)]
    assert rows == expected + [f"/h.{i}/Constant.value" for i in range(N_SMALL)]
    sizes = {"w8": 8, "w4096": 4096, "w64": 64, "w1024": 1024}
    inits = [numpy_helper.from_array(np.zeros(n, np.uint8), name) for name, n in sizes.items()]
    onnx.save(helper.make_model(helper.make_graph([], "g", [], [], inits)), tmp_path / "s.onnx")
    out = _cli(capsys, "info", tmp_path / "s.onnx", "--tensors")[1]
    rows = [line.split()[0] for line in out.splitlines() if line.startswith("w")]
    assert rows == ["w4096", "w1024", "w64", "w8"]
    # --json keeps the model's order, and every tensor
    doc = json.loads(_cli(capsys, "info", tmp_path / "s.onnx", "--json")[1])
    assert [t["name"] for t in doc["tensors"]] == list(sizes)


def test_info_filters_the_table_not_the_summary(tmp_path, capsys):
    path = _exporter_like(tmp_path)
    code, out, _ = _cli(capsys, "info", path, "--external")
    assert code == 0
    rows = [line for line in out.splitlines() if line.startswith("h.")]
    assert [r.split()[0] for r in rows] == [f"h.{i}.w" for i in range(N_WEIGHTS)]
    listed = f"{N_WEIGHTS} of {N_SMALL + N_WEIGHTS} tensors listed: external tensors"
    assert f"{listed}, largest first" in out  # --external implies --tensors
    assert f"{N_SMALL + N_WEIGHTS} tensors" in out.splitlines()[0]
    code, out, _ = _cli(capsys, "info", path, "--min-size", "1K")
    assert code == 0 and not any(line.startswith("/h.") for line in out.splitlines())
    assert [r.split()[0] for r in out.splitlines() if r.startswith("h.")] == [
        f"h.{i}.w" for i in range(N_WEIGHTS)
    ]  # --min-size implies --tensors
    doc = json.loads(_cli(capsys, "info", path, "--json")[1])
    assert len(doc["tensors"]) == N_SMALL + N_WEIGHTS  # --json: every tensor
    doc = json.loads(_cli(capsys, "info", path, "--json", "--min-size", "1K")[1])
    assert [t["name"] for t in doc["tensors"]] == [f"h.{i}.w" for i in range(N_WEIGHTS)]
    assert doc["tensor_count"] == N_SMALL + N_WEIGHTS and doc["inline_tensors"] == N_SMALL
    assert doc["listed"] == {"external_only": False, "min_size": 1024}


def test_attribute_tensors_are_named_after_their_node(tmp_path, capsys):
    path = _exporter_like(tmp_path)
    doc = json.loads(_cli(capsys, "info", path, "--json")[1])
    names = [t["name"] for t in doc["tensors"] if t["location"] is None]
    assert names[:2] == ["/h.0/Constant.value", "/h.1/Constant.value"]
    assert doc["tensors"][N_WEIGHTS]["path"] == "graph.node[0].attribute[0].t"


def test_an_unnamed_node_keeps_the_proto_path(tmp_path, capsys):
    node = helper.make_node(
        "Constant", [], ["c"], value=numpy_helper.from_array(np.ones(2, np.float32), "")
    )
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(helper.make_graph([node], "g", [], [])), str(path))
    doc = json.loads(_cli(capsys, "info", path, "--json")[1])
    assert doc["tensors"][0]["name"] == "graph.node[0].attribute[0].t"


def test_a_missing_weights_file_is_said(tmp_path, capsys):
    path = _exporter_like(tmp_path)
    os.remove(tmp_path / "model.onnx_data")
    code, out, _ = _cli(capsys, "info", path)
    assert code == 0  # info describes; verify judges
    assert "missing: model.onnx_data does not exist" in out
    row = next(line for line in out.splitlines() if line.startswith("model.onnx_data "))
    assert row.split()[-1] == "missing"
    doc = json.loads(_cli(capsys, "info", path, "--json")[1])
    assert doc["missing_files"] == ["model.onnx_data"] and doc["files"][0]["missing"] is True
    inline_row = next(f for f in doc["files"] if f["location"] is None)
    assert "missing" not in inline_row


def test_plurals(tmp_path, capsys):
    t = numpy_helper.from_array(np.ones(300, np.float32), "w")
    model = helper.make_model(helper.make_graph([], "g", [], [], [t]))
    save_two_file(model, tmp_path / "m.onnx", location="m.data")
    out = _cli(capsys, "info", tmp_path / "m.onnx")[1]
    assert out.splitlines()[0].endswith(
        ": 1 tensor, 1 external (1.2 KiB in 1 file), 0 inline (0 B)"
    )
