"""Edit a model of more than 2 GiB with onnx's tools, with and without its weights.

Usage::

    .venv/bin/python benchmarks/edit_proof.py [--gib 2.25] [--workdir DIR] [--rounds 1]

Builds a chain of Gemm nodes (``make_gemm_model``'s graph, 4096 x 4096
float32 weights of random values) whose weights file holds more than
``--gib`` GiB, streamed to disk one weight at a time. Then, for each tool,
each way runs in a fresh process (``--worker``), which imports everything,
runs the same steps once on a tiny model (first-call set-up), then measures
the edit with :class:`~onnx_light.bench.PeakMemory` (the kernel's ``VmHWM``):

- ``onnx``: onnx's own way. Its path-based function where it has one
  (``infer_shapes_path``, ``check_model(path)``, ``utils.extract_model``),
  else ``onnx.load`` with the weights, the tool, ``onnx.save`` with external
  data;
- ``share``: ``onnx_light.onnx.load(..., load_external_data=False)``, the
  tool, ``save_edited(..., share_weights=True)`` beside the source;
- ``compact``: the same, ``save_edited`` writing a compact copy elsewhere.

Every model written is run by onnxruntime and its outputs compared with a
numpy evaluation of the chain read from the source's weights (memory
mapped). The page cache is warm (the source was just written). Prints one
line per measurement, then the table as reStructuredText.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
from onnx import TensorProto, helper

DIM = 4096
TOOLS = ("infer_shapes", "check_model", "convert_version", "extractor", "merge_models")
TOOLS += ("rename", "metadata")
WAYS = ("onnx", "share", "compact")
GIB = 2**30


# -- the source model, streamed to disk ------------------------------------------


def build(folder: str, n: int, dim: int) -> str:
    """``make_gemm_model(n, dim)``'s graph, its weights written one at a time to
    ``model.onnx.data`` (never more than one weight in memory)."""
    rng = np.random.default_rng(0)
    scale = np.float32(1.0 / np.sqrt(dim))
    inits, nodes, offset = [], [], 0
    with open(os.path.join(folder, "model.onnx.data"), "wb") as f:
        for i in range(n):
            w = rng.standard_normal((dim, dim), dtype=np.float32) * scale
            b = rng.standard_normal(dim, dtype=np.float32) * np.float32(0.01)
            for name, array in ((f"W{i}", w), (f"B{i}", b)):
                f.write(array.tobytes())
                t = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=array.shape)
                t.data_location = TensorProto.EXTERNAL
                for key, value in (("location", "model.onnx.data"), ("offset", offset)):
                    t.external_data.add(key=key, value=str(value))
                t.external_data.add(key="length", value=str(array.nbytes))
                inits.append(t)
                offset += array.nbytes
            y = "Y" if i == n - 1 else f"H{i}"
            x = "X" if i == 0 else f"H{i - 1}"
            nodes.append(helper.make_node("Gemm", [x, f"W{i}", f"B{i}"], [y], name=f"gemm{i}"))
    graph = helper.make_graph(
        nodes,
        "gemm_chain",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["batch", dim])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["batch", dim])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    path = os.path.join(folder, "model.onnx")
    onnx.save(model, path)
    return path


def _head(dim: int) -> onnx.ModelProto:
    """A post-processing step to merge after the chain: ``Z = Relu(2 * Y)``, its
    scale a new inline tensor of ``4 * dim`` bytes."""
    scale = onnx.numpy_helper.from_array(np.full(dim, 2.0, np.float32), "scale")
    graph = helper.make_graph(
        [helper.make_node("Mul", ["Y", "scale"], ["S"]), helper.make_node("Relu", ["S"], ["Z"])],
        "head",
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["batch", dim])],
        [helper.make_tensor_value_info("Z", TensorProto.FLOAT, ["batch", dim])],
        [scale],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)


# -- the tools, the same edit on any proto ----------------------------------------


def _rename(model: onnx.ModelProto) -> onnx.ModelProto:
    names = {"X": "input", "Y": "output"}
    for value in [*model.graph.input, *model.graph.output]:
        value.name = names.get(value.name, value.name)
    for node in model.graph.node:
        node.input[:] = [names.get(n, n) for n in node.input]
        node.output[:] = [names.get(n, n) for n in node.output]
    return model


def edit(tool: str, model: onnx.ModelProto, half: str) -> onnx.ModelProto:
    """Apply ``tool`` to ``model`` (run from the model's folder: onnx's checker looks
    for the weights of a weightless proto from the current folder)."""
    import onnx.compose
    import onnx.shape_inference
    import onnx.utils
    import onnx.version_converter

    if tool == "infer_shapes":
        return onnx.shape_inference.infer_shapes(model)
    if tool == "check_model":
        onnx.checker.check_model(model, full_check=True)
        return model
    if tool == "convert_version":
        return onnx.version_converter.convert_version(model, 21)
    if tool == "extractor":
        inferred = onnx.shape_inference.infer_shapes(model)
        return onnx.utils.Extractor(inferred).extract_model(["X"], [half])
    if tool == "merge_models":
        dim = model.graph.input[0].type.tensor_type.shape.dim[1].dim_value
        return onnx.compose.merge_models(model, _head(dim), io_map=[("Y", "Y")])
    if tool == "rename":
        return _rename(model)
    if tool == "metadata":
        helper.set_model_props(model, {"author": "edit_proof", "edited": "yes"})
        return model
    raise ValueError(f"unknown tool {tool!r}")


def run_way(tool: str, way: str, src: str, out: str, half: str) -> str | None:
    """One edit, one way; the path of the model written (None: the checker)."""
    import onnx.shape_inference
    import onnx.utils

    import onnx_light.onnx as onnxl

    folder = os.path.dirname(src)
    beside = os.path.join(folder, f"edited-{tool}.onnx")
    compact = os.path.join(out, "edited.onnx")
    if way == "onnx":
        if tool == "infer_shapes":
            onnx.shape_inference.infer_shapes_path(src, beside)
            return beside
        if tool == "check_model":
            onnx.checker.check_model(src, full_check=True)
            return None
        if tool == "extractor":
            onnx.utils.extract_model(src, compact, ["X"], [half], check_model=False)
            return compact
        model = edit(tool, onnx.load(src), half)
        onnx.save(model, compact, save_as_external_data=True, location="edited.onnx.data")
        return compact
    model = edit(tool, onnxl.load(src, load_external_data=False), half)
    if tool == "check_model":
        return None
    dst = beside if way == "share" else compact
    onnxl.save_edited(model, src, dst, share_weights=way == "share")
    return dst


# -- one measurement in this fresh process ----------------------------------------


def worker(tool: str, way: str, src: str, tiny: str) -> dict:
    from onnx_light.bench import PeakMemory

    for path in (tiny, src):  # the tiny model first: imports and first-call set-up
        n = sum(1 for node in onnx.load(path, load_external_data=False).graph.node)
        half = f"H{n // 2 - 1}"
        out = tempfile.mkdtemp(prefix=f"{tool}-{way}-", dir=os.path.dirname(os.path.dirname(path)))
        os.chdir(os.path.dirname(path))
        error, written = None, None
        with PeakMemory() as pm:
            try:
                written = run_way(tool, way, path, out, half)
            except Exception as e:  # noqa: BLE001 - onnx's failure is a result here
                error = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
        if path == tiny:
            _remove(written)
            shutil.rmtree(out)
    return {
        "tool": tool,
        "way": way,
        "peak": pm.growth,
        "exact": pm.exact,
        "seconds": pm.seconds,
        "error": error,
        "written": written,
        "out": out,
        "half": half,
    }


def _remove(written: str | None) -> None:
    if written is None:
        return
    for name in (written, written + ".data"):
        if os.path.exists(name):
            os.remove(name)


# -- the check: onnxruntime against numpy ------------------------------------------


def reference(src: str, x: np.ndarray, n: int, upto: int) -> np.ndarray:
    """The chain's first ``upto`` Gemm nodes in numpy, weights memory-mapped."""
    data = np.memmap(src + ".data", dtype=np.float32, mode="r")
    dim, h = x.shape[1], x
    for i in range(upto):
        start = i * (dim * dim + dim)
        w = data[start : start + dim * dim].reshape(dim, dim)
        h = h @ w + data[start + dim * dim : start + dim * dim + dim]
    return h


