"""Edit a model of more than 2 GiB with onnx's tools, with and without its weights.

Usage::

    .venv/bin/python benchmarks/proofs/edit_proof.py [--gib 2.25] [--workdir DIR] [--rounds 1]
        [--tools infer_shapes,...] [--output benchmarks/proofs/results/edit_proof.md]

Builds a chain of Gemm nodes (``make_gemm_model``'s graph, 4096 x 4096
float32 weights of random values) whose weights file holds more than
``--gib`` GiB, streamed to disk one weight at a time. Then, for each tool,
each way runs in a fresh process (``--worker``), which imports everything,
runs the same steps once on a tiny model (first-call set-up), then measures
the edit with :class:`~benchmarks.harness.PeakMemory` (the kernel's ``VmHWM``):

- ``onnx``: onnx's own way. Its path-based function where it has one
  (``infer_shapes_path``, ``check_model(path)``, ``utils.extract_model``),
  else ``onnx.load`` with the weights, the tool, ``onnx.save`` with external
  data;
- ``share``: ``onnx_light.onnx.load(..., load_external_data=False)``, the
  tool, ``save_edited(..., share_weights=True)`` beside the source;
- ``compact``: the same, ``save_edited`` writing a compact copy elsewhere.

Every model written is run by onnxruntime and its outputs compared with a
numpy evaluation of the chain read from the source's weights (memory
mapped). The page cache is warm (the source was just written). With
``--rounds N`` each (tool, way) runs N times, the rounds interleaved: memory
is the largest of the rounds, time ``min (median, max)``.

Prints one line per measurement, then writes the report,
``benchmarks/proofs/results/edit_proof.md`` (``--output``): the machine, the commit,
the command and the table (the edit how-to includes it). About 3 minutes a
round at the default size, 5 GiB of disk, 12 GiB of RAM. Below 2 GiB of
weights (``--gib 0.25``: a quick run, well under a minute) nothing reaches
protobuf's 2 GiB limit, so onnx's own way does not fail: the report's header
says it is a quick run.
"""

from __future__ import annotations

import argparse
import datetime
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
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)  # the checkout: benchmarks.*

from benchmarks.text import measured_commit, report_path, spread, write_report  # noqa: E402

OUTPUT = report_path("edit_proof.md")
# the tools as the table names them
SHOWN = {"extractor": "`Extractor` (half)", "merge_models": "`merge_models` (a head)"}
SHOWN |= {"rename": "rename", "metadata": "metadata"}


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
    from benchmarks.harness import PeakMemory

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
    if n < 2**10:
        return f"{n} B"
    return f"{n / 2**10:,.0f} KiB" if n < 2**20 else f"{n / 2**20:,.0f} MiB"


def _row_cell(recs: list[dict]) -> str:
    """``peak growth, time, bytes written`` of one (tool, way) over its rounds (the
    largest growth; time ``min (median, max)``), or why it failed."""
    if not recs:
        return "—"
    peak = max(r["peak"] for r in recs)
    cell = f"{_mib(peak)}, {spread([r['seconds'] for r in recs])} s"
    errors = [r["error"] for r in recs if r["error"]]
    if errors:
        failed = "" if len(errors) == len(recs) else f" in {len(errors)} of {len(recs)} rounds"
        return f"fails{failed} after {cell}: `{errors[0].split(':')[0]}`"
    written = {r["bytes"] for r in recs if r.get("bytes")}
    if written:
        cell += f", writes {_mib(max(written))}"
    return cell


