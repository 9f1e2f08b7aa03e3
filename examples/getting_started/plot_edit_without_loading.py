"""
.. _l-example-plot-edit-without-loading:

Edit a model without loading its weights
========================================

onnx's graph tools (shape inference, the checker, the version converter,
:class:`onnx.utils.Extractor`, :mod:`onnx.compose`) only read and change the
graph. Run them on a model loaded with ``load_external_data=False`` and the
weights never enter memory; :func:`onnx_light.onnx.save_edited` then writes
the result either **beside the source, sharing its weights**, or as a
**compact copy** holding only the bytes the edited model still references,
copied file to file.

This example builds a model (24 float32 weights of 1024 x 1024, 96 MiB;
8 of 256 x 256 under ``UNITTEST_GOING=1``), keeps its first half with the
Extractor, renames its input and tags it, writes both kinds of output,
checks them with onnxruntime and the ``onnx-light`` command line, and
compares the peak memory of the edit with onnx's usual way.
:ref:`l-howto-edit-without-loading` has the recipe and the numbers for a
model of more than 2 GiB.
"""

# %%
# A model with its weights in a second file
# -----------------------------------------

import os
import shutil
import tempfile

import matplotlib.pyplot as plt
import numpy as np
import onnx
import onnx.shape_inference
import onnx.utils
import onnxruntime
import pandas

import onnx_light.onnx as onnxl
from onnx_light.bench import (
    PeakMemory,
    make_gemm_model,
    mib_on_disk,
    model_inputs,
    show_command,
    sized,
    tool_colors,
    weights_nbytes,
)

N_WEIGHTS, DIM = sized((24, 1024), quick=(8, 256))
MiB = 2**20

folder = tempfile.mkdtemp(prefix="onnx-light-edit-")
src = os.path.join(folder, "model.onnx")
onnx.save(
    make_gemm_model(N_WEIGHTS, DIM),
    src,
    save_as_external_data=True,
    location="model.onnx.data",
)
print(f"model.onnx.data: {os.path.getsize(src + '.data') / MiB:.1f} MiB")

# %%
# Load the graph only, and edit it with onnx's tools
# ---------------------------------------------------
#
# Every weight stays a reference into ``model.onnx.data``. The Extractor
# needs the shapes of the intermediate results, so shape inference runs
# first. The edit keeps the first half of the chain, renames the input ``X``
# to ``input`` and adds metadata.

half = f"H{N_WEIGHTS // 2 - 1}"


def edit(model: onnx.ModelProto) -> onnx.ModelProto:
    """Shape inference, the first half of the chain, a renamed input, metadata."""
    model = onnx.shape_inference.infer_shapes(model)
    model = onnx.utils.Extractor(model).extract_model(["X"], [half])
    model.graph.input[0].name = "input"
    for node in model.graph.node:
        node.input[:] = ["input" if name == "X" else name for name in node.input]
    onnx.helper.set_model_props(model, {"edited_by": "onnx-light", "keeps": half})
    return model


model = onnxl.load(src, load_external_data=False)
edited = edit(model)  # the first call also sets up onnx's operator tables
print(f"{len(edited.graph.initializer)} of {len(model.graph.initializer)} tensors kept")

# %%
# Two ways to write it
# --------------------
#
# *Sharing*: ``half.onnx`` beside the source, its references kept as they
# are; it reads ``model.onnx.data``, and no weight is written. *Compact*: a
# self-contained copy elsewhere, ``half.onnx.data`` holding only the kept
# weights, at offsets aligned to 4096. Each is done end to end (load, edit,
# save) inside :class:`~onnx_light.bench.PeakMemory`, which reads the
# kernel's peak resident memory (``VmHWM``).

shared = os.path.join(folder, "half.onnx")
with PeakMemory() as share_mem:
    edited = edit(onnxl.load(src, load_external_data=False))
    onnxl.save_edited(edited, src, shared, share_weights=True)