def check_outputs(tool: str, path: str, src: str, n: int) -> float:
    """Run the edited model in onnxruntime; the largest difference from numpy."""
    import onnxruntime as ort

    x = np.random.default_rng(1).standard_normal((1, DIM)).astype(np.float32)
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    got = sess.run(None, {sess.get_inputs()[0].name: x})[0]
    del sess
    expected = reference(src, x, n, n // 2 if tool == "extractor" else n)
    if tool == "merge_models":
        expected = np.maximum(expected * 2, 0)
    diff = float(np.abs(got - expected).max())
    if not np.allclose(got, expected, rtol=1e-3, atol=1e-3):
        raise AssertionError(f"{tool}: onnxruntime differs from numpy by {diff}")
    return diff


# -- the driver ---------------------------------------------------------------------


def _mib(n: int) -> str:
    return f"{n / 2**10:,.0f} KiB" if n < 2**20 else f"{n / 2**20:,.0f} MiB"


def _row_cell(rec: dict | None) -> str:
    """``peak growth, time, bytes written`` of one measurement, or why it failed."""
    if rec is None:
        return "—"
    cell = f"{_mib(rec['peak'])}, {rec['seconds']:.2f} s"
    if rec["error"]:
        return f"fails after {cell}: {rec['error'].split(':')[0]}"
    if rec.get("bytes"):
        cell += f", writes {_mib(rec['bytes'])}"
    return cell


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gib", type=float, default=2.25, help="weights to write, in GiB")
    parser.add_argument("--workdir", default=None, help="where the model is written")
    parser.add_argument("--tools", default=",".join(TOOLS))
    parser.add_argument("--worker", nargs=4, metavar=("TOOL", "WAY", "SRC", "TINY"))
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(*args.worker)), flush=True)
        return 0
    n = math.ceil(args.gib * GIB / ((DIM * DIM + DIM) * 4))
    n += n % 2  # an even chain: the Extractor keeps half of it
    work = tempfile.mkdtemp(prefix="edit-proof-", dir=args.workdir)
    try:
        os.makedirs(os.path.join(work, "big"))
        os.makedirs(os.path.join(work, "tiny"))
        t0 = time.perf_counter()
        src = build(os.path.join(work, "big"), n, DIM)
        tiny = build(os.path.join(work, "tiny"), 2, 64)
        size = os.path.getsize(src + ".data")
        print(
            f"source: {n} weights of {DIM}x{DIM}, {size / GIB:.2f} GiB "
            f"({size} bytes), written in {time.perf_counter() - t0:.1f} s",
            flush=True,
        )
        results = {}
        for tool in args.tools.split(","):
            for way in WAYS:
                done = subprocess.run(
                    [sys.executable, __file__, "--worker", tool, way, src, tiny],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                rec = json.loads(done.stdout.strip().splitlines()[-1])
                if rec["written"] and not rec["error"]:
                    rec["diff"] = check_outputs(tool, rec["written"], src, n)
                    rec["bytes"] = sum(
                        os.path.getsize(p)
                        for p in (rec["written"], rec["written"] + ".data")
                        if os.path.exists(p)
                    )
                _remove(rec["written"])
                shutil.rmtree(rec["out"], ignore_errors=True)
                results[tool, way] = rec
                print(
                    json.dumps(
                        {
                            k: rec.get(k)
                            for k in (
                                "tool",
                                "way",
                                "peak",
                                "exact",
                                "seconds",
                                "error",
                                "bytes",
                                "diff",
                            )
                        }
                    ),
                    flush=True,
                )
        print()
        print(".. list-table::\n   :header-rows: 1\n")
        print(
            "   * - tool\n     - onnx (peak RSS growth, time, bytes written)\n"
            "     - onnx-light, sharing\n     - onnx-light, compact copy"
        )
        for tool in args.tools.split(","):
            cells = [_row_cell(results.get((tool, way))) for way in WAYS]
            if tool == "check_model":  # nothing is written: one way for onnx-light
                cells[2] = "(nothing written)"
            print(f"   * - ``{tool}``")
            for cell in cells:
                print(f"     - {cell}")
        for (tool, way), rec in results.items():
            if rec["error"]:
                print(f"{tool} / {way}: {rec['error']}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
