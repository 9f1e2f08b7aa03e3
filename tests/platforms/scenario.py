"""Every verb of onnx-light on two small models, in a folder: the files it leaves, digested.

Run as ``python scenario.py FOLDER`` (with or without a simulated platform,
see ``simulated/platform_simulation.py``); prints one JSON object: each step's
exit code, then ``{relative path: sha256}`` of every file left in FOLDER. The
same script on Linux and on a simulated platform must print the same thing.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _model(seed: int, shared: np.ndarray) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    inits = [
        numpy_helper.from_array(shared, "shared"),  # the same bytes in both models
        numpy_helper.from_array(rng.standard_normal((64, 96)).astype(np.float32), "W"),
        numpy_helper.from_array(rng.standard_normal(96).astype(np.float32), "B"),
        numpy_helper.from_array(rng.standard_normal(5).astype(np.float32), "small"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "shared"], ["h"]),
        helper.make_node("Gemm", ["h", "W", "B"], ["g"]),
        helper.make_node("ReduceSum", ["g"], ["s"], keepdims=0),
        helper.make_node("Add", ["s", "small"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _digest(folder: str) -> dict:
    out = {}
    for root, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, folder).replace(os.sep, "/")] = hashlib.sha256(
                    f.read()
                ).hexdigest()
    return dict(sorted(out.items()))


def main(folder: str) -> dict:
    from onnx_light.cli import main as cli

    shared = np.random.default_rng(0).standard_normal((32, 64)).astype(np.float32)
    os.makedirs(os.path.join(folder, "src"))
    for i, name in enumerate(("a", "b")):
        onnx.save(
            _model(i + 1, shared),
            os.path.join(folder, "src", f"{name}.onnx"),
            save_as_external_data=True,
            location=f"{name}.onnx.data",
            size_threshold=16,
        )
    j = lambda *p: os.path.join(folder, *p)  # noqa: E731
    steps = {
        "align": ["align", j("src", "a.onnx"), j("aligned", "a.onnx")],
        "align-64k-shards": [
            "align",
            j("src", "a.onnx"),
            j("shards", "a.onnx"),
            "--alignment",
            "64",
            "--max-shard-size",
            "16K",
        ],
        "align-durable": ["align", j("src", "b.onnx"), j("durable", "b.onnx"), "--durable"],
        "align-in-place": [
            "align",
            j("aligned", "a.onnx"),
            j("aligned", "a.onnx"),
            "--alignment",
            "65536",
        ],
        "align-inline": [
            "align",
            j("src", "a.onnx"),
            j("inline", "a.onnx"),
            "--inline-below",
            "1024",
        ],
        "dedup": ["dedup", j("src", "a.onnx"), j("src", "b.onnx"), "--out", j("dedup")],
        "convert": ["convert", "--to", "float16", j("src", "b.onnx"), j("half", "b.onnx")],
        "convert-in-place": [
            "convert",
            "--to",
            "float16",
            j("half", "b.onnx"),
            j("half", "b.onnx"),
        ],
        "verify": ["verify", j("dedup", "a.onnx")],
        "info": ["info", j("aligned", "a.onnx")],
    }
    for sub in ("aligned", "shards", "durable", "inline", "dedup", "half"):
        os.makedirs(j(sub))
    codes = {}
    for name, argv in steps.items():
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = cli(argv)
            except SystemExit as e:
                code = e.code
        codes[name] = code if code == 0 else f"{code}: {err.getvalue().strip()[-300:]}"
    # the in-place dedup last: the models it replaces are the sources
    codes["dedup-in-place"] = cli(
        ["dedup", "-q", "--in-place", j("dedup", "a.onnx"), j("dedup", "b.onnx")]
    )
    return {"codes": codes, "files": _digest(folder)}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1]), indent=1))