def report(results: dict, tools: list[str], source: str, command: str, rounds: int,
           size: int, load: tuple[float, float]) -> str:  # fmt: skip
    """The Markdown report: machine, commit, command, what was measured, the table."""
    from benchmarks.harness import describe_machine

    now = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    lines = [
        "# Editing a model of more than 2 GiB with onnx's tools, with and without its weights",
        "",
        f"machine: {describe_machine()} ({measured_commit()}), {now}",
        "",
        f"command: `{command}`",
        "",
    ]
    if size <= 2 * GIB:
        lines += [
            f"**Quick run**: {size / GIB:.2f} GiB of weights, under protobuf's 2 GiB limit, "
            "so no tool fails on the loaded model here; the measurement of record runs "
            "the script at its default size (more than 2 GiB).",
            "",
        ]
    lines += [
        f"Source: {source}. Each way of each tool in a fresh process, "
        + (
            "once: the peak growth of the resident memory as the kernel counts it "
            "(`VmHWM`), the wall time, "
            if rounds == 1
            else f"{rounds} rounds interleaved: the peak growth of the resident memory as "
            "the kernel counts it (`VmHWM`, the largest of the rounds), the wall time (min "
            "(median, max) over the rounds), "
        )
        + "the bytes written (the `.onnx` and its weights file). onnx's way is its path-based function where it has one "
        "(`infer_shapes_path`, `check_model(path)`, `onnx.utils.extract_model`), else "
        "`onnx.load` with the weights, the tool, `onnx.save` with external data; "
        "onnx-light's: `load(..., load_external_data=False)`, the tool, `save_edited` "
        "beside the source (sharing) or elsewhere (compact copy). Every model written "
        "was run by onnxruntime and its outputs matched a numpy evaluation of the chain. "
        "Page cache warm (the source had just been written). "
        f"Load average (1 min) {load[0]:.2f} before, {load[1]:.2f} after "
        f"(of {os.cpu_count()} CPUs).",
        "",
        "| tool | onnx (peak RSS growth, time, bytes written) | onnx-light, sharing "
        "| onnx-light, compact copy |",
        "|---|---|---|---|",
    ]
    for tool in tools:
        cells = [_row_cell(results.get((tool, way), [])) for way in WAYS]
        if tool == "check_model":  # nothing is written: one way for onnx-light
            cells[2] = "(nothing written)"
        lines.append(f"| {SHOWN.get(tool, f'`{tool}`')} | " + " | ".join(cells) + " |")
    errors = {
        (tool, way): rec["error"]
        for (tool, way), recs in results.items()
        for rec in recs
        if rec["error"]
    }
    if errors:
        lines += ["", "Errors (the first line of each):", ""]
        lines += [f"- {tool} / {way}: `{error}`" for (tool, way), error in errors.items()]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gib", type=float, default=2.25, help="weights to write, in GiB")
    parser.add_argument("--workdir", default=None, help="where the model is written")
    parser.add_argument("--tools", default=",".join(TOOLS))
    parser.add_argument("--rounds", type=int, default=1, help="runs of each (tool, way)")
    parser.add_argument("--output", default=OUTPUT, help="the report ('' for none)")
    parser.add_argument("--worker", nargs=4, metavar=("TOOL", "WAY", "SRC", "TINY"))
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(*args.worker)), flush=True)
        return 0
    command = " ".join(["benchmarks/proofs/edit_proof.py", *argv])
    tools = args.tools.split(",")
    load_before = os.getloadavg()[0]
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
        source = (
            f"a chain of {n} Gemm nodes, {n} weights of {DIM}x{DIM} float32 (random values) "
            f"and their biases, {size / GIB:.2f} GiB in `model.onnx.data`"
        )
        print(f"source: {source}, written in {time.perf_counter() - t0:.1f} s", flush=True)
        results: dict[tuple[str, str], list[dict]] = {}
        for _round in range(args.rounds):
            for tool in tools:
                for way in WAYS:
                    rec = _measure(tool, way, src, tiny, n)
                    results.setdefault((tool, way), []).append(rec)
                    keys = ("tool", "way", "peak", "exact", "seconds", "error", "bytes", "diff")
                    print(json.dumps({k: rec.get(k) for k in keys}), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    load = (load_before, os.getloadavg()[0])
    text = report(results, tools, source, command, args.rounds, size, load)
    print()
    if args.output:
        write_report(args.output, text)
        print(f"written: {args.output}")
    else:
        print(text)
    return 0


def _measure(tool: str, way: str, src: str, tiny: str, n: int) -> dict:
    """One (tool, way) in a fresh process; its output checked by onnxruntime, then removed."""
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
    return rec


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