os.makedirs(os.path.join(folder, "compact"))
compact = os.path.join(folder, "compact", "half.onnx")
with PeakMemory() as compact_mem:
    edited = edit(onnxl.load(src, load_external_data=False))
    onnxl.save_edited(edited, src, compact)

sizes = pandas.DataFrame(  # the sharing copy writes no weights file
    [
        [name, mib_on_disk(path), mib_on_disk(path + ".data")]
        for name, path in [("source", src), ("sharing", shared), ("compact", compact)]
    ],
    columns=["model", ".onnx (MiB)", "new weights (MiB)"],
)
print(sizes.round(3).to_string(index=False))

# %%
# onnxruntime runs both, and computes what the full model computes at ``half``
# -----------------------------------------------------------------------------
#
# The reference is the source model loaded with its weights by onnx, cut by
# the Extractor in memory, as onnx users do it today.

feeds = model_inputs(DIM)
expected = onnxruntime.InferenceSession(
    onnx.utils.Extractor(onnx.shape_inference.infer_shapes(onnx.load(src)))
    .extract_model(["X"], [half])
    .SerializeToString(),
    providers=["CPUExecutionProvider"],
).run(None, feeds)[0]
for path in (shared, compact):
    sess = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    got = sess.run(None, {"input": feeds["X"]})[0]
    np.testing.assert_array_equal(got, expected)
    print(f"{os.path.relpath(path, folder)}: same outputs as onnx's in-memory edit")

# %%
# The command line shows where each kept tensor lives
# ----------------------------------------------------

show_command("info", "compact/half.onnx", cwd=folder)

# %%
# Peak memory, from the kernel
# ----------------------------
#
# The same edit done as onnx does it: :func:`onnx.load` with the weights,
# the tools, :func:`onnx.save` with external data. Measured in this process
# after the other runs, with freed memory handed back first; the how-to
# measures each way in a fresh process, on 2.25 GiB of weights.

onnx_out = os.path.join(folder, "onnx")
os.makedirs(onnx_out)
with PeakMemory() as onnx_mem:
    full = edit(onnx.load(src))
    onnx.save(
        full,
        os.path.join(onnx_out, "half.onnx"),
        save_as_external_data=True,
        location="half.onnx.data",
    )
    del full

memory = pandas.DataFrame(
    [
        ["onnx", onnx_mem.growth / MiB, onnx_mem.exact],
        ["onnx-light, sharing", share_mem.growth / MiB, share_mem.exact],
        ["onnx-light, compact", compact_mem.growth / MiB, compact_mem.exact],
    ],
    columns=["load, edit, save", "peak RSS growth (MiB)", "kernel's VmHWM"],
)
print(memory.round(2).to_string(index=False))
print(f"weights of the full model: {weights_nbytes(N_WEIGHTS, DIM) / MiB:.1f} MiB")

# %%
# The picture
# -----------
#
# Left, what each way held in memory at its peak; right, what it wrote.
# onnx's way holds several times the weights (shape inference and the
# Extractor copy the loaded model); the sharing copy writes a few KiB, the
# compact one half the weights, and neither loads them.

written = [mib_on_disk(onnx_out)]
written += [mib_on_disk(shared, shared + ".data"), mib_on_disk(compact, compact + ".data")]
ways = memory["load, edit, save"]
colors = tool_colors(ways)  # onnx, then onnx-light's two ways (the second lighter)
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.2), sharey=True)
for ax, values, title, unit in (
    (ax1, memory["peak RSS growth (MiB)"], "peak memory of load, edit, save", "peak RSS growth"),
    (ax2, written, "files written for the edited model", "bytes written"),
):
    bars = ax.barh(ways, values, color=colors)
    ax.bar_label(bars, [f" {v * 1024:.0f} KiB" if v < 0.1 else f" {v:.2f} MiB" for v in values])
    ax.set_xlabel(f"{unit} (MiB)")
    ax.set_title(title)
    ax.set_xlim(0, max(values) * 1.35)
ax1.invert_yaxis()
fig.tight_layout()

# %%
# Clean up.

shutil.rmtree(folder, ignore_errors=True)
