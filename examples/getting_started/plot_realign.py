"""
.. _l-example-plot-realign:

Re-align a model's weights to 4096 bytes
========================================

An exporter writes the weights back to back, each tensor wherever the
sizes of the previous ones put it. A runtime that memory-maps the weights
file wants each tensor to start on a page (a multiple of 4096 bytes).
Re-aligning rewrites the weights file with aligned offsets; the weights
themselves do not change, and they are never loaded in memory: the kernel
copies them from file to file.

This example re-aligns a model saved by :func:`onnx.save` (``model.onnx`` +
``model.onnx.data``) with
:func:`onnx_light.onnx.align_external_data_streaming` and with
``onnx-light align``, shows the offsets before and after, and checks that
every tensor holds the same bytes and that onnxruntime computes the same
outputs. The options (shards, in place, small tensors back inline) are in
:ref:`l-howto-align-external-data-streaming`.
"""

# %%
# A model as an exporter writes it
# --------------------------------
#
# :func:`onnx_light.bench.make_gemm_model` builds a chain of Gemm nodes,
# with a small int64 table first (``lead_table``), as exporters often
# write: saved by :func:`onnx.save` with external data, no weight then
# starts on a page.

import os
import shutil
import tempfile
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import onnx
import onnxruntime
import pandas

import onnx_light.onnx as onnxl
from onnx_light.bench import (
    legend_beside,
    make_gemm_model,
    model_inputs,
    show_command,
    sized,
    tensor_places,
    tool_color,
)

N_WEIGHTS, DIM = sized((12, 1000), quick=(4, 300))
PAGE = 4096

folder = tempfile.mkdtemp(prefix="onnx-light-realign-")
src = os.path.join(folder, "model.onnx")
onnx.save(
    make_gemm_model(N_WEIGHTS, DIM, lead_table=2000),
    src,
    save_as_external_data=True,
    location="model.onnx.data",
)
print(f"model.onnx.data: {os.path.getsize(src + '.data') / 2**20:.2f} MiB")

# %%
# Where each tensor lives (file, offset, length):
# :func:`onnx_light.bench.tensor_places` reads the ``.onnx`` only, the
# references and not the weights (``load_external_data=False``).

before = tensor_places(src).set_index("name")
before["offset % 4096"] = before.offset % PAGE
before.head(7)

# %%
# Re-align with the Python API
# ----------------------------
#
# The destination is a new pair of files, ``aligned.onnx`` and its weights
# ``aligned.onnx.data`` (a name relative to the new model's folder). The
# result is the number of bytes written, padding included, and says what
# moved.

result = onnxl.align_external_data_streaming(
    src, os.path.join(folder, "aligned.onnx"), "aligned.onnx.data", alignment=PAGE
)
written = [os.path.basename(p) for p in result.weights_paths]
print(f"{int(result)} bytes written to {written}, {result.moved} tensors moved")

# %%
# Re-align with the command line
# ------------------------------
#
# ``onnx-light align SRC DST`` does the same; the weights go to
# ``DST.data`` unless ``--weights`` names them, and the alignment is 4096
# unless ``--alignment`` says otherwise. The command prints a one-line
# summary (and a progress bar on a terminal). The example runs it as
# ``python -m onnx_light``, the same command, in its folder
# (:func:`onnx_light.bench.show_command`).

show_command("align", "model.onnx", "aligned_cli.onnx", "--alignment", "4096", cwd=folder)

# %%
# Both ways give byte-identical weights files: one planner decides the
# offsets for the API and the command line.

api_bytes = Path(folder, "aligned.onnx.data").read_bytes()
assert api_bytes == Path(folder, "aligned_cli.onnx.data").read_bytes()
print(f"aligned.onnx.data == aligned_cli.onnx.data: {len(api_bytes)} bytes")

# %%
# Offsets before and after
# ------------------------
#
# Every offset is now a multiple of 4096; each tensor keeps its length, and
# the padding between two tensors is zeros.

after = tensor_places(os.path.join(folder, "aligned.onnx")).set_index("name")
table = pandas.DataFrame(
    {
        "length": before.length,
        "offset before": before.offset,
        "offset after": after.offset,
        "after % 4096": after.offset % PAGE,
    }
)
assert (table["after % 4096"] == 0).all()
assert (after.length == before.length).all()
table.head(9)

# %%
# The same bytes, the same outputs
# --------------------------------
#
# The new weights file is rebuilt by hand from the old one: each tensor's
# bytes put at its new offset, zeros everywhere else. It must be the file
# onnx-light wrote, byte for byte. Then onnxruntime runs the models on the
# same inputs.

old_bytes = Path(src + ".data").read_bytes()
rebuilt = bytearray(len(api_bytes))
for name, row in before.iterrows():
    new = after.loc[name]
    rebuilt[new.offset : new.offset + new.length] = old_bytes[row.offset : row.offset + row.length]
assert rebuilt == api_bytes
print(f"{len(before)} tensors: same bytes before and after, zeros between them")


def run(path: str) -> np.ndarray:
    so = onnxruntime.SessionOptions()
    so.log_severity_level = 3  # no warning about the unused table
    sess = onnxruntime.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    return sess.run(None, model_inputs(DIM))[0]


expected = run(src)
for name in ("aligned.onnx", "aligned_cli.onnx"):
    np.testing.assert_array_equal(run(os.path.join(folder, name)), expected)
print(f"onnxruntime: outputs {expected.shape} identical for the three models")

# %%
# The picture
# -----------
#
# For each tensor, the largest power of two that divides its offset: the
# alignment it has. Before, no tensor is on a page; after, every tensor is on
# a page or better. (The table at offset 0 is aligned to anything, and left
# out.)

shown = table[table["offset before"] > 0]


def pow2(offsets: pandas.Series) -> np.ndarray:
    values = offsets.to_numpy()
    return values & -values  # the lowest set bit: the largest power of two dividing it


print(
    f"best alignment before: {pow2(shown['offset before']).max()} bytes, "
    f"worst after: {pow2(shown['offset after']).min()} bytes"
)


def bytes_label(value: float, _pos=None) -> str:
    value = int(value)
    return f"{value >> 10} KiB" if value >= 1024 else f"{value} B"


x = np.arange(len(shown))
fig, ax = plt.subplots(figsize=(8, 4.2))
before, after = tool_color("onnx"), tool_color("onnx-light")  # who wrote each layout
ax.bar(x - 0.2, pow2(shown["offset before"]), 0.4, label="before (onnx.save)", color=before)
ax.bar(x + 0.2, pow2(shown["offset after"]), 0.4, label="after (re-aligned)", color=after)
ax.axhline(PAGE, color="black", ls="--", lw=1.5, label="a page (4 KiB)")
ax.set_yscale("log", base=2)
ax.set_ylim(8, 2 * pow2(shown["offset after"]).max())
ax.yaxis.set_major_formatter(bytes_label)
ax.set_xticks(x, shown.index, rotation=90 if len(shown) > 12 else 0)
ax.set_xlabel("tensor (in file order)")
ax.set_ylabel("offset is a multiple of (bytes)")
ax.set_title("Every tensor starts on a page after re-aligning")
legend_beside(ax)
fig.tight_layout()
plt.show()

# %%
# Clean up
# --------

shutil.rmtree(folder, ignore_errors=True)

# %%
# Related examples
# ----------------
#
# * :ref:`l-example-plot-inspect-verify`: ``onnx-light info`` shows these
#   offsets without any code.
# * :ref:`l-example-plot-shards`: re-align into several files.
# * :ref:`l-example-plot-align-external-data-streaming`: time and memory of
#   a re-align, against onnx and onnx-ir.
